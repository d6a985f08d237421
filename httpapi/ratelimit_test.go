package httpapi

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/internal/rest"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

func TestBucket(t *testing.T) {
	lim := Limit{Rate: 2, Burst: 3}
	type step struct {
		at   time.Duration // since the start
		op   string        // take, wait or charge
		lim  Limit         // lim when zero
		want time.Duration // what take and wait answer
	}
	const ms = time.Millisecond
	for _, c := range []struct {
		name  string
		steps []step
	}{
		{"a new bucket is full: a burst passes at once, then one waits for a token", []step{
			{0, "take", Limit{}, 0}, {0, "take", Limit{}, 0}, {0, "take", Limit{}, 0},
			{0, "take", Limit{}, 500 * ms}, {0, "wait", Limit{}, 500 * ms}}},
		{"tokens come back at the rate", []step{
			{0, "take", Limit{}, 0}, {0, "take", Limit{}, 0}, {0, "take", Limit{}, 0},
			{250 * ms, "take", Limit{}, 250 * ms}, {500 * ms, "take", Limit{}, 0},
			{500 * ms, "take", Limit{}, 500 * ms}, {time.Second, "take", Limit{}, 0}}},
		{"an idle bucket refills to its burst and no further", []step{
			{0, "take", Limit{}, 0}, {0, "take", Limit{}, 0}, {0, "take", Limit{}, 0},
			{time.Hour, "take", Limit{}, 0}, {time.Hour, "take", Limit{}, 0}, {time.Hour, "take", Limit{}, 0},
			{time.Hour, "take", Limit{}, 500 * ms}}},
		{"a refused take takes nothing", []step{
			{0, "take", Limit{}, 0}, {0, "take", Limit{}, 0}, {0, "take", Limit{}, 0},
			{0, "take", Limit{}, 500 * ms}, {0, "take", Limit{}, 500 * ms}, {500 * ms, "take", Limit{}, 0}}},
		{"a charge on an empty bucket leaves it empty, not in debt", []step{
			{0, "charge", Limit{}, 0}, {0, "charge", Limit{}, 0}, {0, "charge", Limit{}, 0},
			{0, "charge", Limit{}, 0}, {0, "charge", Limit{}, 0}, {0, "wait", Limit{}, 500 * ms},
			{500 * ms, "wait", Limit{}, 0}}},
		{"a smaller limit caps what is left", []step{
			{0, "take", Limit{}, 0}, {0, "take", Limit{Rate: 1, Burst: 1}, 0},
			{0, "take", Limit{Rate: 1, Burst: 1}, time.Second}}},
		{"a new rate applies from the change on", []step{
			{0, "take", Limit{}, 0}, {0, "take", Limit{}, 0}, {0, "take", Limit{}, 0},
			{250 * ms, "wait", Limit{Rate: 10, Burst: 3}, 250 * ms / 5}, {300 * ms, "wait", Limit{Rate: 10, Burst: 3}, 0}}},
		{"a clock that steps back refills nothing", []step{
			{time.Second, "take", Limit{}, 0}, {time.Second, "take", Limit{}, 0}, {time.Second, "take", Limit{}, 0},
			{0, "take", Limit{}, 500 * ms}, {1500 * ms, "take", Limit{}, 0}}},
		{"wait on a key without a bucket answers 0", []step{{0, "wait", Limit{}, 0}, {0, "wait", Limit{}, 0}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := newBuckets(16)
			t0 := time.Unix(1_000_000, 0)
			for i, s := range c.steps {
				l := s.lim
				if l == (Limit{}) {
					l = lim
				}
				var got time.Duration
				switch s.op {
				case "take":
					got = b.take("k", l, t0.Add(s.at))
				case "wait":
					got = b.wait("k", l, t0.Add(s.at))
				case "charge":
					b.charge("k", l, t0.Add(s.at))
				}
				if (got - s.want).Abs() > time.Microsecond {
					t.Errorf("step %d (%s at %v): %v, want %v", i, s.op, s.at, got, s.want)
				}
			}
		})
	}
}

