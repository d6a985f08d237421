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
}

func (p principal) admin() bool { return p.Role == cloud.RoleAdmin }

// actor is the principal as the services know it.
func (p principal) actor() service.Actor {
	if p.Role == cloud.RoleAgent {
		return service.AgentActor(p.HostID)
	}
	return service.Actor{ID: p.UserID, TenantID: p.TenantID, Role: p.Role, HostID: p.HostID}
}

// unauthenticated is the one answer to a missing, malformed, unknown,
// revoked or expired token: telling them apart would help guessing.
func unauthenticated(msg string) error {
	return cloud.Errorf(cloud.Unauthenticated, "%s", msg)
}

// authenticate finds the principal of the request's bearer token.
func (s *handlers) authenticate(r *http.Request) (principal, error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return principal{}, unauthenticated("missing Authorization header; send Authorization: Bearer gpc_...")
	}
	scheme, tok, ok := strings.Cut(h, " ")
	tok = strings.TrimSpace(tok)
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return principal{}, unauthenticated("Authorization header must be \"Bearer <token>\"")
	}
	return s.lookupToken(r.Context(), tok)
}

// lookupToken finds the principal of a token string.
func (s *handlers) lookupToken(ctx context.Context, tok string) (principal, error) {
	if !strings.HasPrefix(tok, service.SecretPrefix) || len(tok) > maxTokenLen {
		return principal{}, unauthenticated("invalid, revoked or expired token")
	}
	now := s.now()
	if p, ok := s.tokens.get(tok, now); ok {
		return p, nil
	}
	t, err := s.svc.Accounts.TokenOf(ctx, tok)
	if cloud.IsNotFound(err) {
		return principal{}, unauthenticated("invalid, revoked or expired token")
	}
	if err != nil {
		return principal{}, err
	}
	p := principal{UserID: t.UserID, TenantID: t.TenantID, Role: t.Role, TokenID: t.ID, HostID: t.HostID}
	s.tokens.put(tok, p, t.ExpiresAt, now)
	return p, nil
}

// Bootstrap prepares an empty store for its first start: it creates the
// operator tenant, an admin user and an admin token, and returns the token
// string, which is not stored anywhere and must be shown to the operator
// now. On later starts it returns created=false and no token. It is
// service.Accounts.Bootstrap at time now, for callers that hold a store
// and no services.
func Bootstrap(ctx context.Context, store cloud.Store, now time.Time) (adminToken string, created bool, err error) {
	return service.New(store, nil, service.Options{Now: func() time.Time { return now }}).Accounts.Bootstrap(ctx)
}
