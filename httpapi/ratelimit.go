package httpapi

import (
	"context"
	"crypto/sha256"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
	"golang.org/x/sync/singleflight"
)

// The API's request limits (docs/CONTROL_PLANE.md, "Limits"):
//
//   - Every authenticated request takes a token from its credential's
//     bucket: a user's (all of a user's tokens share one, so that making
//     more tokens buys no more rate) or, for agent and join tokens, the
//     token's own (an agent credential is one host's). The bucket's rate
//     and burst are the tenant's quota's (requests_per_second, burst) for
//     users of a tenant that has them, else the default of the role.
//   - An agent credential has two buckets: its heartbeats and assignment
//     polls (livenessRoutes), which keep its host alive and its
//     workloads running, take from one (AgentLiveness), everything else
//     it sends from the other (Agent). What a host's workloads can make
//     its agent send (their completion locks, their logs) thus never
//     spends what its heartbeats need.
//   - A heartbeat refused here still tells that its host is alive: its
//     agent reached the server with a valid credential. It is recorded as
//     a sign of life (service.Agents.RefusedHeartbeat), at most once per
//     refusedBeatEvery per host, so that the server's own throttling never
//     makes the heartbeat watcher declare a host dead.
//   - Every failed authentication takes a token from its source address's
//     bucket; while that bucket is empty, a request from the address whose
//     token this server has not seen work recently is answered 429 before
//     the token is looked up. Successful requests take nothing from it.
//   - A request to a route that needs no token and carries no
//     credential (the OpenAPI document) takes a token from its source
//     address's Anonymous bucket.
//   - The web console, served beside the API, applies the same limiter
//     (Limiter) to its own requests: a page a user's session asks for
//     takes from the user's bucket, and a session cookie that is not a
//     live user's token is a failed authentication of its address.
//
// A request over a limit is answered 429 rate_limited with Retry-After
// (whole seconds, rounded up) and changes nothing. Buckets live in this
// process's memory: with N replicas behind a load balancer, a credential
// may get up to N times its rate. Idle buckets are dropped, and the number
// of buckets is capped, so memory stays bounded whatever the traffic.

// Limit is a token bucket: Rate requests per second sustained, Burst at
// once (the bucket's size).
type Limit struct {
	Rate  float64
	Burst int
}

// The default limits. A member's 50 requests per second is far above what
// a person or a CLI script sends and what a polling controller needs; the
// burst of 500 lets a script create hundreds of resources at once. Admins
// run the fleet (listing every tenant's instances, draining hosts) and get
// four times that. An agent at its default interval (2 s) sends about one
// heartbeat, one assignment poll and one log chunk per running instance
// each interval, its status reports and a metrics report every 15 s: about
// 60 requests per second for a host running 100 instances; 200 leaves
// room for agents run at a shorter interval (the tests' run at 20 ms). The
// failed-authentication limit lets a person mistype a token many times
// and stops guessing at the tenth request per second.
//
// An agent's heartbeats and assignment polls have a budget of their own,
// as large as the rest of its requests': one heartbeat and one poll per
// interval is 1 a second at the default interval and 100 at the tests'
// 20 ms, so the default leaves a wide margin, and nothing the agent sends
// on its workloads' behalf can spend it.
const (
	DefaultMemberRate         = 50
	DefaultMemberBurst        = 500
	DefaultAdminRate          = 200
	DefaultAdminBurst         = 2000
	DefaultAgentRate          = 200
	DefaultAgentBurst         = 2000
	DefaultAgentLivenessRate  = 200
	DefaultAgentLivenessBurst = 2000
	DefaultInvokeRate         = 1000
	DefaultInvokeBurst        = 2000
	DefaultAuthFailureRate    = 10
	DefaultAuthFailureBurst   = 50
	DefaultAnonymousRate      = 10
	DefaultAnonymousBurst     = 100
)