func TestBucketsStayBounded(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	lim := Limit{Rate: 2, Burst: 3}

	// At the cap, a new key evicts another: the count never passes it.
	small := newBuckets(8)
	for i := range 100 {
		small.take(fmt.Sprint("k", i), lim, t0)
		if n := small.len(); n > 8 {
			t.Fatalf("%d buckets after %d keys, cap 8", n, i+1)
		}
	}

	// Buckets that refilled are swept a minute later; busy ones stay.
	b := newBuckets(1 << 20)
	for i := range 1500 {
		b.take(fmt.Sprint("idle", i), lim, t0)
	}
	if n := b.len(); n != 1500 {
		t.Fatalf("%d buckets, want 1500: a sweep dropped buckets that were not full", n)
	}
	later := t0.Add(sweepEvery)
	for range 3 {
		b.take("busy", lim, later)
	}
	b.take("new", lim, later.Add(time.Millisecond))
	if n := b.len(); n != 2 {
		t.Errorf("%d buckets after the sweep, want 2 (busy and new)", n)
	}
	if d := b.take("busy", lim, later.Add(time.Millisecond)); d == 0 {
		t.Error("the sweep forgot a bucket that was not full: it passed a request over its limit")
	}

	// The expiring caches drop what expired, then everything, at their cap.
	c := newExpiring[string, int](4)
	for i := range 4 {
		c.put(fmt.Sprint(i), i, t0.Add(time.Duration(i)*time.Second), t0)
	}
	c.put("new", 9, t0.Add(time.Hour), t0.Add(2*time.Second))
	if _, ok := c.get("3", t0.Add(2*time.Second)); !ok {
		t.Error("an entry that had not expired was dropped while expired ones could go")
	}
	for i := range 50 {
		c.put(fmt.Sprint("x", i), i, t0.Add(time.Hour), t0)
		if len(c.m) > 4 {
			t.Fatalf("%d entries, cap 4", len(c.m))
		}
	}
}

func TestRetrySeconds(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want int
	}{
		{time.Nanosecond, 1}, {time.Second - 1, 1}, {time.Second, 1}, {time.Second + time.Millisecond, 2},
		{90 * time.Second, 90}, {0, 1},
	} {
		if got := retrySeconds(c.d); got != c.want {
			t.Errorf("retrySeconds(%v) = %d, want %d", c.d, got, c.want)
		}
	}
}

func TestRateLimitDefaults(t *testing.T) {
	d := DefaultRateLimits()
	if d.Member != (Limit{50, 500}) || d.Admin != (Limit{200, 2000}) || d.Agent != (Limit{200, 2000}) || d.AgentLiveness != (Limit{200, 2000}) ||
		d.AuthFailures != (Limit{10, 50}) || d.Anonymous != (Limit{10, 100}) || d.Invoke != (Limit{1000, 2000}) {
		t.Errorf("defaults %+v", d)
	}
	for _, c := range []struct {
		in, want Limit
	}{
		{Limit{}, d.Member},
		{Limit{Rate: 0.5, Burst: 1}, Limit{Rate: 0.5, Burst: 1}},
		{Limit{Rate: -1, Burst: 10}, d.Member},
		{Limit{Rate: 10, Burst: 0}, d.Member},
		{Limit{Rate: math.NaN(), Burst: 10}, d.Member},
		{Limit{Rate: math.Inf(1), Burst: 10}, d.Member},
	} {
		if got := (RateLimits{Member: c.in}).withDefaults().Member; got != c.want {
			t.Errorf("Member %+v: %+v, want %+v", c.in, got, c.want)
		}
		want := c.want
		if c.want == d.Member {
			want = d.AgentLiveness
		}
		if got := (RateLimits{AgentLiveness: c.in}).withDefaults().AgentLiveness; got != want {
			t.Errorf("AgentLiveness %+v: %+v, want %+v", c.in, got, want)
		}
	}
}

