package controlplane

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/console"
	"github.com/gpucloud/gpucloud/httpapi"
	"github.com/gpucloud/gpucloud/testkit"
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

// TestConsoleSharesAPILimiter: the replica hands the API and the console
// one limiter (cfg.Limits, on a frozen clock here): a member's API calls
// and console pages drain one bucket, and random session cookies drain
// the address's failed authentications, which then refuse the API's bad
// tokens too.
func TestConsoleSharesAPILimiter(t *testing.T) {
	ctx := context.Background()
	clock := testkit.NewClock(testkit.Epoch)
	s, err := Start(ctx, Config{DB: "sqlite://" + filepath.Join(t.TempDir(), "gpucloud.db"), Listen: "127.0.0.1:0", Log: quiet,
		Limits: httpapi.RateLimits{Member: httpapi.Limit{Rate: 1, Burst: 5}, AuthFailures: httpapi.Limit{Rate: 1, Burst: 5}, Now: clock.Now}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	admin := client.New(s.URL, s.AdminToken, s.HTTPClient())
	tn, err := admin.CreateTenant(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	u, err := admin.CreateUser(ctx, tn.ID, api.CreateUserRequest{Name: "dev"})
	if err != nil {
		t.Fatal(err)
	}
	hc := s.HTTPClient()
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	get := func(path, cookie, bearer string) *http.Response {
		req, err := http.NewRequestWithContext(ctx, "GET", s.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if cookie != "" {
			req.Header.Set("Cookie", console.SessionCookie+"="+cookie)
		}
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	steps := []struct {
		name           string
		n              int
		path           string
		cookie, bearer string
		want           int
	}{
		{"the member's API calls", 3, "/v1/instances", "", u.Secret, http.StatusOK},
		{"the member's pages, what is left", 2, "/instances", u.Secret, "", http.StatusOK},
		{"a page past the member's burst", 1, "/instances", u.Secret, "", http.StatusTooManyRequests},
		{"an API call past it", 1, "/v1/instances", "", u.Secret, http.StatusTooManyRequests},
		{"random cookies", 5, "/instances", "gpc_tk-0000000000000000_guess", "", http.StatusSeeOther},
		{"a cookie past the address's failures", 1, "/instances", "gpc_tk-0000000000000000_guess", "", http.StatusTooManyRequests},
		{"a bad API token past them", 1, "/v1/instances", "", "gpc_tk-0000000000000000_guess", http.StatusTooManyRequests},
	}
	for _, st := range steps {
		for i := 0; i < st.n; i++ {
			resp := get(st.path, st.cookie, st.bearer)
			if resp.StatusCode != st.want {
				t.Fatalf("%s, %d: %d, want %d", st.name, i, resp.StatusCode, st.want)
			}
			if st.want == http.StatusTooManyRequests && resp.Header.Get("Retry-After") == "" {
				t.Errorf("%s: 429 without Retry-After", st.name)
			}
		}
	}
}