const (
	// tenantRateTTL is how long a tenant's quota rate is trusted; a
	// change made through another replica applies here within it.
	tenantRateTTL = 5 * time.Second
	// tenantRateLookup bounds the store read of a tenant's rate.
	tenantRateLookup = 2 * time.Second
	// knownTokenTTL is how long a token that authenticated stays exempt
	// from its address's failure limit.
	knownTokenTTL = time.Hour
	// maxBuckets caps each limiter's buckets, maxEntries its caches:
	// about 150 bytes each, 10 MB all told at worst.
	maxBuckets = 1 << 16
	maxEntries = 1 << 16
	// sweepEvery and minSweepSize pace the sweeps of idle buckets.
	sweepEvery   = time.Minute
	minSweepSize = 1024
	// ipv6PrefixBits is the part of an IPv6 address that keys its
	// failures: one /64 is usually one host or one household.
	ipv6PrefixBits = 64
	// retryAfterDetail is the detail of a rate_limited error that
	// Retry-After repeats.
	retryAfterDetail = "retry_after_seconds"
	// refusedBeatEvery is how often, at most, a host's refused heartbeats
	// are recorded as signs of life: one store write a second per host
	// whatever the host sends, far inside any heartbeat timeout.
	refusedBeatEvery = time.Second
)

// livenessRoutes are the agent routes that keep a host alive and its
// workloads running ("METHOD PATH", as in routeTable): an agent's requests
// to them take from its AgentLiveness bucket, never from the one its other
// requests share.
var livenessRoutes = map[string]bool{
	"POST /v1/agent/heartbeat":  true,
	"GET /v1/agent/assignments": true,
	"GET /v1/agent/networks":    true,
}

// invokeRoutes are the routes of serverless endpoints' traffic ("METHOD
// PATH"): a user's requests to them take from its token's Invoke bucket.
var invokeRoutes = func() map[string]bool {
	m := map[string]bool{"POST /v1/endpoints/{id}/run": true, "POST /v1/endpoints/{id}/runsync": true,
		"GET /v1/endpoints/{id}/status/{job}": true}
	for _, method := range []string{"GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"} {
		m[method+" "+endpointHTTPPath] = true
	}
	return m
}()

// heartbeatRoute is the route whose refused requests are signs of life.
const heartbeatRoute = "POST /v1/agent/heartbeat"

// RateLimits configures the API's request limits (Options.Limits). A
// Limit whose Rate is not a positive number or whose Burst is below 1
// (the zero Limit) takes its default: limits can be changed, never turned
// off.
type RateLimits struct {
	// Member, Admin and Agent are the buckets of members', admins' and
	// agent credentials' requests (join tokens get Member's). A tenant's
	// quota overrides Member and Admin for its users (requests_per_second,
	// burst; 0 keeps these); agent credentials always get Agent, but for
	// their heartbeats and assignment polls.
	Member, Admin, Agent Limit
	// AgentLiveness is the bucket of an agent credential's heartbeats and
	// assignment polls, apart from Agent's: what an agent sends for its
	// workloads can never spend it.
	AgentLiveness Limit
	// Invoke is the bucket, per token, of a member's or admin's calls to
	// serverless endpoints (run, runsync, a job's status, the HTTP mode:
	// invokeRoutes), apart from the tenant's other requests: an app's
	// traffic to its endpoint is not an API client's, and spends nothing
	// of the user's Member or Admin bucket.
	Invoke Limit
	// AuthFailures is the bucket of failed authentications per source
	// address (an IPv4 address, or an IPv6 /64).
	AuthFailures Limit
	// Anonymous is the bucket, per source address, of requests to the
	// routes that need no credential (the OpenAPI document, which clients
	// may cache for 5 minutes); the agent's join is not one of them (its
	// join token is its credential).
	Anonymous Limit
	// TrustedProxies are the addresses of reverse proxies whose
	// X-Forwarded-For header names the client. The header of any other
	// peer is ignored (anyone can write it), so that by default the
	// source address is the connection's.
	TrustedProxies []netip.Prefix
	// Now is the limiter's clock, the wall clock when nil. It is not the
	// services' clock (service.Options.Now): limits are about real time,
	// and tests freeze or jump the domain clock.
	Now func() time.Time
}