func TestLimitOf(t *testing.T) {
	rates := map[string][2]int{"tn-fast": {500, 0}, "tn-bursty": {0, 7}, "operator": {1000, 9000}}
	lookups := map[string]int{}
	l := newLimiter(RateLimits{}, func(_ context.Context, tenant string) (int, int, error) {
		lookups[tenant]++
		if tenant == "tn-down" {
			return 0, 0, errors.New("store down")
		}
		r := rates[tenant]
		return r[0], r[1], nil
	})
	d := DefaultRateLimits()
	member := func(tenant string) principal {
		return principal{UserID: "u-1", TenantID: tenant, Role: cloud.RoleMember, TokenID: "tk-1"}
	}
	agent := principal{UserID: "u-0", TenantID: "operator", Role: cloud.RoleAgent, TokenID: "tk-a", HostID: "h-1"}
	for _, c := range []struct {
		name    string
		p       principal
		rt      route // GET /v1/instances when zero
		key     string
		want    Limit
		lookups int
	}{
		{"a member without a tenant rate: the member default, keyed by user", member("tn-plain"), route{}, "u:u-1", d.Member, 1},
		{"an admin: the admin default", principal{UserID: "u-9", TenantID: "tn-plain", Role: cloud.RoleAdmin, TokenID: "tk-9"}, route{}, "u:u-9", d.Admin, 1},
		{"the tenant's rate replaces the default's, its burst stays", member("tn-fast"), route{}, "u:u-1", Limit{Rate: 500, Burst: d.Member.Burst}, 1},
		{"the tenant's burst alone", member("tn-bursty"), route{}, "u:u-1", Limit{Rate: d.Member.Rate, Burst: 7}, 1},
		{"the operator tenant's rate applies to its admins", principal{UserID: "u-0", TenantID: "operator", Role: cloud.RoleAdmin, TokenID: "tk-0"},
			route{}, "u:u-0", Limit{Rate: 1000, Burst: 9000}, 1},
		{"an agent credential: the agent default, keyed by token, whatever its tenant's rate",
			agent, route{}, "t:tk-a", d.Agent, 1},
		{"an agent's scale-in lock: the agent bucket", agent, route{Method: "POST", Path: "/v1/agent/instances/{id}/scale-in-lock"}, "t:tk-a", d.Agent, 0},
		{"an agent's logs: the agent bucket", agent, route{Method: "POST", Path: "/v1/agent/instances/{id}/logs"}, "t:tk-a", d.Agent, 0},
		{"an agent's heartbeat: its liveness bucket", agent, route{Method: "POST", Path: "/v1/agent/heartbeat"}, "l:tk-a", d.AgentLiveness, 0},
		{"an agent's assignment poll: its liveness bucket", agent, route{Method: "GET", Path: "/v1/agent/assignments"}, "l:tk-a", d.AgentLiveness, 0},
		{"a member on the heartbeat route: the member's bucket", member("tn-plain"), route{Method: "POST", Path: "/v1/agent/heartbeat"},
			"u:u-1", d.Member, 1},
		{"a join token: the member default, keyed by token", principal{UserID: "u-0", TenantID: "operator", Role: cloud.RoleJoin, TokenID: "tk-j"},
			route{}, "t:tk-j", d.Member, 1},
		{"a tenant whose rate cannot be read: the default, read again next time", member("tn-down"), route{}, "u:u-1", d.Member, 2},
		{"a member's call to an endpoint: the token's invoke bucket, whatever the tenant's rate", member("tn-fast"),
			route{Method: "POST", Path: "/v1/endpoints/{id}/run"}, "e:tk-1", d.Invoke, 0},
		{"an HTTP-mode request: the invoke bucket", member("tn-plain"), route{Method: "PUT", Path: endpointHTTPPath}, "e:tk-1", d.Invoke, 0},
		{"creating an endpoint: the member's bucket", member("tn-plain"), route{Method: "POST", Path: "/v1/endpoints"}, "u:u-1", d.Member, 1},
		{"an agent on an endpoint route: the agent bucket", agent, route{Method: "POST", Path: "/v1/endpoints/{id}/run"}, "t:tk-a", d.Agent, 0},
		{"an endpoint key: its own bucket at its own rate, whatever the tenant's", principal{TenantID: "tn-fast", Role: cloud.RoleInvoke, TokenID: "ek-1",
			EndpointID: "ep-1", KeyRate: 7, KeyBurst: 9}, route{Method: "POST", Path: "/v1/endpoints/{id}/run"}, "k:ek-1", Limit{Rate: 7, Burst: 9}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			clear(lookups)
			l.tenants.clear()
			now := time.Unix(1_000_000, 0)
			if c.rt.Path == "" {
				c.rt = route{Method: "GET", Path: "/v1/instances"}
			}
			for range 2 {
				key, lim, _ := l.limitOf(context.Background(), c.p, c.rt, now)
				if key != c.key || lim != c.want {
					t.Errorf("limitOf = %s %+v, want %s %+v", key, lim, c.key, c.want)
				}
			}
			n := 0
			for _, v := range lookups {
				n += v
			}
			if c.p.Role == cloud.RoleAgent || c.p.Role == cloud.RoleJoin {
				c.lookups = 0
			}
			if n != c.lookups {
				t.Errorf("%d store lookups for two requests, want %d", n, c.lookups)
			}
		})
	}
	// A cached rate expires, and a change through this server drops it.
	clear(lookups)
	now := time.Unix(2_000_000, 0)
	l.limitOf(context.Background(), member("tn-fast"), route{}, now)
	l.limitOf(context.Background(), member("tn-fast"), route{}, now.Add(tenantRateTTL-time.Millisecond))
	l.limitOf(context.Background(), member("tn-fast"), route{}, now.Add(tenantRateTTL))
	l.tenantChanged("tn-fast")
	l.limitOf(context.Background(), member("tn-fast"), route{}, now.Add(tenantRateTTL))
	if lookups["tn-fast"] != 3 {
		t.Errorf("%d lookups, want 3: once, again after the TTL, again after the change", lookups["tn-fast"])
	}
}

