package httpapi

import (
	"context"
	"math"
	"net/http"
	"slices"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
)

// Event kinds of operator and account actions.
const (
	EventTenantCreated cloud.EventKind = "tenant.created"
	EventUserCreated   cloud.EventKind = "user.created"
	EventTokenCreated  cloud.EventKind = "token.created"
	EventTokenRevoked  cloud.EventKind = "token.revoked"
	EventQuotaUpdated  cloud.EventKind = "quota.updated"
)

// maxQuota bounds quota values; anything larger is a typo, not a plan.
const maxQuota = 1_000_000

// createTenant handles POST /v1/tenants (admin).
func (s *api) createTenant(w http.ResponseWriter, r *http.Request, p principal) error {
	var req CreateTenantRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	if err := checkName("name", req.Name, true); err != nil {
		return err
	}
	now := s.now()
	t := &cloud.Tenant{ID: newID("tn-"), Name: req.Name, CreatedAt: now}
	err := s.tx(r.Context(), func(tx cloud.Tx) error {
		if err := tx.CreateTenant(r.Context(), t); err != nil {
			return err
		}
		return tx.AppendEvent(r.Context(), &cloud.Event{Time: now, Kind: EventTenantCreated,
			TenantID: t.ID, Actor: p.UserID, Reason: "tenant " + t.Name + " created"})
	})
	if cloud.IsConflict(err) {
		return &cloud.Error{Code: cloud.Conflict, Message: "a tenant named " + quote(req.Name) + " exists",
			Details: map[string]any{"name": req.Name}}
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, t)
	return nil
}

