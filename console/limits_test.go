package console_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/console"
	"github.com/gpucloud/gpucloud/httpapi"
	"github.com/gpucloud/gpucloud/testkit"
)

// lookupStore counts the token lookups (TokenByHash) of the store it
// wraps: every session cookie the console checks against the store.
type lookupStore struct {
	cloud.Store
	lookups atomic.Int64
}

func (s *lookupStore) Tx(ctx context.Context, fn func(cloud.Tx) error) error {
	return s.Store.Tx(ctx, func(tx cloud.Tx) error { return fn(lookupTx{Tx: tx, s: s}) })
}

type lookupTx struct {
	cloud.Tx
	s *lookupStore
}

func (t lookupTx) TokenByHash(ctx context.Context, hash []byte, now time.Time) (*cloud.Token, error) {
	t.s.lookups.Add(1)
	return t.Tx.TokenByHash(ctx, hash, now)
}

// limitedWorld is a world whose shared limiter runs on its own frozen
// clock (the limiter's, not the services'), so that no bucket refills
// unless the test moves it.
type limitedWorld struct {
	*world
	st    *lookupStore
	clock *testkit.Clock
}

func newLimitedWorld(t *testing.T, lim httpapi.RateLimits) *limitedWorld {
	lw := &limitedWorld{st: &lookupStore{Store: sqliteStore(t)}, clock: testkit.NewClock(testkit.Epoch)}
	lim.Now = lw.clock.Now
	lw.world = newWorldLimited(t, lw.st, lim)
	// The world's setup spent tokens of the members' buckets; a minute
	// refills them all.
	lw.clock.Advance(time.Minute)
	return lw
}

// req is one request to the server's handler (API and console), from
// the source address addr, with the session cookie (when not empty), the
// bearer token (when not empty) and extra headers.
type req struct {
	method, path, addr, cookie, bearer string
	form                               url.Values
	header                             map[string]string
}