func TestSourceAddress(t *testing.T) {
	proxies := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8:ffff::/48")}
	for _, c := range []struct {
		name    string
		remote  string
		xff     []string
		trusted []netip.Prefix
		want    string
	}{
		{"IPv4 peer", "192.0.2.1:5555", nil, nil, "192.0.2.1"},
		{"IPv6 peer, keyed by its /64", "[2001:db8:1:2:3:4:5:6]:443", nil, nil, "2001:db8:1:2::/64"},
		{"IPv4-mapped IPv6 peer", "[::ffff:192.0.2.9]:80", nil, nil, "192.0.2.9"},
		{"zoned link-local peer", "[fe80::1%eth0]:80", nil, nil, "fe80::/64"},
		{"X-Forwarded-For is ignored without trusted proxies", "192.0.2.1:5555", []string{"203.0.113.7"}, nil, "192.0.2.1"},
		{"X-Forwarded-For of an untrusted peer is ignored", "192.0.2.1:5555", []string{"203.0.113.7"}, proxies, "192.0.2.1"},
		{"a trusted proxy names the client", "10.1.2.3:5555", []string{"203.0.113.7"}, proxies, "203.0.113.7"},
		{"the client's own X-Forwarded-For entries are skipped", "10.1.2.3:5555", []string{"198.51.100.1, 203.0.113.7"}, proxies, "203.0.113.7"},
		{"a chain of trusted proxies", "10.1.2.3:5555", []string{"203.0.113.7, 10.9.9.9", "10.8.8.8"}, proxies, "203.0.113.7"},
		{"an IPv6 client behind a trusted IPv6 proxy", "[2001:db8:ffff::1]:443", []string{"2001:db8:5:6:7::1"}, proxies, "2001:db8:5:6::/64"},
		{"only trusted hops: the leftmost", "10.1.2.3:5555", []string{"10.7.7.7, 10.8.8.8"}, proxies, "10.7.7.7"},
		{"a garbled hop stops the walk at the last trusted one", "10.1.2.3:5555", []string{"203.0.113.7, bogus"}, proxies, "10.1.2.3"},
		{"a trusted proxy without the header", "10.1.2.3:5555", nil, proxies, "10.1.2.3"},
		{"an address that is no IP is its own key", "@", nil, nil, "@"},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := newLimiter(RateLimits{TrustedProxies: c.trusted}, nil)
			r := httptest.NewRequest("GET", "/v1/offerings", nil)
			r.RemoteAddr = c.remote
			for _, v := range c.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			if got := l.sourceAddress(r); got != c.want {
				t.Errorf("sourceAddress = %q, want %q", got, c.want)
			}
		})
	}
}

// limitedEnv is an env whose limiter runs on its own clock (the domain
// clock stays where the env puts it), with limits small enough to reach
// in a few requests.
func limitedEnv(t *testing.T, limits RateLimits) (*env, *testkit.Clock) {
	t.Helper()
	clock := testkit.NewClock(testkit.Epoch)
	limits.Now = clock.Now
	return newEnvWith(t, Options{Limits: limits}), clock
}

// wantLimited checks a 429 rate_limited answer with its Retry-After, and
// returns the wait it asks for.
func wantLimited(t *testing.T, status int, h http.Header, b []byte, limit string, secs int) time.Duration {
	t.Helper()
	eb := decodeErr(t, b)
	if status != http.StatusTooManyRequests || eb.Code != cloud.RateLimited || eb.Details["limit"] != limit {
		t.Fatalf("got %d %s, want 429 rate_limited (%s)", status, b, limit)
	}
	if got := h.Get("Retry-After"); got != strconv.Itoa(secs) || eb.Details[retryAfterDetail] != float64(secs) {
		t.Errorf("Retry-After %q, details %v; want %d", got, eb.Details, secs)
	}
	return time.Duration(secs) * time.Second
}

