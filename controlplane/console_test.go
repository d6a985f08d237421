package controlplane

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
)

// TestConsoleLoginIsRateLimited: wrong tokens typed on the console's login
// page count against the API's failed-authentication limit of the
// address, so guessing through the console is throttled as through the
// API; a good token works before that.
func TestConsoleLoginIsRateLimited(t *testing.T) {
	s := start(t, "sqlite://"+filepath.Join(t.TempDir(), "gpucloud.db"))
	defer s.Close(context.Background())
	hc := s.HTTPClient()
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	login := func(tok string) (int, string) {
		resp, err := hc.PostForm(s.URL+"/login", url.Values{"token": {tok}})
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := login(s.AdminToken); code != http.StatusSeeOther {
		t.Fatalf("good token: %d", code)
	}
	limited := 0
	for i := 0; i < 200 && limited == 0; i++ {
		code, body := login("gpc_tk-0000000000000000_guess" + strings.Repeat("x", i%7))
		switch code {
		case http.StatusUnauthorized:
		case http.StatusTooManyRequests:
			if !strings.Contains(body, "Too many failed logins") {
				t.Fatalf("429 page: %s", body)
			}
			limited = i
		default:
			t.Fatalf("guess %d: %d", i, code)
		}
	}
	if limited == 0 {
		t.Fatal("200 wrong tokens from one address were never limited")
	}
	t.Logf("limited after %d wrong tokens", limited)
}