func (lw *limitedWorld) serve(q req) *httptest.ResponseRecorder {
	var r *http.Request
	if q.form != nil {
		r = httptest.NewRequest(q.method, q.path, strings.NewReader(q.form.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	} else {
		r = httptest.NewRequest(q.method, q.path, nil)
	}
	r.RemoteAddr = q.addr + ":40000"
	if q.cookie != "" {
		r.Header.Set("Cookie", console.SessionCookie+"="+q.cookie)
	}
	if q.bearer != "" {
		r.Header.Set("Authorization", "Bearer "+q.bearer)
	}
	for k, v := range q.header {
		r.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	lw.Server.Config.Handler.ServeHTTP(rec, r)
	return rec
}

// randomSecret is a well-formed token that no one was issued.
func randomSecret(t *testing.T) string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "gpc_tk-" + hex.EncodeToString(b[:8]) + "_" + hex.EncodeToString(b[8:])
}

// tally counts a run's answers by status.
type tally map[int]int

// TestConsoleCookieFlood: random session cookies from one address are
// failed authentications of the address, as bad bearer tokens are. Past
// the failed-authentication burst, every one is answered 429 with
// Retry-After (a page, or JSON to a script that asks for it) without a
// token lookup; the API refuses the address's bad tokens too, since it
// is the same bucket. A user whose token authenticated before keeps
// working from the address, another address is unaffected, and the
// address gets one more try per token the bucket refills.
func TestConsoleCookieFlood(t *testing.T) {
	const burst = httpapi.DefaultAuthFailureBurst
	cases := []struct {
		name     string
		n        int
		addr     string
		method   string
		path     string
		header   map[string]string
		cookie   func(t *testing.T) string
		lookups  int64 // token lookups in all
		answered int   // the status under the limit
		body     string
	}{
		{name: "pages", n: 3000, addr: "198.51.100.1", method: "GET", path: "/instances", cookie: randomSecret,
			lookups: burst, answered: http.StatusSeeOther, body: "Too many requests"},
		{name: "json", n: 300, addr: "198.51.100.2", method: "GET", path: "/billing/meter", cookie: randomSecret,
			header: map[string]string{"Accept": "application/json"}, lookups: burst, answered: http.StatusUnauthorized, body: `"error"`},
		{name: "posts", n: 300, addr: "198.51.100.3", method: "POST", path: "/instances/i-x/stop", cookie: randomSecret,
			lookups: burst, answered: http.StatusUnauthorized, body: "Too many requests"},
		{name: "no such page", n: 300, addr: "198.51.100.4", method: "GET", path: "/nope", cookie: randomSecret,
			lookups: burst, answered: http.StatusNotFound, body: "Too many requests"},
		{name: "malformed cookies", n: 300, addr: "198.51.100.5", method: "GET", path: "/instances",
			cookie: func(t *testing.T) string { return "x" + randomSecret(t) }, lookups: 0, answered: http.StatusSeeOther, body: "Too many requests"},
		{name: "an IPv6 /64", n: 300, addr: "[2001:db8:1:2::1]", method: "GET", path: "/instances", cookie: randomSecret,
			lookups: burst, answered: http.StatusSeeOther, body: "Too many requests"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			lw := newLimitedWorld(t, httpapi.RateLimits{})
			// A member who logged in from the address before the flood.
			known := lw.serve(req{method: "POST", path: "/login", addr: c.addr, form: url.Values{"token": {lw.acme.Token}}})
			if known.Code != http.StatusSeeOther {
				t.Fatalf("login: %d", known.Code)
			}
			unseen := lw.Member("initech", "carol")
			lw.st.lookups.Store(0)
			got, limitedAt := tally{}, 0
			for i := 0; i < c.n; i++ {
				addr := c.addr
				if c.addr[0] == '[' {
					// The rest of the /64 is the same source.
					addr = "[2001:db8:1:2::" + hex.EncodeToString([]byte{byte(i)}) + "]"
				}
				rec := lw.serve(req{method: c.method, path: c.path, addr: addr, cookie: c.cookie(t), header: c.header})
				got[rec.Code]++
				switch rec.Code {
				case c.answered:
				case http.StatusTooManyRequests:
					if limitedAt == 0 {
						limitedAt = i
					}
					if ra := rec.Header().Get("Retry-After"); ra != "1" {
						t.Fatalf("request %d: Retry-After %q", i, ra)
					}
					if !strings.Contains(rec.Body.String(), c.body) || !strings.Contains(rec.Body.String(), "too many failed authentications") {
						t.Fatalf("request %d: 429 body %s", i, rec.Body)
					}
				default:
					t.Fatalf("request %d: %d %s", i, rec.Code, rec.Body)
				}
			}
			if got[c.answered] != burst || got[http.StatusTooManyRequests] != c.n-burst || limitedAt != burst {
				t.Errorf("%d cookies: %v, limited from request %d; want %d × %d then 429", c.n, got, limitedAt, burst, c.answered)
			}
			if n := lw.st.lookups.Load(); n != c.lookups {
				t.Errorf("%d token lookups; want %d (none past the limit)", n, c.lookups)
			}
			t.Logf("%d random cookies from %s: %v (Retry-After 1), %d token lookups", c.n, c.addr, got, lw.st.lookups.Load())

			// The same bucket refuses the address's bad API tokens, and a
			// login with a good token this server has not seen work.
			if rec := lw.serve(req{method: "GET", path: "/v1/instances", addr: c.addr, bearer: randomSecret(t)}); rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" {
				t.Errorf("API with a bad token from the flooded address: %d", rec.Code)
			}
			if rec := lw.serve(req{method: "POST", path: "/login", addr: c.addr, form: url.Values{"token": {unseen.Token}}}); rec.Code != http.StatusTooManyRequests ||
				!strings.Contains(rec.Body.String(), "Too many failed logins") || rec.Header().Get("Retry-After") == "" {
				t.Errorf("login of an unseen token from the flooded address: %d %s", rec.Code, rec.Body)
			}
			// The member who authenticated before keeps working there;
			// another address is unaffected.
			if rec := lw.serve(req{method: "GET", path: "/instances", addr: c.addr, cookie: lw.acme.Token}); rec.Code != http.StatusOK {
				t.Errorf("known session from the flooded address: %d", rec.Code)
			}
			if rec := lw.serve(req{method: "GET", path: "/instances", addr: "192.0.2.9", cookie: randomSecret(t)}); rec.Code != http.StatusSeeOther {
				t.Errorf("a bad cookie from another address: %d", rec.Code)
			}
			// A second refills one token (10 per second): one more try,
			// then 429 again.
			lw.clock.Advance(100 * time.Millisecond)
			before := lw.st.lookups.Load()
			for i, want := range []int{c.answered, http.StatusTooManyRequests} {
				if rec := lw.serve(req{method: c.method, path: c.path, addr: c.addr, cookie: c.cookie(t), header: c.header}); rec.Code != want {
					t.Errorf("after a refill, request %d: %d, want %d", i, rec.Code, want)
				}
			}
			if n := lw.st.lookups.Load() - before; n != c.lookups/burst {
				t.Errorf("after a refill: %d lookups, want %d", n, c.lookups/burst)
			}
		})
	}
}