func TestRequestRateLimit(t *testing.T) {
	e, clock := limitedEnv(t, RateLimits{Member: Limit{Rate: 0.5, Burst: 3}, Admin: Limit{Rate: 1, Burst: 5}})
	ctx := context.Background()
	clock.Advance(time.Hour) // the env's setup spent some of the admin's burst
	get := func(token string) (int, http.Header, []byte) { return e.raw("GET", "/v1/offerings", token, nil, nil) }
	for _, c := range []struct {
		name  string
		token string
		burst int
		secs  int
	}{
		{"a member: its burst, then 429 for 1/0.5 s", e.acmeToken, 3, 2},
		{"an admin: its own limit", e.adminToken, 5, 1},
	} {
		for i := range c.burst {
			if status, _, b := get(c.token); status != 200 {
				t.Fatalf("%s: request %d of the burst: %d %s", c.name, i+1, status, b)
			}
		}
		status, h, b := get(c.token)
		wantLimited(t, status, h, b, "requests", c.secs)
	}
	_, _, b := get(e.acmeToken)
	if m := decodeErr(t, b).Message; !strings.Contains(m, "quotas set") || !strings.Contains(m, e.acmeUser.ID) {
		t.Errorf("message %q does not say whose limit it is and how to raise it", m)
	}

	// Refused requests change nothing, and the Go client sees the code and
	// the wait.
	before := e.counts()
	_, err := e.acme.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "l4.1x"}, "k-1")
	wantCode(t, err, cloud.RateLimited)
	wait, ok := rest.RetryAfter(err)
	if !ok || wait != 2*time.Second {
		t.Errorf("rest.RetryAfter = %v, %v; want 2s", wait, ok)
	}
	e.unchanged(before, "a rate-limited create")

	// Another tenant's user has its own bucket.
	globex := e.globexToken(t) // one request of globex's three
	for i := range 2 {
		if status, _, b := get(globex); status != 200 {
			t.Fatalf("globex request %d: %d %s", i+1, status, b)
		}
	}
	status, h, b := get(globex)
	wantLimited(t, status, h, b, "requests", 2)

	// Another token of the same user shares the bucket: making tokens buys
	// no rate.
	clock.Advance(wait)
	tok, err := e.acme.CreateToken(ctx, api.CreateTokenRequest{Name: "second"})
	if err != nil {
		t.Fatal(err)
	}
	status, h, b = get(tok.Secret)
	wantLimited(t, status, h, b, "requests", 2)

	// After the wait it asked for, the same request succeeds.
	clock.Advance(wait)
	if _, err := e.acme.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "l4.1x"}, "k-1"); err != nil {
		t.Errorf("create after waiting: %v", err)
	}
}