// DefaultRateLimits are the limits of a server whose Options.Limits is
// zero.
func DefaultRateLimits() RateLimits {
	return RateLimits{
		Member:        Limit{Rate: DefaultMemberRate, Burst: DefaultMemberBurst},
		Admin:         Limit{Rate: DefaultAdminRate, Burst: DefaultAdminBurst},
		Agent:         Limit{Rate: DefaultAgentRate, Burst: DefaultAgentBurst},
		AgentLiveness: Limit{Rate: DefaultAgentLivenessRate, Burst: DefaultAgentLivenessBurst},
		Invoke:        Limit{Rate: DefaultInvokeRate, Burst: DefaultInvokeBurst},
		AuthFailures:  Limit{Rate: DefaultAuthFailureRate, Burst: DefaultAuthFailureBurst},
		Anonymous:     Limit{Rate: DefaultAnonymousRate, Burst: DefaultAnonymousBurst},
	}
}

// orDefault is l, or def when l is unset or too small to pass a request.
func (l Limit) orDefault(def Limit) Limit {
	if !(l.Rate > 0) || l.Burst < 1 || math.IsInf(l.Rate, 0) {
		return def
	}
	return l
}

// withDefaults fills the unset fields of r.
func (r RateLimits) withDefaults() RateLimits {
	d := DefaultRateLimits()
	r.Member = r.Member.orDefault(d.Member)
	r.Admin = r.Admin.orDefault(d.Admin)
	r.Agent = r.Agent.orDefault(d.Agent)
	r.AgentLiveness = r.AgentLiveness.orDefault(d.AgentLiveness)
	r.Invoke = r.Invoke.orDefault(d.Invoke)
	r.AuthFailures = r.AuthFailures.orDefault(d.AuthFailures)
	r.Anonymous = r.Anonymous.orDefault(d.Anonymous)
	if r.Now == nil {
		r.Now = time.Now
	}
	return r
}

// bucket is one token bucket: tokens as of at, under lim.
type bucket struct {
	tokens float64
	at     time.Time
	lim    Limit
}

// refill brings b up to now under lim. A changed limit applies from now on,
// and a smaller burst caps what is left. A clock that steps back refills
// nothing.
func (b *bucket) refill(now time.Time, lim Limit) {
	if el := now.Sub(b.at); el > 0 {
		b.tokens += el.Seconds() * b.lim.Rate
		b.at = now
	}
	b.lim = lim
	b.tokens = min(b.tokens, float64(lim.Burst))
}

// wait is how long until b holds one token, 0 when it holds one now.
func (b *bucket) wait() time.Duration {
	if b.tokens >= 1 {
		return 0
	}
	return time.Duration((1 - b.tokens) / b.lim.Rate * float64(time.Second))
}

// full reports whether b has refilled to its burst by now: then it is
// the same as a new bucket, and forgetting it loses nothing.
func (b *bucket) full(now time.Time) bool {
	return b.tokens+now.Sub(b.at).Seconds()*b.lim.Rate >= float64(b.lim.Burst)
}

// buckets holds token buckets by key, bounded: buckets that refilled are
// swept out once a minute or when their number has doubled since the
// last sweep, and at max buckets a new key evicts an arbitrary one (which
// gives that key a full bucket again: the price of a bounded memory under
// a flood of distinct keys).
type buckets struct {
	mu      sync.Mutex
	m       map[string]*bucket
	max     int
	swept   time.Time
	sweepAt int
}

func newBuckets(max int) *buckets {
	return &buckets{m: map[string]*bucket{}, max: max, sweepAt: minSweepSize}
}