// TestConsoleMemberRateLimit: one member's rapid page loads take from
// the member's request bucket: past its burst they are answered 429 with
// Retry-After, on a page. Another member, and the admin, are unaffected,
// and the bucket refills at the member's rate.
func TestConsoleMemberRateLimit(t *testing.T) {
	const n = 3000
	lw := newLimitedWorld(t, httpapi.RateLimits{})
	addr := "198.51.100.1"
	got, limitedAt := tally{}, 0
	for i := 0; i < n; i++ {
		rec := lw.serve(req{method: "GET", path: "/instances", addr: addr, cookie: lw.acme.Token})
		got[rec.Code]++
		switch rec.Code {
		case http.StatusOK:
		case http.StatusTooManyRequests:
			if limitedAt == 0 {
				limitedAt = i
			}
			if ra := rec.Header().Get("Retry-After"); ra != "1" {
				t.Fatalf("request %d: Retry-After %q", i, ra)
			}
			if body := rec.Body.String(); !strings.Contains(body, "<h1>Too many requests</h1>") || !strings.Contains(body, "user "+lw.acme.User.ID+" may send 50 requests per second, 500 at once") {
				t.Fatalf("request %d: 429 page %s", i, body)
			}
		default:
			t.Fatalf("request %d: %d", i, rec.Code)
		}
	}
	if got[http.StatusOK] != httpapi.DefaultMemberBurst || got[http.StatusTooManyRequests] != n-httpapi.DefaultMemberBurst || limitedAt != httpapi.DefaultMemberBurst {
		t.Errorf("%d GETs: %v, limited from %d; want %d × 200 then 429", n, got, limitedAt, httpapi.DefaultMemberBurst)
	}
	t.Logf("%d GETs of /instances from one member: %v (Retry-After 1)", n, got)
	for _, c := range []struct {
		name, cookie string
		want         int
	}{
		{"another member", lw.glob.Token, http.StatusOK},
		{"the admin", lw.AdminToken, http.StatusOK},
		{"the member again", lw.acme.Token, http.StatusTooManyRequests},
	} {
		if rec := lw.serve(req{method: "GET", path: "/instances", addr: addr, cookie: c.cookie}); rec.Code != c.want {
			t.Errorf("%s: %d, want %d", c.name, rec.Code, c.want)
		}
	}
	// Logging in again is one more request of the member's: refused on
	// the login page, with the member's limit, not as a failed login.
	rec := lw.serve(req{method: "POST", path: "/login", addr: addr, form: url.Values{"token": {lw.acme.Token}}})
	if body := rec.Body.String(); rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "1" ||
		!strings.Contains(body, "Too many requests: user "+lw.acme.User.ID) || strings.Contains(body, "failed logins") {
		t.Errorf("login past the member's burst: %d %s", rec.Code, body)
	}
	// A second refills 50.
	lw.clock.Advance(time.Second)
	got = tally{}
	for i := 0; i < 100; i++ {
		got[lw.serve(req{method: "GET", path: "/instances", addr: addr, cookie: lw.acme.Token}).Code]++
	}
	if got[http.StatusOK] != httpapi.DefaultMemberRate || got[http.StatusTooManyRequests] != 100-httpapi.DefaultMemberRate {
		t.Errorf("a second later, 100 GETs: %v; want %d × 200", got, httpapi.DefaultMemberRate)
	}
}