// listTenants handles GET /v1/tenants (admin).
func (s *api) listTenants(w http.ResponseWriter, r *http.Request, p principal) error {
	out := TenantList{Tenants: []*cloud.Tenant{}}
	err := s.tx(r.Context(), func(tx cloud.Tx) error {
		ts, err := tx.ListTenants(r.Context())
		if ts != nil {
			out.Tenants = ts
		}
		return err
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// getTenant reads a tenant, answering not_found in the API's words.
func getTenant(ctx context.Context, tx cloud.Tx, id string) (*cloud.Tenant, error) {
	t, err := tx.GetTenant(ctx, id)
	if cloud.IsNotFound(err) {
		return nil, notFound("tenant", id)
	}
	return t, err
}

// createUser handles POST /v1/tenants/{id}/users (admin): a user and its
// first token, whose secret is in the answer and nowhere else.
func (s *api) createUser(w http.ResponseWriter, r *http.Request, p principal) error {
	tenantID := r.PathValue("id")
	var req CreateUserRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	if err := checkName("name", req.Name, true); err != nil {
		return err
	}
	switch req.Role {
	case "":
		req.Role = cloud.RoleMember
	case cloud.RoleMember:
	case cloud.RoleAdmin:
		if tenantID != OperatorTenant {
			return field("role", "admins act on every tenant, so they belong to the %q tenant; create a member here", OperatorTenant)
		}
	default:
		return field("role", "unknown role %s (want member or admin)", quote(string(req.Role)))
	}
	now := s.now()
	var out CreatedUser
	err := s.tx(r.Context(), func(tx cloud.Tx) error {
		if _, err := getTenant(r.Context(), tx, tenantID); err != nil {
			return err
		}
		u := &cloud.User{ID: newID("u-"), TenantID: tenantID, Name: req.Name, Role: req.Role, CreatedAt: now}
		if err := tx.CreateUser(r.Context(), u); err != nil {
			return err
		}
		t, secret := newToken(u, "initial", now, nil)
		if err := tx.CreateToken(r.Context(), t); err != nil {
			return err
		}
		out = CreatedUser{User: u, Token: t, Secret: secret}
		return tx.AppendEvent(r.Context(), &cloud.Event{Time: now, Kind: EventUserCreated,
			TenantID: tenantID, Actor: p.UserID, Reason: "user " + u.ID + " (" + u.Name + ") created as " + string(u.Role)})
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}

// checkQuota validates a quota body and canonicalizes its model names.
func (s *api) checkQuota(spec QuotaSpec) (map[string]float64, error) {
	if spec.Instances < 0 || spec.Instances > maxQuota {
		return nil, field("instances", "%d is out of range 0..%d (0 means no limit)", spec.Instances, maxQuota)
	}
	gpus := make(map[string]float64, len(spec.GPUs))
	for name, n := range spec.GPUs {
		key := "gpus." + name
		if math.IsNaN(n) || n < 0 || n > maxQuota {
			return nil, field(key, "%v is out of range 0..%d (0 means no limit)", n, maxQuota)
		}
		m, err := s.cat.Model(name)
		if err != nil {
			return nil, field(key, "%v", err)
		}
		if _, dup := gpus[m.Name]; dup {
			return nil, field(key, "model %s is given twice (under two of its names)", m.Name)
		}
		gpus[m.Name] = n
	}
	if len(gpus) == 0 {
		gpus = nil
	}
	return gpus, nil
}

// putQuota handles PUT /v1/tenants/{id}/quota (admin).
func (s *api) putQuota(w http.ResponseWriter, r *http.Request, p principal) error {
	tenantID := r.PathValue("id")
	var spec QuotaSpec
	if err := decodeBody(w, r, &spec); err != nil {
		return err
	}
	gpus, err := s.checkQuota(spec)
	if err != nil {
		return err
	}
	q := &cloud.Quota{TenantID: tenantID, Instances: spec.Instances, GPUs: gpus}
	var out QuotaStatus
	err = s.tx(r.Context(), func(tx cloud.Tx) error {
		if _, err := getTenant(r.Context(), tx, tenantID); err != nil {
			return err
		}
		if err := tx.PutQuota(r.Context(), q); err != nil {
			return err
		}
		used, err := s.usage(r.Context(), tx, tenantID)
		if err != nil {
			return err
		}
		out = QuotaStatus{Quota: *q, Used: used}
		return tx.AppendEvent(r.Context(), &cloud.Event{Time: s.now(), Kind: EventQuotaUpdated,
			TenantID: tenantID, Actor: p.UserID, Reason: "quota set"})
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// getQuota handles GET /v1/tenants/{id}/quota: admins for any tenant,
// members for their own.
func (s *api) getQuota(w http.ResponseWriter, r *http.Request, p principal) error {
	tenantID := r.PathValue("id")
	if !p.visible(tenantID) {
		return notFound("tenant", tenantID)
	}
	var out QuotaStatus
	err := s.tx(r.Context(), func(tx cloud.Tx) error {
		if _, err := getTenant(r.Context(), tx, tenantID); err != nil {
			return err
		}
		q, err := getQuota(r.Context(), tx, tenantID)
		if err != nil {
			return err
		}
		used, err := s.usage(r.Context(), tx, tenantID)
		out = QuotaStatus{Quota: *q, Used: used}
		return err
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// getQuota reads a tenant's quota; a tenant without one has no limits.
func getQuota(ctx context.Context, tx cloud.Tx, tenantID string) (*cloud.Quota, error) {
	q, err := tx.GetQuota(ctx, tenantID)
	if cloud.IsNotFound(err) {
		return &cloud.Quota{TenantID: tenantID}, nil
	}
	return q, err
}

// listTokens handles GET /v1/tokens: the caller's tenant's tokens; admins
// see every tenant's, or one tenant's with ?tenant.
func (s *api) listTokens(w http.ResponseWriter, r *http.Request, p principal) error {
	out := TokenList{Tokens: []*cloud.Token{}}
	err := s.tx(r.Context(), func(tx cloud.Tx) error {
		out.Tokens = out.Tokens[:0]
		tenant, err := s.scope(r.Context(), tx, p, r.URL.Query().Get("tenant"), "")
		if err != nil {
			return err
		}
		// The store lists every tenant's tokens for an empty tenant.
		ts, err := tx.ListTokens(r.Context(), tenant)
		if err != nil {
			return err
		}
		for _, t := range ts {
			if tokenVisible(p, t) {
				out.Tokens = append(out.Tokens, t)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// tokenVisible reports whether p may list and revoke token t: join tokens
// and agent credentials are the admins' business, even when a member of
// the operator tenant asks.
func tokenVisible(p principal, t *cloud.Token) bool {
	return p.admin() || t.Role != cloud.RoleJoin && t.Role != cloud.RoleAgent
}

// createToken handles POST /v1/tokens: a new token for the calling user,
// with the user's role. The secret is in the answer and nowhere else.
func (s *api) createToken(w http.ResponseWriter, r *http.Request, p principal) error {
	var req CreateTokenRequest
	if err := decodeOptionalBody(w, r, &req); err != nil {
		return err
	}
	if err := checkName("name", req.Name, false); err != nil {
		return err
	}
	now := s.now()
	if req.ExpiresAt != nil && !req.ExpiresAt.After(now) {
		return field("expires_at", "%s is not in the future", req.ExpiresAt.Format(time.RFC3339))
	}
	var out CreatedToken
	err := s.tx(r.Context(), func(tx cloud.Tx) error {
		u, err := tx.GetUser(r.Context(), p.UserID)
		if err != nil {
			return err
		}
		t, secret := newToken(u, req.Name, now, req.ExpiresAt)
		if err := tx.CreateToken(r.Context(), t); err != nil {
			return err
		}
		out = CreatedToken{Token: t, Secret: secret}
		return tx.AppendEvent(r.Context(), &cloud.Event{Time: now, Kind: EventTokenCreated,
			TenantID: u.TenantID, Actor: p.UserID, Reason: "token " + t.ID + " created"})
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}

// revokeToken handles DELETE /v1/tokens/{id}. Members revoke their
// tenant's tokens, admins any. Revoking a revoked token changes nothing
// and answers it again.
func (s *api) revokeToken(w http.ResponseWriter, r *http.Request, p principal) error {
	id := r.PathValue("id")
	var out *cloud.Token
	err := s.tx(r.Context(), func(tx cloud.Tx) error {
		tenant, err := s.scope(r.Context(), tx, p, "", "")
		if err != nil {
			return err
		}
		ts, err := tx.ListTokens(r.Context(), tenant)
		if err != nil {
			return err
		}
		var t *cloud.Token
		if i := slices.IndexFunc(ts, func(t *cloud.Token) bool { return t.ID == id && tokenVisible(p, t) }); i >= 0 {
			t = ts[i]
		}
		if t == nil {
			return notFound("token", id)
		}
		out = t
		if t.RevokedAt != nil {
			return nil
		}
		now := s.now()
		if err := tx.RevokeToken(r.Context(), id, now); err != nil {
			return err
		}
		s.tokens.clear()
		t.RevokedAt = &now
		return tx.AppendEvent(r.Context(), &cloud.Event{Time: now, Kind: EventTokenRevoked,
			TenantID: t.TenantID, Actor: p.UserID, Reason: "token " + t.ID + " revoked"})
	})
	// Again after the commit: a lookup between the clear above and the
	// commit may have cached the token as still valid.
	s.tokens.clear()
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