// get returns key's bucket refilled to now, making a full one when there is
// none. The caller holds mu.
func (l *buckets) get(key string, lim Limit, now time.Time) *bucket {
	if b, ok := l.m[key]; ok {
		b.refill(now, lim)
		return b
	}
	if len(l.m) >= l.sweepAt || now.Sub(l.swept) >= sweepEvery {
		l.sweep(now)
	}
	if len(l.m) >= l.max {
		for k := range l.m {
			delete(l.m, k)
			break
		}
	}
	b := &bucket{tokens: float64(lim.Burst), at: now, lim: lim}
	l.m[key] = b
	return b
}

// sweep drops the buckets that have refilled. The caller holds mu.
func (l *buckets) sweep(now time.Time) {
	for k, b := range l.m {
		if b.full(now) {
			delete(l.m, k)
		}
	}
	l.swept = now
	l.sweepAt = max(minSweepSize, 2*len(l.m))
}

// take takes a token from key's bucket: 0 when it had one, else how long
// until it will (and nothing is taken).
func (l *buckets) take(key string, lim Limit, now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.get(key, lim, now)
	if d := b.wait(); d > 0 {
		return d
	}
	b.tokens--
	return 0
}

// wait is how long until key's bucket holds a token, 0 when it holds one
// now; it takes nothing, and makes no bucket for a key that has none.
func (l *buckets) wait(key string, lim Limit, now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.m[key]
	if !ok {
		return 0
	}
	b.refill(now, lim)
	return b.wait()
}

// charge takes a token from key's bucket if it holds one; an empty bucket
// stays empty rather than going into debt.
func (l *buckets) charge(key string, lim Limit, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.get(key, lim, now)
	b.tokens = max(b.tokens-1, 0)
}

// len is how many buckets l holds.
func (l *buckets) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.m)
}

// expiring is a bounded map of values that expire: at max entries, the
// expired ones are dropped, and if none had expired, all are (a flood of
// distinct keys starts it over; a dropped entry is only looked up again).
type expiring[K comparable, V any] struct {
	mu  sync.Mutex
	m   map[K]expiringEntry[V]
	max int
}

type expiringEntry[V any] struct {
	v     V
	until time.Time
}

func newExpiring[K comparable, V any](max int) *expiring[K, V] {
	return &expiring[K, V]{m: map[K]expiringEntry[V]{}, max: max}
}

func (c *expiring[K, V]) get(k K, now time.Time) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[k]
	if !ok || !now.Before(e.until) {
		delete(c.m, k)
		var zero V
		return zero, false
	}
	return e.v, true
}

func (c *expiring[K, V]) put(k K, v V, until time.Time, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[k]; !ok && len(c.m) >= c.max {
		for k, e := range c.m {
			if !now.Before(e.until) {
				delete(c.m, k)
			}
		}
		if len(c.m) >= c.max {
			clear(c.m)
		}
	}
	c.m[k] = expiringEntry[V]{v: v, until: until}
}

func (c *expiring[K, V]) remove(k K) {
	c.mu.Lock()
	delete(c.m, k)
	c.mu.Unlock()
}

// clear forgets everything.
func (c *expiring[K, V]) clear() {
	c.mu.Lock()
	clear(c.m)
	c.mu.Unlock()
}

// tenantRate is a tenant's quota's request rate (0s: the defaults).
type tenantRate struct{ perSecond, burst int }

// limiter applies RateLimits.
type limiter struct {
	cfg RateLimits
	// requests holds the buckets of credentials, failures those of
	// source addresses' failed authentications.
	requests, failures *buckets
	// tenants caches tenants' quota rates for tenantRateTTL; an
	// admin's change through this server drops it at once.
	tenants *expiring[string, tenantRate]
	// known holds the hashes of tokens that authenticated within
	// knownTokenTTL: these are looked up even from an address
	// over its failure limit, so that an attack from behind the same
	// address (a NAT, a shared proxy) does not lock out those working
	// there. A token that then fails is dropped from it.
	known *expiring[[sha256.Size]byte, struct{}]
	// rateOf reads a tenant's quota rate from the store; rateReads
	// shares one read among a tenant's concurrent requests.
	rateOf    func(ctx context.Context, tenant string) (perSecond, burst int, err error)
	rateReads singleflight.Group
	// beats holds the hosts whose refused heartbeat was recorded as a sign
	// of life within refusedBeatEvery.
	beats *expiring[string, struct{}]
}

