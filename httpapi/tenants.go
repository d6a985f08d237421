package httpapi

import (
	"net/http"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
)

// The account routes: tenants, users, quotas and tokens. The rules are
// service.Accounts'; the handlers decode, call it, and answer.

// Event kinds of operator and account actions (service.Accounts writes
// them).
const (
	EventTenantCreated = service.EventTenantCreated
	EventUserCreated   = service.EventUserCreated
	EventTokenCreated  = service.EventTokenCreated
	EventTokenRevoked  = service.EventTokenRevoked
	EventQuotaUpdated  = service.EventQuotaUpdated
)

// createTenant handles POST /v1/tenants (admin).
func (s *handlers) createTenant(w http.ResponseWriter, r *http.Request, p principal) error {
	var req api.CreateTenantRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	t, err := s.svc.Accounts.CreateTenant(r.Context(), p.actor(), req.Name)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, t)
	return nil
}

// listTenants handles GET /v1/tenants (admin).
func (s *handlers) listTenants(w http.ResponseWriter, r *http.Request, p principal) error {
	ts, err := s.svc.Accounts.Tenants(r.Context(), p.actor())
	if err != nil {
		return err
	}
	if ts == nil {
		ts = []*cloud.Tenant{}
	}
	writeJSON(w, http.StatusOK, api.TenantList{Tenants: ts})
	return nil
}

// createUser handles POST /v1/tenants/{id}/users (admin): a user and its
// first token, whose secret is in the answer and nowhere else.
func (s *handlers) createUser(w http.ResponseWriter, r *http.Request, p principal) error {
	var req api.CreateUserRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	u, t, err := s.svc.Accounts.CreateUser(r.Context(), p.actor(), r.PathValue("id"), req.Name, req.Role)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, api.CreatedUser{User: u, Token: t.Token, Secret: t.Secret})
	return nil
}

// putQuota handles PUT /v1/tenants/{id}/quota (admin).
func (s *handlers) putQuota(w http.ResponseWriter, r *http.Request, p principal) error {
	var spec api.QuotaSpec
	if err := decodeBody(w, r, &spec); err != nil {
		return err
	}
	q, err := s.svc.Accounts.SetQuota(r.Context(), p.actor(), r.PathValue("id"), spec)
	// After the commit: a request before it may have cached the old rate.
	s.limits.tenantChanged(r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, q)
	return nil
}

// getQuota handles GET /v1/tenants/{id}/quota: admins for any tenant,
// members for their own.
func (s *handlers) getQuota(w http.ResponseWriter, r *http.Request, p principal) error {
	return answerByID(w, r, p, s.svc.Accounts.Quota)
}

// listTokens handles GET /v1/tokens: the caller's tenant's tokens; admins
// see every tenant's, or one tenant's with ?tenant.
func (s *handlers) listTokens(w http.ResponseWriter, r *http.Request, p principal) error {
	ts, err := s.svc.Accounts.Tokens(r.Context(), p.actor(), r.URL.Query().Get("tenant"))
	if err != nil {
		return err
	}
	if ts == nil {
		ts = []*cloud.Token{}
	}
	writeJSON(w, http.StatusOK, api.TokenList{Tokens: ts})
	return nil
}

// createToken handles POST /v1/tokens: a new token for the calling user,
// with the user's role. The secret is in the answer and nowhere else.
func (s *handlers) createToken(w http.ResponseWriter, r *http.Request, p principal) error {
	var req api.CreateTokenRequest
	if err := decodeOptionalBody(w, r, &req); err != nil {
		return err
	}
	t, err := s.svc.Accounts.CreateToken(r.Context(), p.actor(), req.Name, req.ExpiresAt)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, t)
	return nil
}

// revokeToken handles DELETE /v1/tokens/{id}. Members revoke their
// tenant's tokens, admins any. Revoking a revoked token changes nothing
// and answers it again.
func (s *handlers) revokeToken(w http.ResponseWriter, r *http.Request, p principal) error {
	t, err := s.svc.Accounts.RevokeToken(r.Context(), p.actor(), r.PathValue("id"))
	// After the commit: a lookup before it may have cached the token as
	// still valid.
	s.tokens.clear()
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, t)
	return nil
}