// TestRateLimitOnWallClock runs a limit on the real clock, through the
// tenant's quota: a client over it gets 429, waits Retry-After, and the
// same request then succeeds.
func TestRateLimitOnWallClock(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if _, err := e.admin.SetQuota(ctx, e.acmeID, api.QuotaSpec{RequestsPerSecond: 1, Burst: 1}); err != nil {
		t.Fatal(err)
	}
	var limited error
	for i := 0; i < 20 && limited == nil; i++ {
		_, err := e.acme.Offerings(ctx)
		if cloud.ErrorCode(err) == cloud.RateLimited {
			limited = err
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if limited == nil {
		t.Fatal("20 requests at once under a limit of 1 per second, none refused")
	}
	wait, ok := rest.RetryAfter(limited)
	if !ok || wait != time.Second {
		t.Fatalf("Retry-After %v, %v; want 1s", wait, ok)
	}
	time.Sleep(wait)
	if _, err := e.acme.Offerings(ctx); err != nil {
		t.Errorf("after waiting Retry-After: %v", err)
	}
}

func TestTenantRateOverride(t *testing.T) {
	e, clock := limitedEnv(t, RateLimits{Member: Limit{Rate: 1, Burst: 2}})
	ctx := context.Background()
	burst := func(token string) int {
		t.Helper()
		for i := range 50 {
			status, h, b := e.raw("GET", "/v1/offerings", token, nil, nil)
			if status == http.StatusTooManyRequests {
				wantLimited(t, status, h, b, "requests", 1)
				return i
			}
			if status != 200 {
				t.Fatalf("request %d: %d %s", i+1, status, b)
			}
		}
		t.Fatal("50 requests at once, none refused")
		return 0
	}
	globex := e.globexToken(t)
	for _, c := range []struct {
		name                string
		spec                api.QuotaSpec
		acmeBurst, globexBy int
	}{
		{"no override: the member default", api.QuotaSpec{}, 2, 2},
		{"the tenant's burst, at once", api.QuotaSpec{RequestsPerSecond: 3, Burst: 7}, 7, 2},
		{"the burst alone", api.QuotaSpec{Burst: 4}, 4, 2},
		{"back to 0: the default again", api.QuotaSpec{Instances: 5}, 2, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			clock.Advance(time.Hour) // every bucket full
			q, err := e.admin.SetQuota(ctx, e.acmeID, c.spec)
			if err != nil || q.RequestsPerSecond != c.spec.RequestsPerSecond || q.Burst != c.spec.Burst {
				t.Fatalf("SetQuota = %+v, %v", q, err)
			}
			if n := burst(e.acmeToken); n != c.acmeBurst {
				t.Errorf("acme passed %d at once, want %d", n, c.acmeBurst)
			}
			if n := burst(globex); n != c.globexBy {
				t.Errorf("globex passed %d at once, want %d: another tenant's quota changed its limit", n, c.globexBy)
			}
		})
	}

	// Tenant isolation: a member reads its own tenant's rate, not
	// another's, and changes neither.
	clock.Advance(time.Hour)
	if _, err := e.admin.SetQuota(ctx, e.acmeID, api.QuotaSpec{RequestsPerSecond: 100, Burst: 100}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.admin.SetQuota(ctx, e.globexID, api.QuotaSpec{RequestsPerSecond: 9, Burst: 90}); err != nil {
		t.Fatal(err)
	}
	if q, err := e.globex.Quota(ctx, e.globexID); err != nil || q.RequestsPerSecond != 9 || q.Burst != 90 {
		t.Errorf("globex reads its rate: %+v, %v", q, err)
	}
	_, err := e.acme.Quota(ctx, e.globexID)
	wantCode(t, err, cloud.NotFound)
	before := e.counts()
	for _, tenant := range []string{e.acmeID, e.globexID} {
		_, err = e.acme.SetQuota(ctx, tenant, api.QuotaSpec{RequestsPerSecond: 1000, Burst: 10000})
		wantCode(t, err, cloud.PermissionDenied)
	}
	e.unchanged(before, "a member setting rates")
	if q, err := e.admin.Quota(ctx, e.globexID); err != nil || q.RequestsPerSecond != 9 || q.Burst != 90 {
		t.Errorf("globex's rate after acme's tries: %+v, %v", q, err)
	}
}

func TestAgentRateLimit(t *testing.T) {
	e, clock := limitedEnv(t, RateLimits{Agent: Limit{Rate: 1, Burst: 3}, AgentLiveness: Limit{Rate: 1, Burst: 3}, Member: Limit{Rate: 1, Burst: 1}})
	ctx := context.Background()
	a1, _ := e.join(inventory("h-1", "L4", 1))
	a2, _ := e.join(inventory("h-2", "L4", 1))
	// The operator tenant's rate is for its users: agents keep theirs.
	if _, err := e.admin.SetQuota(ctx, OperatorTenant, api.QuotaSpec{RequestsPerSecond: 100, Burst: 100}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := a1.Assignments(ctx); err != nil {
			t.Fatalf("agent request %d: %v", i+1, err)
		}
	}
	_, err := a1.Assignments(ctx)
	wantCode(t, err, cloud.RateLimited)
	if d, ok := rest.RetryAfter(err); !ok || d != time.Second {
		t.Errorf("Retry-After %v, %v", d, ok)
	}
	if _, err := a2.Assignments(ctx); err != nil {
		t.Errorf("another host's agent: %v", err)
	}
	clock.Advance(time.Second)
	if _, err := a1.Assignments(ctx); err != nil {
		t.Errorf("after the wait: %v", err)
	}
}

// authEnv is an env whose failed authentications are limited to 3 at
// once and 1 a second per address, behind a trusted proxy on loopback,
// so that X-Forwarded-For stands for the client's address.
func authEnv(t *testing.T) (*env, *testkit.Clock, func(from, token string) (int, http.Header, []byte)) {
	t.Helper()
	e, clock := limitedEnv(t, RateLimits{AuthFailures: Limit{Rate: 1, Burst: 3},
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}})
	get := func(from, token string) (int, http.Header, []byte) {
		t.Helper()
		h := map[string]string{"X-Forwarded-For": from}
		if token != "" {
			h["Authorization"] = "Bearer " + token
		}
		return e.raw("GET", "/v1/offerings", "", nil, h)
	}
	return e, clock, get
}

func TestAuthFailureLimit(t *testing.T) {
	const bad = "gpc_tk-nosuch_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
	for _, c := range []struct {
		name string
		// fail makes one failed authentication from address from.
		fail func(e *env, from string) (int, http.Header, []byte)
	}{
		{"an unknown token", func(e *env, from string) (int, http.Header, []byte) {
			return e.raw("GET", "/v1/offerings", bad, nil, map[string]string{"X-Forwarded-For": from})
		}},
		{"no Authorization header", func(e *env, from string) (int, http.Header, []byte) {
			return e.raw("GET", "/v1/instances", "", nil, map[string]string{"X-Forwarded-For": from})
		}},
		{"a malformed Authorization header", func(e *env, from string) (int, http.Header, []byte) {
			return e.raw("GET", "/v1/instances", "", nil, map[string]string{"X-Forwarded-For": from, "Authorization": "Basic eDp5"})
		}},
		{"a token without the prefix", func(e *env, from string) (int, http.Header, []byte) {
			return e.raw("GET", "/v1/instances", "not-a-token", nil, map[string]string{"X-Forwarded-For": from})
		}},
		{"a join with an unknown join token", func(e *env, from string) (int, http.Header, []byte) {
			return e.raw("POST", "/v1/agent/join", "", strings.NewReader(`{"join_token":"`+bad+`"}`), map[string]string{"X-Forwarded-For": from})
		}},
		{"a join without a join token", func(e *env, from string) (int, http.Header, []byte) {
			return e.raw("POST", "/v1/agent/join", "", strings.NewReader(`{}`), map[string]string{"X-Forwarded-For": from})
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, clock, get := authEnv(t)
			const attacker, neighbour = "198.51.100.7", "198.51.100.8"
			for i := range 3 {
				if status, _, b := c.fail(e, attacker); status != http.StatusUnauthorized {
					t.Fatalf("failure %d: %d %s, want 401", i+1, status, b)
				}
			}
			before := e.counts()
			status, h, b := c.fail(e, attacker)
			wait := wantLimited(t, status, h, b, "auth_failures", 1)
			e.unchanged(before, "a refused authentication")
			// Before any lookup: a valid token that this server has not
			// seen work is refused too, from that address only.
			status, h, b = get(attacker, e.globexToken(t))
			wantLimited(t, status, h, b, "auth_failures", 1)
			if status, _, b := c.fail(e, neighbour); status != http.StatusUnauthorized {
				t.Errorf("another address: %d %s, want 401", status, b)
			}
			clock.Advance(wait)
			if status, _, b := c.fail(e, attacker); status != http.StatusUnauthorized {
				t.Errorf("after Retry-After: %d %s, want 401", status, b)
			}
			status, h, b = c.fail(e, attacker)
			wantLimited(t, status, h, b, "auth_failures", 1)
		})
	}
}

// TestAnonymousLimit: requests without a token to the OpenAPI document
// take from their source address's bucket: over it, 429 with Retry-After,
// other addresses unaffected, and served again after the wait. The join,
// public too, is not charged to it.
func TestAnonymousLimit(t *testing.T) {
	e, clock := limitedEnv(t, RateLimits{Anonymous: Limit{Rate: 1, Burst: 3},
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}})
	doc := func(from string) (int, http.Header, []byte) {
		return e.raw("GET", "/v1/openapi.json", "", nil, map[string]string{"X-Forwarded-For": from})
	}
	const reader, neighbour = "198.51.100.7", "198.51.100.8"
	for i := range 3 {
		if status, _, b := doc(reader); status != http.StatusOK {
			t.Fatalf("request %d: %d %.200s, want 200", i+1, status, b)
		}
	}
	status, h, b := doc(reader)
	wait := wantLimited(t, status, h, b, "anonymous", 1)
	if status, _, b := doc(neighbour); status != http.StatusOK {
		t.Errorf("another address: %d %.200s, want 200", status, b)
	}
	// A join from the same address is judged by its join token, not by
	// the anonymous bucket.
	if status, _, b := e.raw("POST", "/v1/agent/join", "", strings.NewReader(`{}`), map[string]string{"X-Forwarded-For": reader}); status != http.StatusUnauthorized {
		t.Errorf("a join from the limited address: %d %s, want 401", status, b)
	}
	clock.Advance(wait)
	if status, _, b := doc(reader); status != http.StatusOK {
		t.Errorf("after Retry-After: %d %.200s, want 200", status, b)
	}
}