func newLimiter(cfg RateLimits, rateOf func(ctx context.Context, tenant string) (int, int, error)) *limiter {
	return &limiter{cfg: cfg.withDefaults(), requests: newBuckets(maxBuckets), failures: newBuckets(maxBuckets),
		tenants: newExpiring[string, tenantRate](maxEntries), known: newExpiring[[sha256.Size]byte, struct{}](maxEntries),
		rateOf: rateOf, beats: newExpiring[string, struct{}](maxEntries)}
}

func (l *limiter) now() time.Time { return l.cfg.Now() }

// limitOf is the bucket key and limit of p's requests to rt, and what to
// tell someone over it. A tenant's rate that cannot be read (the store is
// down) leaves the role's default, and is read again next time.
func (l *limiter) limitOf(ctx context.Context, p principal, rt route, now time.Time) (key string, lim Limit, who string) {
	switch p.Role {
	case cloud.RoleAgent:
		if livenessRoutes[rt.Method+" "+rt.Path] {
			return "l:" + p.TokenID, l.cfg.AgentLiveness, "the heartbeats and assignment polls of host " + p.HostID
		}
		return "t:" + p.TokenID, l.cfg.Agent, "the agent credential of host " + p.HostID + " (beyond its heartbeats and assignment polls)"
	case cloud.RoleInvoke:
		return "k:" + p.TokenID, Limit{Rate: float64(p.KeyRate), Burst: p.KeyBurst}, "endpoint key " + p.TokenID
	case cloud.RoleAdmin, cloud.RoleMember:
		if invokeRoutes[rt.Method+" "+rt.Path] {
			return "e:" + p.TokenID, l.cfg.Invoke, "token " + p.TokenID + "'s calls to endpoints"
		}
	default:
		return "t:" + p.TokenID, l.cfg.Member, "token " + p.TokenID
	}
	lim = l.cfg.Member
	if p.Role == cloud.RoleAdmin {
		lim = l.cfg.Admin
	}
	tr, ok := l.tenants.get(p.TenantID, now)
	if !ok {
		// One read for the tenant's requests in flight when its entry
		// is missing, not one each.
		v, err, _ := l.rateReads.Do(p.TenantID, func() (any, error) {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tenantRateLookup)
			defer cancel()
			perSecond, burst, err := l.rateOf(rctx, p.TenantID)
			if err != nil {
				return tenantRate{}, err
			}
			tr := tenantRate{perSecond: perSecond, burst: burst}
			l.tenants.put(p.TenantID, tr, now.Add(tenantRateTTL), now)
			return tr, nil
		})
		if err == nil {
			tr = v.(tenantRate)
		}
	}
	if tr.perSecond > 0 {
		lim.Rate = float64(tr.perSecond)
	}
	if tr.burst > 0 {
		lim.Burst = tr.burst
	}
	return "u:" + p.UserID, lim, "user " + p.UserID
}

// allow takes a token for one request of p to rt, or answers
// rate_limited.
func (l *limiter) allow(ctx context.Context, p principal, rt route) error {
	now := l.now()
	key, lim, who := l.limitOf(ctx, p, rt, now)
	d := l.requests.take(key, lim, now)
	if d == 0 {
		return nil
	}
	secs := retrySeconds(d)
	msg := fmt.Sprintf("too many requests: %s may send %s requests per second, %d at once; retry in %d s",
		who, formatRate(lim.Rate), lim.Burst, secs)
	if p.Role == cloud.RoleAdmin || p.Role == cloud.RoleMember {
		msg += " (an admin changes a tenant's rate with: gpucloud quotas set TENANT --requests-per-second N --burst N)"
	}
	return &cloud.Error{Code: cloud.RateLimited, Message: msg,
		Details: map[string]any{"limit": "requests", "requests_per_second": lim.Rate, "burst": lim.Burst, retryAfterDetail: secs}}
}