// TestConsoleSharesAPIBucket: a member's API calls and console pages take
// from one bucket, in both directions, at the tenant's quota rate when
// it sets one; another member's bucket is untouched.
func TestConsoleSharesAPIBucket(t *testing.T) {
	cases := []struct {
		name  string
		quota *api.QuotaSpec // acme's, or nil for the defaults
		burst int
		// api are the calls through the API first; the console then has
		// burst-api pages.
		api int
	}{
		{name: "the API drains the console", burst: httpapi.DefaultMemberBurst, api: 400},
		{name: "the API drains it all", burst: httpapi.DefaultMemberBurst, api: httpapi.DefaultMemberBurst},
		{name: "the console drains the API", burst: httpapi.DefaultMemberBurst, api: 0},
		{name: "a tenant's quota", quota: &api.QuotaSpec{RequestsPerSecond: 2, Burst: 20}, burst: 20, api: 15},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			lw := newLimitedWorld(t, httpapi.RateLimits{})
			if c.quota != nil {
				if _, err := lw.Admin.SetQuota(context.Background(), lw.acme.TenantID, *c.quota); err != nil {
					t.Fatal(err)
				}
			}
			addr := "198.51.100.1"
			apiGet := func(tok string) int {
				return lw.serve(req{method: "GET", path: "/v1/instances", addr: addr, bearer: tok}).Code
			}
			page := func(tok string) int {
				return lw.serve(req{method: "GET", path: "/instances", addr: addr, cookie: tok}).Code
			}
			for i := 0; i < c.api; i++ {
				if code := apiGet(lw.acme.Token); code != http.StatusOK {
					t.Fatalf("API call %d: %d", i, code)
				}
			}
			pages := 0
			for pages < c.burst+1 && page(lw.acme.Token) == http.StatusOK {
				pages++
			}
			if pages != c.burst-c.api {
				t.Errorf("after %d API calls, %d console pages; want %d", c.api, pages, c.burst-c.api)
			}
			if code := apiGet(lw.acme.Token); code != http.StatusTooManyRequests {
				t.Errorf("API after the console drained the bucket: %d", code)
			}
			if code, pg := apiGet(lw.glob.Token), page(lw.glob.Token); code != http.StatusOK || pg != http.StatusOK {
				t.Errorf("another member: API %d, console %d", code, pg)
			}
		})
	}
}

// TestConsoleGroupIsolation: another tenant's group page answers "not
// found" exactly as a missing group's, naming nothing of it (the
// instances' and stacks' pages have theirs in TestTenantIsolation and the
// stacks test).
func TestConsoleGroupIsolation(t *testing.T) {
	w := newWorld(t, sqliteStore(t))
	g, err := w.glob.Client.CreateGroup(context.Background(), api.CreateGroupRequest{Name: "globex-secret-group", Min: 0, Max: 1,
		Template: cloud.GroupTemplate{Offerings: []string{"h100.1x"}}}, "")
	if err != nil {
		t.Fatal(err)
	}
	own := w.browser(t)
	own.login(w.glob.Token)
	if p := own.get("/groups/" + g.ID); p.status != http.StatusOK || !strings.Contains(p.body, "globex-secret-group") {
		t.Fatalf("the owner's group page: %d", p.status)
	}
	b := w.browser(t)
	b.login(w.acme.Token)
	missing := b.get("/groups/g-doesnotexist")
	for _, path := range []string{"/groups/" + g.ID, "/groups/" + g.ID + "?tenant=" + w.glob.TenantID} {
		p := b.get(path)
		if p.status != http.StatusNotFound || strings.Contains(p.body, "globex-secret-group") {
			t.Errorf("acme reads %s: %d", path, p.status)
		}
		if strings.ReplaceAll(p.body, g.ID, "X") != strings.ReplaceAll(missing.body, "g-doesnotexist", "X") {
			t.Errorf("%s differs from a missing group's page", path)
		}
	}
	if p := b.get("/groups"); strings.Contains(p.body, g.ID) || strings.Contains(p.body, "globex-secret-group") {
		t.Errorf("acme's group list shows globex's group")
	}
}