func TestAuthFailuresDoNotLockOutWorkingTokens(t *testing.T) {
	e, clock, get := authEnv(t)
	ctx := context.Background()
	const office = "203.0.113.50"
	const bad = "gpc_tk-nosuch_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
	// Successful requests take nothing from the address's failures.
	for i := range 20 {
		if status, _, b := get(office, e.acmeToken); status != 200 {
			t.Fatalf("request %d: %d %s", i+1, status, b)
		}
	}
	fresh, err := e.acme.CreateToken(ctx, api.CreateTokenRequest{Name: "fresh"})
	if err != nil {
		t.Fatal(err)
	}
	doomed, err := e.acme.CreateToken(ctx, api.CreateTokenRequest{Name: "doomed"})
	if err != nil {
		t.Fatal(err)
	}
	if status, _, b := get(office, doomed.Secret); status != 200 {
		t.Fatalf("doomed token: %d %s", status, b)
	}
	for i := range 3 {
		if status, _, b := get(office, bad); status != http.StatusUnauthorized {
			t.Fatalf("failure %d: %d %s", i+1, status, b)
		}
	}
	status, h, b := get(office, bad)
	wantLimited(t, status, h, b, "auth_failures", 1)

	// Someone guessing from the office's address does not lock out the
	// tokens that work there, even once the server's token cache forgot
	// them...
	for i := range 5 {
		status, _, b := get(office, e.acmeToken)
		if status != 200 {
			t.Fatalf("a token that works, from the same address, request %d: %d %s", i+1, status, b)
		}
		e.clock.Advance(DefaultTokenCacheTTL)
	}
	// ...but one this server has never seen work waits with the guesses.
	status, h, b = get(office, fresh.Secret)
	wantLimited(t, status, h, b, "auth_failures", 1)
	// A token that stopped working is looked up once more, fails, and is
	// no longer exempt.
	if _, err := e.acme.RevokeToken(ctx, doomed.Token.ID); err != nil {
		t.Fatal(err)
	}
	if status, _, b := get(office, doomed.Secret); status != http.StatusUnauthorized {
		t.Errorf("revoked token: %d %s, want 401", status, b)
	}
	status, h, b = get(office, doomed.Secret)
	wantLimited(t, status, h, b, "auth_failures", 1)

	// After the wait, the fresh token works, and stays exempt.
	clock.Advance(time.Second)
	if status, _, b := get(office, fresh.Secret); status != 200 {
		t.Fatalf("fresh token after the wait: %d %s", status, b)
	}
	get(office, bad)
	status, h, b = get(office, bad)
	wantLimited(t, status, h, b, "auth_failures", 1)
	e.clock.Advance(DefaultTokenCacheTTL)
	if status, _, b := get(office, fresh.Secret); status != 200 {
		t.Errorf("fresh token, known now, while the address is blocked: %d %s", status, b)
	}
}