// allowAnonymous takes a token for a request without a credential from
// its source address's Anonymous bucket, or answers rate_limited.
func (l *limiter) allowAnonymous(r *http.Request) error {
	addr, now := l.sourceAddress(r), l.now()
	d := l.requests.take("a:"+addr, l.cfg.Anonymous, now)
	if d == 0 {
		return nil
	}
	secs := retrySeconds(d)
	return &cloud.Error{Code: cloud.RateLimited,
		Message: fmt.Sprintf("too many requests without a token from %s: %s per second, %d at once; retry in %d s",
			addr, formatRate(l.cfg.Anonymous.Rate), l.cfg.Anonymous.Burst, secs),
		Details: map[string]any{"limit": "anonymous", "address": addr, retryAfterDetail: secs}}
}

// signOfLife reports whether a refused request of p to rt is to be
// recorded as a sign of life of p's host: a heartbeat of an agent whose
// host had none recorded so in the last refusedBeatEvery. It remembers
// that it said so.
func (l *limiter) signOfLife(p principal, rt route, now time.Time) bool {
	if p.Role != cloud.RoleAgent || p.HostID == "" || rt.Method+" "+rt.Path != heartbeatRoute {
		return false
	}
	if _, ok := l.beats.get(p.HostID, now); ok {
		return false
	}
	l.beats.put(p.HostID, struct{}{}, now.Add(refusedBeatEvery), now)
	return true
}

// refused handles a request the limiter refused: a heartbeat still tells
// that its host is alive (signOfLife), which is recorded; a failure to
// record it is logged, and the request is answered 429 all the same.
func (s *handlers) refused(r *http.Request, rt route, p principal) {
	if !s.limits.signOfLife(p, rt, s.limits.now()) {
		return
	}
	if err := s.svc.Agents.RefusedHeartbeat(r.Context(), p.actor()); err != nil {
		s.log.Warn("a refused heartbeat's sign of life was not recorded", "host", p.HostID, "err", err)
	}
}

// tenantChanged drops what the limiter knows of a tenant's rate.
func (l *limiter) tenantChanged(tenant string) { l.tenants.remove(tenant) }

// blocked answers rate_limited when addr has used up its failed
// authentications and tok (empty when the request has none) has not
// authenticated recently.
func (l *limiter) blocked(addr, tok string, now time.Time) error {
	if tok != "" {
		if _, ok := l.known.get(sha256.Sum256([]byte(tok)), now); ok {
			return nil
		}
	}
	d := l.failures.wait(addr, l.cfg.AuthFailures, now)
	if d == 0 {
		return nil
	}
	secs := retrySeconds(d)
	return &cloud.Error{Code: cloud.RateLimited,
		Message: fmt.Sprintf("too many failed authentications from %s; retry in %d s with a valid token", addr, secs),
		Details: map[string]any{"limit": "auth_failures", "address": addr, retryAfterDetail: secs}}
}

// failed counts a failed authentication from addr with tok.
func (l *limiter) failed(addr, tok string, now time.Time) {
	if tok != "" {
		l.known.remove(sha256.Sum256([]byte(tok)))
	}
	l.failures.charge(addr, l.cfg.AuthFailures, now)
}

// succeeded remembers that tok authenticated.
func (l *limiter) succeeded(tok string, now time.Time) {
	l.known.put(sha256.Sum256([]byte(tok)), struct{}{}, now.Add(knownTokenTTL), now)
}

// Limiter is the API's request limiter, exported for the handlers a
// server serves beside the API (the web console), so that their requests
// take from the same buckets as the API's: a user's requests from the
// user's bucket, a failed authentication from its source address's.
// NewLimiter makes one; the server hands the same one to the API
// (Options.Limiter) and to those handlers. It is safe for concurrent use.
type Limiter struct{ l *limiter }

