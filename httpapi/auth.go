package httpapi

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
)

// OperatorTenant is the ID (and name) of the tenant Bootstrap creates for
// the operator's admins.
const OperatorTenant = service.OperatorTenant

// maxTokenLen bounds the Authorization header we hash; real tokens are
// about 70 characters.
const maxTokenLen = 256

// principal is who a request acts as, from its token.
type principal struct {
	UserID   string
	TenantID string
	Role     cloud.Role
	TokenID  string
	// HostID is the host an agent credential speaks for.
	HostID string
	// EndpointID, KeyRate and KeyBurst are an endpoint key's (role
	// invoke, TokenID its key ID): the one endpoint it calls, and its
	// request limit.
	EndpointID        string
	KeyRate, KeyBurst int
}

func (p principal) admin() bool { return p.Role == cloud.RoleAdmin }

// actor is the principal as the services know it.
func (p principal) actor() service.Actor {
	if p.Role == cloud.RoleAgent {
		return service.AgentActor(p.HostID)
	}
	if p.Role == cloud.RoleInvoke {
		return service.Actor{ID: p.TokenID, TenantID: p.TenantID, Role: p.Role, EndpointID: p.EndpointID}
	}
	return service.Actor{ID: p.UserID, TenantID: p.TenantID, Role: p.Role, HostID: p.HostID}
}

// calls reports whether p may call endpoint e's invoke routes as far as
// its credential goes: an endpoint key calls its own endpoint only (the
// services check the tenant).
func (p principal) calls(e *cloud.Endpoint) bool {
	return p.Role != cloud.RoleInvoke || e.ID == p.EndpointID
}

// unauthenticated is the one answer to a missing, malformed, unknown,
// revoked or expired token: telling them apart would help guessing.
func unauthenticated(msg string) error {
	return cloud.Errorf(cloud.Unauthenticated, "%s", msg)
}

// authenticate finds the principal of the request's bearer token
// (checkToken). A missing or malformed Authorization header is a failed
// authentication too.
func (s *handlers) authenticate(r *http.Request) (principal, error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return principal{}, s.authFailed(r, unauthenticated("missing Authorization header; send Authorization: Bearer gpc_..."))
	}
	scheme, tok, ok := strings.Cut(h, " ")
	tok = strings.TrimSpace(tok)
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return principal{}, s.authFailed(r, unauthenticated("Authorization header must be \"Bearer <token>\""))
	}
	p, err := s.checkToken(r, tok)
	if err == nil && p.Role == cloud.RoleAgent && s.requireAgentCert && !hostCertificate(r, p.HostID) {
		return principal{}, s.authFailed(r, unauthenticated(agentCertRequired))
	}
	return p, err
}

// agentCertRequired is the one answer to an agent credential presented
// without its host's client certificate: none, or another host's. One the
// cloud's CA did not sign never gets here: a client does not send it (the
// server's certificate request names the CA), or the handshake refuses it.
const agentCertRequired = "an agent credential is accepted only over mutual TLS, from a connection that presents a client certificate of the credential's host (the one the agent's join issued)"

// hostCertificate reports whether the request came over a TLS connection
// whose client certificate was verified against the cloud's CA (the
// server's tls.Config: ClientCAs, VerifyClientCertIfGiven) and names host.
// An unverified certificate (a server that only requests them) does not
// count.
func hostCertificate(r *http.Request, host string) bool {
	if r.TLS == nil || host == "" {
		return false
	}
	for _, chain := range r.TLS.VerifiedChains {
		if len(chain) > 0 && chain[0].Subject.CommonName == host {
			return true
		}
	}
	return false
}

// checkToken finds the principal of token tok, presented by request r
// (as its bearer token, or a join token in its body), under the limit of
// failed authentications per source address: a token this server has
// just checked is trusted from its cache; from an address over the
// limit, any other token is answered rate_limited without a lookup,
// unless it authenticated here recently (a known token is not locked out
// by an attack from behind the same address); a token that fails counts
// against its address.
func (s *handlers) checkToken(r *http.Request, tok string) (principal, error) {
	if !strings.HasPrefix(tok, service.SecretPrefix) || len(tok) > maxTokenLen {
		// Not a token at all: refused before any hashing.
		return principal{}, s.authFailed(r, unauthenticated("invalid, revoked or expired token"))
	}
	if p, ok := s.cacheOf(tok).get(tok, s.now()); ok {
		return p, nil
	}
	addr, now := s.limits.sourceAddress(r), s.limits.now()
	if err := s.limits.blocked(addr, tok, now); err != nil {
		return principal{}, err
	}
	p, err := s.lookupToken(r.Context(), tok)
	if cloud.ErrorCode(err) == cloud.Unauthenticated {
		s.limits.failed(addr, tok, now)
		return principal{}, err
	}
	if err == nil {
		s.limits.succeeded(tok, now)
	}
	return p, err
}

// authFailed answers a request whose credentials are missing or
// malformed: rate_limited when its address is over its failed
// authentications, else err, counted as one more.
func (s *handlers) authFailed(r *http.Request, err error) error {
	addr, now := s.limits.sourceAddress(r), s.limits.now()
	if blocked := s.limits.blocked(addr, "", now); blocked != nil {
		return blocked
	}
	s.limits.failed(addr, "", now)
	return err
}

// DefaultKeyCacheTTL is how long a server trusts an endpoint key it
// looked up (at most a second: a revocation made through another replica
// takes effect within it; one made through this server, at once). A key
// costs one store transaction per second per replica, not one per
// request.
const DefaultKeyCacheTTL = time.Second

// cacheOf is the cache of tok's lookups: endpoint keys' or tokens'.
func (s *handlers) cacheOf(tok string) *tokenCache {
	if service.IsEndpointKey(tok) {
		return s.keys
	}
	return s.tokens
}

// lookupToken finds the principal of a token string: a user's, join or
// agent token, or an endpoint key.
func (s *handlers) lookupToken(ctx context.Context, tok string) (principal, error) {
	if !strings.HasPrefix(tok, service.SecretPrefix) || len(tok) > maxTokenLen {
		return principal{}, unauthenticated("invalid, revoked or expired token")
	}
	if service.IsEndpointKey(tok) {
		return s.keys.lookup(ctx, tok, s.now, func(ctx context.Context) (principal, *time.Time, error) {
			k, err := s.svc.Endpoints.KeyOf(ctx, tok)
			if cloud.IsNotFound(err) {
				return principal{}, nil, unauthenticated("invalid, revoked or expired token")
			}
			if err != nil {
				return principal{}, nil, err
			}
			return principal{TenantID: k.TenantID, Role: cloud.RoleInvoke, TokenID: k.ID, EndpointID: k.EndpointID,
				KeyRate: k.Rate, KeyBurst: k.Burst}, nil, nil
		})
	}
	return s.tokens.lookup(ctx, tok, s.now, func(ctx context.Context) (principal, *time.Time, error) {
		t, err := s.svc.Accounts.TokenOf(ctx, tok)
		if cloud.IsNotFound(err) {
			return principal{}, nil, unauthenticated("invalid, revoked or expired token")
		}
		if err != nil {
			return principal{}, nil, err
		}
		return principal{UserID: t.UserID, TenantID: t.TenantID, Role: t.Role, TokenID: t.ID, HostID: t.HostID}, t.ExpiresAt, nil
	})
}