// TestForwardedForNotTrustedByDefault: without trusted proxies, a client
// cannot spread its failures over addresses of its choosing.
func TestForwardedForNotTrustedByDefault(t *testing.T) {
	e, _ := limitedEnv(t, RateLimits{AuthFailures: Limit{Rate: 1, Burst: 3}})
	const bad = "gpc_tk-nosuch_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
	var status int
	var h http.Header
	var b []byte
	for i := range 4 {
		status, h, b = e.raw("GET", "/v1/offerings", bad, nil, map[string]string{"X-Forwarded-For": fmt.Sprintf("198.51.100.%d", i+1)})
	}
	wantLimited(t, status, h, b, "auth_failures", 1)
}

// TestTenantRatePersists: a tenant's rate is the store's, on each store: a
// second server over the same store (another replica, or this one after a
// restart) limits the tenant's users by it from its first request.
func TestTenantRatePersists(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		e := newEnv(t, st)
		ctx := context.Background()
		if _, err := e.admin.SetQuota(ctx, e.acmeID, api.QuotaSpec{Instances: 7, RequestsPerSecond: 1, Burst: 2}); err != nil {
			t.Fatal(err)
		}
		clock := testkit.NewClock(testkit.Epoch)
		other := httptest.NewServer(New(service.New(st, nil, service.Options{Now: e.clock.Now}), Options{Limits: RateLimits{Now: clock.Now}}))
		t.Cleanup(other.Close)
		c := client.New(other.URL, e.acmeToken, other.Client())
		for i := range 2 {
			if _, err := c.Offerings(ctx); err != nil {
				t.Fatalf("request %d on the second server: %v", i+1, err)
			}
		}
		_, err := c.Offerings(ctx)
		wantCode(t, err, cloud.RateLimited)
		if q, err := client.New(other.URL, e.adminToken, other.Client()).Quota(ctx, e.acmeID); err != nil ||
			q.RequestsPerSecond != 1 || q.Burst != 2 || q.Instances != 7 {
			t.Errorf("quota read through the second server: %+v, %v", q, err)
		}
	})
}
