package metadata

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// send sends one request with the given headers and returns the status,
// the answer's headers and its body.
func send(t *testing.T, addr, method, path string, headers map[string]string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, "http://"+addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

// TestTokenRequired checks that every route but the token's answers 401
// without a valid session token, and that the token route takes only a
// PUT with a lifetime, from no proxy.
func TestTokenRequired(t *testing.T) {
	s := New()
	defer s.Close()
	s.SetSimulated(true)
	addr, err := s.Listen("i-1")
	if err != nil {
		t.Fatal(err)
	}
	s.Set("i-1", Document{Offering: "o"})
	for _, r := range []struct{ method, path string }{
		{"GET", "/v1/instance"}, {"HEAD", "/v1/instance"}, {"GET", "/v1/instance-action"}, {"GET", "/v1/spot/instance-action"},
		{"GET", "/v1/spot/rebalance-recommendation"}, {"GET", "/v1/scale-in-lock"}, {"PUT", "/v1/scale-in-lock"},
		{"DELETE", "/v1/scale-in-lock"}, {"GET", "/v1/load"}, {"PUT", "/v1/load"}, {"GET", "/v1/nothing"},
	} {
		for _, tok := range []string{"", "v1.garbage", "v1." + strings.Repeat("A", 54), "Bearer x"} {
			status, _, body := send(t, addr, r.method, r.path, map[string]string{TokenHeader: tok})
			if status != http.StatusUnauthorized {
				t.Fatalf("%s %s with token %q: %d %s, want 401", r.method, r.path, tok, status, body)
			}
			if r.method != "HEAD" && !strings.Contains(body, `"code":"unauthenticated"`) {
				t.Fatalf("%s %s: body %s", r.method, r.path, body)
			}
		}
	}
	tests := []struct {
		desc    string
		method  string
		headers map[string]string
		want    int
	}{
		{desc: "GET", method: "GET", headers: map[string]string{TokenTTLHeader: "60"}, want: 405},
		{desc: "POST", method: "POST", headers: map[string]string{TokenTTLHeader: "60"}, want: 405},
		{desc: "no lifetime", method: "PUT", want: 400},
		{desc: "zero lifetime", method: "PUT", headers: map[string]string{TokenTTLHeader: "0"}, want: 400},
		{desc: "too long", method: "PUT", headers: map[string]string{TokenTTLHeader: "21601"}, want: 400},
		{desc: "not a number", method: "PUT", headers: map[string]string{TokenTTLHeader: "1h"}, want: 400},
		{desc: "through a proxy", method: "PUT", headers: map[string]string{TokenTTLHeader: "60", "X-Forwarded-For": "203.0.113.9"}, want: 403},
		{desc: "longest", method: "PUT", headers: map[string]string{TokenTTLHeader: "21600"}, want: 200},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			status, h, body := send(t, addr, tt.method, TokenPath, tt.headers)
			if status != tt.want {
				t.Fatalf("status %d (%s), want %d", status, body, tt.want)
			}
			if status == 200 && (h.Get("Content-Type") != "text/plain" || h.Get(TokenTTLHeader) != "21600" || !strings.HasPrefix(body, "v1.") ||
				h.Get("Cache-Control") != "no-store") {
				t.Fatalf("token answer %v %q", h, body)
			}
		})
	}
}

// TestTokenScope checks that a token works for its own instance only,
// until it expires or the instance is deleted.
func TestTokenScope(t *testing.T) {
	s := New()
	defer s.Close()
	now := time.Now()
	s.now = func() time.Time { return now }
	addrs := map[string]string{}
	for _, id := range []string{"a", "b"} {
		addr, err := s.Listen(id)
		if err != nil {
			t.Fatal(err)
		}
		addrs[id] = addr
		s.Set(id, Document{Offering: "off-" + id})
	}
	status, _, ta := send(t, addrs["a"], "PUT", TokenPath, map[string]string{TokenTTLHeader: "30"})
	if status != 200 {
		t.Fatal(status, ta)
	}
	doc := func(id, tok string) (int, string) {
		status, _, body := send(t, addrs[id], "GET", "/v1/instance", map[string]string{TokenHeader: tok})
		var d Document
		_ = json.Unmarshal([]byte(body), &d)
		return status, d.ID
	}
	if status, id := doc("a", ta); status != 200 || id != "a" {
		t.Fatalf("a's token at a: %d %q", status, id)
	}
	if status, _ := doc("b", ta); status != 401 {
		t.Fatalf("a's token at b: %d, want 401", status)
	}
	// Tampered: another expiry with the same MAC.
	c := "A"
	if ta[4] == 'A' {
		c = "B"
	}
	if status, _ := doc("a", ta[:4]+c+ta[5:]); status != 401 {
		t.Fatalf("tampered token: %d, want 401", status)
	}
	now = now.Add(29 * time.Second)
	if status, _ := doc("a", ta); status != 200 {
		t.Fatalf("token before its expiry: %d", status)
	}
	now = now.Add(time.Second)
	if status, _ := doc("a", ta); status != 401 {
		t.Fatalf("expired token: %d, want 401", status)
	}
	// A token of a deleted instance does not work for its next run.
	_, _, ta = send(t, addrs["a"], "PUT", TokenPath, map[string]string{TokenTTLHeader: "30"})
	s.Delete("a")
	again, err := s.Listen("a")
	if err != nil {
		t.Fatal(err)
	}
	addrs["a"] = again
	s.Set("a", Document{})
	if status, _ := doc("a", ta); status != 401 {
		t.Fatalf("token of the deleted instance: %d, want 401", status)
	}
	// Another agent (another key) does not take this one's tokens.
	other := New()
	if other.validToken("b", ta) {
		t.Fatal("another agent's key accepted the token")
	}
}