// NewLimiter returns a limiter with the limits cfg (its unset fields take
// their defaults, as in Options.Limits), which reads tenants' quota rates
// through svc.
func NewLimiter(cfg RateLimits, svc *service.Services) *Limiter {
	return &Limiter{l: newLimiter(cfg, svc.Accounts.RequestRate)}
}

// CheckToken runs lookup, which looks up token, a credential that r
// presents other than as its bearer token (a console session's cookie),
// under the failed-authentication limit of r's source address, as the API
// checks a bearer token. From an address over the limit, a token that has
// not authenticated here recently is answered rate_limited (with
// retry_after_seconds) and lookup does not run. A malformed token (not
// "gpc_...", or too long) is a failed authentication without a lookup;
// so is one whose lookup answers unauthenticated. A token whose lookup
// answers nil is remembered as one that authenticated. Lookup's other
// errors are returned as they are, and count as nothing.
func (l *Limiter) CheckToken(r *http.Request, token string, lookup func() error) error {
	addr, now := l.l.sourceAddress(r), l.l.now()
	if !strings.HasPrefix(token, service.SecretPrefix) || len(token) > maxTokenLen {
		if err := l.l.blocked(addr, "", now); err != nil {
			return err
		}
		l.l.failed(addr, "", now)
		return unauthenticated("invalid, revoked or expired token")
	}
	if err := l.l.blocked(addr, token, now); err != nil {
		return err
	}
	err := lookup()
	switch {
	case err == nil:
		l.l.succeeded(token, now)
	case cloud.ErrorCode(err) == cloud.Unauthenticated:
		l.l.failed(addr, token, now)
	}
	return err
}

// AllowUser takes one request of user, of tenant, in role (admin or
// member), from the user's bucket: the one the user's API requests take
// from, at the rate of the tenant's quota where it sets one. It answers
// nil, or rate_limited (with retry_after_seconds) when the bucket is
// empty, taking nothing then.
func (l *Limiter) AllowUser(ctx context.Context, user, tenant string, role cloud.Role) error {
	if role != cloud.RoleAdmin && role != cloud.RoleMember || user == "" {
		return cloud.Errorf(cloud.PermissionDenied, "only a user's requests have a user's request limit")
	}
	return l.l.allow(ctx, principal{UserID: user, TenantID: tenant, Role: role}, route{})
}

// retrySeconds is d in whole seconds, rounded up, at least 1.
func retrySeconds(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}

// formatRate prints a rate without a needless fraction.
func formatRate(r float64) string {
	if r == math.Trunc(r) {
		return fmt.Sprintf("%.0f", r)
	}
	return fmt.Sprintf("%g", r)
}

// sourceAddress is the key of a request's source for the failed-
// authentication limit: the peer's IP address, or with a trusted proxy
// as the peer, the address X-Forwarded-For gives for the client (the
// rightmost one that is not itself a trusted proxy). IPv6 addresses are
// keyed by their /64, which one host or household usually holds whole.
func (l *limiter) sourceAddress(r *http.Request) string {
	addr, ok := parseAddr(r.RemoteAddr)
	if !ok {
		return r.RemoteAddr
	}
	if l.trusted(addr) {
		hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
		for i := len(hops) - 1; i >= 0; i-- {
			hop, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
			if err != nil {
				// A hop a trusted proxy did not write; what is left of
				// it is the client's to forge.
				break
			}
			addr = hop.Unmap()
			if !l.trusted(addr) {
				break
			}
		}
	}
	if addr.Is6() {
		p, _ := addr.Prefix(ipv6PrefixBits)
		return p.String()
	}
	return addr.String()
}

func (l *limiter) trusted(a netip.Addr) bool {
	for _, p := range l.cfg.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// parseAddr reads the IP of a RemoteAddr ("ip:port", or an IP alone).
func parseAddr(s string) (netip.Addr, bool) {
	host, _, err := net.SplitHostPort(s)
	if err != nil {
		host = s
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap().WithZone(""), true
}
