package httpapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/gpucloud/gpucloud/cloud"
)

// DefaultTokenCacheTTL is how long a server trusts a token it looked up.
// Every request would otherwise spend a store transaction on its token. A
// revocation made through this server takes effect at once (the cache is
// dropped); one made through another replica takes effect on this one
// within the TTL.
const DefaultTokenCacheTTL = 2 * time.Second

// DefaultAgentTokenCacheTTL is how long a server that requires agents'
// client certificates trusts an agent credential it looked up: as long as
// it gives a silent host before it takes it for lost. Every request still
// shows the host's certificate (the mutual-TLS handshake, and
// authenticate's check), so the credential alone opens nothing. At
// thousands of hosts, looking an agent's credential up every
// DefaultTokenCacheTTL cost the store as much as its heartbeats (issue
// 26). A revocation through this server takes effect at once; through
// another replica, within this TTL.
const DefaultAgentTokenCacheTTL = 30 * time.Second

// tokenCache remembers recent token lookups by the token's hash.
type tokenCache struct {
	ttl time.Duration
	// agentTTL, when longer than ttl, is the TTL of agent credentials.
	agentTTL time.Duration
	mu       sync.Mutex
	m        map[[sha256.Size]byte]cachedToken
	// lookups shares one store lookup among the requests that carry the
	// same token while it is not cached: a burst of requests, or those
	// in flight when its entry expires, cost one transaction, not one
	// each.
	lookups singleflight.Group
}

// tokenLookupTimeout bounds a shared lookup, which runs apart from the
// context of the request that started it (that request may go away while
// others wait for the answer).
const tokenLookupTimeout = 10 * time.Second

// lookup answers tok's principal from the cache, or from fetch, run once
// for all the concurrent lookups of tok, its answer cached (with the
// token's expiry, when fetch gives one).
func (c *tokenCache) lookup(ctx context.Context, tok string, now func() time.Time,
	fetch func(context.Context) (principal, *time.Time, error)) (principal, error) {
	if p, ok := c.get(tok, now()); ok {
		return p, nil
	}
	k := sha256.Sum256([]byte(tok))
	v, err, _ := c.lookups.Do(hex.EncodeToString(k[:]), func() (any, error) {
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tokenLookupTimeout)
		defer cancel()
		at := now()
		p, expires, err := fetch(lctx)
		if err == nil {
			c.put(tok, p, expires, at)
		}
		return p, err
	})
	p, _ := v.(principal)
	return p, err
}

type cachedToken struct {
	p principal
	// until is when the entry must be looked up again: the cache TTL, or
	// the token's expiry when that comes first.
	until time.Time
}

func newTokenCache(ttl time.Duration) *tokenCache {
	return &tokenCache{ttl: ttl, m: map[[sha256.Size]byte]cachedToken{}}
}

func (c *tokenCache) get(tok string, now time.Time) (principal, bool) {
	if c.ttl <= 0 {
		return principal{}, false
	}
	k := sha256.Sum256([]byte(tok))
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[k]
	if !ok || !now.Before(e.until) {
		delete(c.m, k)
		return principal{}, false
	}
	return e.p, true
}

func (c *tokenCache) put(tok string, p principal, expires *time.Time, now time.Time) {
	if c.ttl <= 0 {
		return
	}
	ttl := c.ttl
	if p.Role == cloud.RoleAgent {
		ttl = max(ttl, c.agentTTL)
	}
	until := now.Add(ttl)
	if expires != nil && expires.Before(until) {
		until = *expires
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) > 100000 {
		// Bounded: a flood of distinct valid tokens just starts over.
		c.m = map[[sha256.Size]byte]cachedToken{}
	}
	c.m[sha256.Sum256([]byte(tok))] = cachedToken{p: p, until: until}
}

// dropHost forgets the lookups of host's agent credentials: a re-join or
// a host's removal revokes them.
func (c *tokenCache) dropHost(host string) {
	if host == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, e := range c.m {
		if e.p.HostID == host {
			delete(c.m, k)
		}
	}
}

// clear forgets every lookup; revocations call it.
func (c *tokenCache) clear() {
	c.mu.Lock()
	c.m = map[[sha256.Size]byte]cachedToken{}
	c.mu.Unlock()
}
