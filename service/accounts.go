package service

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
)

// Accounts keeps who may use the cloud: tenants, their users, the users'
// tokens (API tokens, join tokens for agents), and the tenants' quotas.
// Creating a tenant, a user, a join token or a quota is the admins'
// business; members list, make and revoke their own tenant's tokens and
// read their own tenant's quota.
//
// A token's secret is shown once, in the answer of the call that makes it:
// the store keeps only its hash (HashToken). Checking the token of a
// request, and caching that check, is the transport's business (httpapi).

// OperatorTenant is the ID (and name) of the tenant Bootstrap creates for
// the operator's admins.
const OperatorTenant = "operator"

// SecretPrefix starts every token string, so that secret scanners and
// people can recognise one: "gpc_<token id>_<secret>".
const SecretPrefix = "gpc_"

// MaxQuota bounds quota values; anything larger is a typo, not a plan.
const MaxQuota = 1_000_000

// Event kinds of account actions.
const (
	EventTenantCreated cloud.EventKind = "tenant.created"
	EventUserCreated   cloud.EventKind = "user.created"
	EventTokenCreated  cloud.EventKind = "token.created"
	EventTokenRevoked  cloud.EventKind = "token.revoked"
	EventQuotaUpdated  cloud.EventKind = "quota.updated"
)

// HashToken is what the store keeps of a token: SHA-256 of the whole token
// string. Tokens carry 256 random bits, so a fast hash is enough; a slow
// password hash would only slow every request down.
func HashToken(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

// newToken makes a token for user u, with the user's role, the given name
// and expiry, and returns it with its secret string. The token ID is hex,
// so the first "_" after the prefix ends it; the secret is base64url and
// may contain "_".
func newToken(u *cloud.User, name string, now time.Time, expires *time.Time) api.CreatedToken {
	id := NewID(TokenPrefix)
	var secret [32]byte
	_, _ = rand.Read(secret[:])
	full := SecretPrefix + id + "_" + base64.RawURLEncoding.EncodeToString(secret[:])
	return api.CreatedToken{Token: &cloud.Token{ID: id, UserID: u.ID, TenantID: u.TenantID, Role: u.Role,
		Name: name, Hash: HashToken(full), CreatedAt: now, ExpiresAt: expires}, Secret: full}
}

// adminOnly refuses what only admins may do. It does not depend on which
// resource is named, so it leaks nothing about what exists.
func adminOnly(a Actor, what string) error {
	if a.Admin() {
		return nil
	}
	return &cloud.Error{Code: cloud.PermissionDenied, Message: what + " is for admins only",
		Details: map[string]any{"role": a.Role}}
}

// usersOnly refuses actors that are not users (agents, join tokens,
// controllers): tokens are made for users.
func usersOnly(a Actor, what string) error {
	if a.Admin() || a.Role == cloud.RoleMember {
		return nil
	}
	return &cloud.Error{Code: cloud.PermissionDenied, Message: what + " is for users' tokens",
		Details: map[string]any{"role": a.Role}}
}

// Bootstrap prepares an empty store for its first start: it creates the
// operator tenant, an admin user and an admin token, and returns the token
// string, which is not stored anywhere and must be shown to the operator
// now. On later starts, when the operator tenant exists, it returns
// created=false and no token. Two servers bootstrapping one store at once
// are safe: the one that loses the race sees created=false.
func (s *Accounts) Bootstrap(ctx context.Context) (adminToken string, created bool, err error) {
	now := s.now()
	err = s.tx(ctx, func(tx cloud.Tx) error {
		adminToken, created = "", false
		if _, err := tx.GetTenant(ctx, OperatorTenant); err == nil {
			return nil
		} else if !cloud.IsNotFound(err) {
			return err
		}
		if err := tx.CreateTenant(ctx, &cloud.Tenant{ID: OperatorTenant, Name: OperatorTenant, CreatedAt: now}); err != nil {
			return err
		}
		u := &cloud.User{ID: NewID(UserPrefix), TenantID: OperatorTenant, Name: "admin", Role: cloud.RoleAdmin, CreatedAt: now}
		if err := tx.CreateUser(ctx, u); err != nil {
			return err
		}
		t := newToken(u, "bootstrap", now, nil)
		if err := tx.CreateToken(ctx, t.Token); err != nil {
			return err
		}
		adminToken, created = t.Secret, true
		return nil
	})
	if cloud.IsConflict(err) {
		// Another server created the operator tenant between our read and
		// our insert: the store is bootstrapped, just not by us.
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	return adminToken, created, nil
}

// CreateTenant creates a tenant (admins) with the default quota
// (DefaultQuota), in one transaction. Tenant names are unique: a name
// taken is a Conflict naming it.
func (s *Accounts) CreateTenant(ctx context.Context, a Actor, name string) (*cloud.Tenant, error) {
	if err := adminOnly(a, "creating tenants"); err != nil {
		return nil, err
	}
	if err := CheckName("name", name, true); err != nil {
		return nil, err
	}
	now := s.now()
	t := &cloud.Tenant{ID: NewID(TenantPrefix), Name: name, CreatedAt: now}
	err := s.retryNetwork(ctx, func(tx cloud.Tx) error {
		if err := tx.CreateTenant(ctx, t); err != nil {
			return err
		}
		if err := tx.PutQuota(ctx, DefaultQuota(t.ID)); err != nil {
			return err
		}
		if err := tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: EventTenantCreated,
			TenantID: t.ID, Actor: a.ID, Reason: "tenant " + t.Name + " created"}); err != nil {
			return err
		}
		// The default network is made with the tenant, as a cloud
		// account comes with its default VPC: the tenant's first creates
		// find it, rather than take turns on the cloud's VNI counter to
		// make it while they hold their quota's lock. (A tenant made
		// before this still gets it from its first create.)
		_, err := ensureDefaultNetwork(ctx, tx, t.ID, a.ID, now)
		return err
	})
	if cloud.IsConflict(err) {
		return nil, &cloud.Error{Code: cloud.Conflict, Message: "a tenant named " + Quote(name) + " exists",
			Details: map[string]any{"name": name}}
	}
	if err != nil {
		return nil, err
	}
	return t, nil
}

// Tenants lists every tenant (admins).
func (s *Accounts) Tenants(ctx context.Context, a Actor) ([]*cloud.Tenant, error) {
	if err := adminOnly(a, "listing tenants"); err != nil {
		return nil, err
	}
	var ts []*cloud.Tenant
	err := s.tx(ctx, func(tx cloud.Tx) error {
		var err error
		ts, err = tx.ListTenants(ctx)
		return err
	})
	return ts, err
}

// Tenant reads a tenant actor a may see, so that a view can name it: an
// admin any tenant, anyone else their own. Another tenant is not found,
// exactly as a missing one.
func (s *Accounts) Tenant(ctx context.Context, a Actor, id string) (*cloud.Tenant, error) {
	if !a.Admin() && id != a.TenantID {
		return nil, NotFound("tenant", id)
	}
	var t *cloud.Tenant
	err := s.tx(ctx, func(tx cloud.Tx) error {
		var err error
		t, err = getTenant(ctx, tx, id)
		return err
	})
	return t, err
}

// getTenant reads a tenant, answering NotFound in the services' words.
func getTenant(ctx context.Context, tx cloud.Tx, id string) (*cloud.Tenant, error) {
	t, err := tx.GetTenant(ctx, id)
	if cloud.IsNotFound(err) {
		return nil, NotFound("tenant", id)
	}
	return t, err
}

// CreateUser creates a user of tenant with its first token (admins). The
// role defaults to member; admins act on every tenant, so they belong to
// the operator tenant and nowhere else.
func (s *Accounts) CreateUser(ctx context.Context, a Actor, tenant, name string, role cloud.Role) (*cloud.User, api.CreatedToken, error) {
	if err := adminOnly(a, "creating users"); err != nil {
		return nil, api.CreatedToken{}, err
	}
	if err := CheckName("name", name, true); err != nil {
		return nil, api.CreatedToken{}, err
	}
	switch role {
	case "":
		role = cloud.RoleMember
	case cloud.RoleMember:
	case cloud.RoleAdmin:
		if tenant != OperatorTenant {
			return nil, api.CreatedToken{}, Field("role", "admins act on every tenant, so they belong to the %q tenant; create a member here", OperatorTenant)
		}
	default:
		return nil, api.CreatedToken{}, Field("role", "unknown role %s (want member or admin)", Quote(string(role)))
	}
	now := s.now()
	var u *cloud.User
	var t api.CreatedToken
	err := s.tx(ctx, func(tx cloud.Tx) error {
		if _, err := getTenant(ctx, tx, tenant); err != nil {
			return err
		}
		u = &cloud.User{ID: NewID(UserPrefix), TenantID: tenant, Name: name, Role: role, CreatedAt: now}
		if err := tx.CreateUser(ctx, u); err != nil {
			return err
		}
		t = newToken(u, "initial", now, nil)
		if err := tx.CreateToken(ctx, t.Token); err != nil {
			return err
		}
		return tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: EventUserCreated,
			TenantID: tenant, Actor: a.ID, Reason: "user " + u.ID + " (" + u.Name + ") created as " + string(u.Role)})
	})
	if err != nil {
		return nil, api.CreatedToken{}, err
	}
	return u, t, nil
}

// CheckQuotaSpec validates a quota and returns its GPU limits by canonical
// model name (nil when there are none).
func CheckQuotaSpec(cat *catalog.Catalog, spec api.QuotaSpec) (map[string]float64, error) {
	if spec.Instances < 0 || spec.Instances > MaxQuota {
		return nil, Field("instances", "%d is out of range 0..%d (0 means no limit)", spec.Instances, MaxQuota)
	}
	if err := checkQuotaRates(spec); err != nil {
		return nil, err
	}
	gpus := make(map[string]float64, len(spec.GPUs))
	for name, n := range spec.GPUs {
		key := "gpus." + name
		if math.IsNaN(n) || n < 0 || n > MaxQuota {
			return nil, Field(key, "%v is out of range 0..%d (0 means no limit)", n, MaxQuota)
		}
		m, err := cat.Model(name)
		if err != nil {
			return nil, Field(key, "%v", err)
		}
		if _, dup := gpus[m.Name]; dup {
			return nil, Field(key, "model %s is given twice (under two of its names)", m.Name)
		}
		gpus[m.Name] = n
	}
	if len(gpus) == 0 {
		gpus = nil
	}
	return gpus, nil
}

// SetQuota replaces a tenant's quota (admins) and answers it with what the
// tenant holds now. A quota below what the tenant holds is allowed: it
// stops new instances, it does not end running ones.
func (s *Accounts) SetQuota(ctx context.Context, a Actor, tenant string, spec api.QuotaSpec) (api.QuotaStatus, error) {
	if err := adminOnly(a, "setting quotas"); err != nil {
		return api.QuotaStatus{}, err
	}
	gpus, err := CheckQuotaSpec(s.cat, spec)
	if err != nil {
		return api.QuotaStatus{}, err
	}
	var out api.QuotaStatus
	err = s.tx(ctx, func(tx cloud.Tx) error {
		if _, err := getTenant(ctx, tx, tenant); err != nil {
			return err
		}
		q := &cloud.Quota{TenantID: tenant, Instances: spec.Instances, GPUs: gpus, GPUsPerModel: spec.GPUsPerModel,
			RequestsPerSecond: spec.RequestsPerSecond, Burst: spec.Burst}
		if err := tx.PutQuota(ctx, q); err != nil {
			return err
		}
		used, err := TenantUsage(ctx, tx, s.cat, tenant)
		if err != nil {
			return err
		}
		out = api.QuotaStatus{Quota: *q, Used: used}
		return tx.AppendEvent(ctx, &cloud.Event{Time: s.now(), Kind: EventQuotaUpdated,
			TenantID: tenant, Actor: a.ID, Reason: "quota set"})
	})
	return out, err
}

// Quota reads a tenant's quota and what the tenant holds against it:
// admins any tenant's, members their own (another tenant answers
// NotFound, like a missing one). A tenant without a quota has no limits.
func (s *Accounts) Quota(ctx context.Context, a Actor, tenant string) (api.QuotaStatus, error) {
	if !a.Sees(tenant) {
		return api.QuotaStatus{}, NotFound("tenant", tenant)
	}
	var out api.QuotaStatus
	err := s.tx(ctx, func(tx cloud.Tx) error {
		if _, err := getTenant(ctx, tx, tenant); err != nil {
			return err
		}
		q, err := GetQuota(ctx, tx, tenant)
		if err != nil {
			return err
		}
		used, err := TenantUsage(ctx, tx, s.cat, tenant)
		out = api.QuotaStatus{Quota: *q, Used: used}
		return err
	})
	return out, err
}

// tokenVisible reports whether a may list and revoke token t: an admin
// any token; a member only their own user tokens. Other users' tokens
// (an admin's included, when a member of the operator tenant asks), join
// tokens and agent credentials are not a member's business.
func tokenVisible(a Actor, t *cloud.Token) bool {
	return a.Admin() || t.UserID == a.ID && t.Role != cloud.RoleJoin && t.Role != cloud.RoleAgent
}

// Tokens lists the tokens a may see, revoked and expired ones included:
// a member their own; an admin every tenant's, or one tenant's when it
// names one. Join tokens and agent credentials are listed to admins only.
func (s *Accounts) Tokens(ctx context.Context, a Actor, tenant string) ([]*cloud.Token, error) {
	if err := usersOnly(a, "listing tokens"); err != nil {
		return nil, err
	}
	var out []*cloud.Token
	err := s.tx(ctx, func(tx cloud.Tx) error {
		out = out[:0]
		tenant, err := Scope(ctx, tx, a, tenant, "")
		if err != nil {
			return err
		}
		// The store lists every tenant's tokens for an empty tenant.
		ts, err := tx.ListTokens(ctx, tenant)
		if err != nil {
			return err
		}
		for _, t := range ts {
			if tokenVisible(a, t) {
				out = append(out, t)
			}
		}
		return nil
	})
	return out, err
}

// CreateToken makes a new token for the calling user, with the user's
// role. expires, when set, must be in the future.
func (s *Accounts) CreateToken(ctx context.Context, a Actor, name string, expires *time.Time) (api.CreatedToken, error) {
	if err := usersOnly(a, "making tokens"); err != nil {
		return api.CreatedToken{}, err
	}
	return s.issue(ctx, a, name, expires, 0)
}

// DefaultJoinTokenTTL is how long a join token lives when its creator
// does not say.
const DefaultJoinTokenTTL = 24 * time.Hour

// DefaultJoinTokenJoins is how many joins a join token allows when its
// creator does not say: one, a token made for one host. A fleet's token
// says how many hosts it joins (maxJoins, at most MaxJoinTokenJoins).
const (
	DefaultJoinTokenJoins = 1
	MaxJoinTokenJoins     = 10000
)

// CreateJoinToken makes a join token (admins): a token with role join,
// owned by the calling admin, that agents present to join their hosts
// (Agents.Join), maxJoins times at most (0: DefaultJoinTokenJoins). It
// joins new hosts only: a host that has joined is not re-joined with a
// join token alone. Still, it is sensitive: it adds hosts that receive
// tenants' workloads. The name is required, so that the token list tells
// join tokens apart when one must be revoked (RevokeToken). It expires
// after DefaultJoinTokenTTL unless expires says otherwise: a forgotten
// join token does not stay a way in.
func (s *Accounts) CreateJoinToken(ctx context.Context, a Actor, name string, expires *time.Time, maxJoins int) (api.CreatedToken, error) {
	if err := adminOnly(a, "making join tokens"); err != nil {
		return api.CreatedToken{}, err
	}
	if err := CheckName("name", name, true); err != nil {
		return api.CreatedToken{}, err
	}
	switch {
	case maxJoins == 0:
		maxJoins = DefaultJoinTokenJoins
	case maxJoins < 0 || maxJoins > MaxJoinTokenJoins:
		return api.CreatedToken{}, Field("max_uses", "is %d; a join token allows 1 to %d joins (0: %d)", maxJoins, MaxJoinTokenJoins, DefaultJoinTokenJoins)
	}
	if expires == nil {
		expires = new(s.now().Add(DefaultJoinTokenTTL))
	}
	return s.issue(ctx, a, name, expires, maxJoins)
}

// issue makes a token for the calling user: with the user's role, or a
// join token that allows joins joins when joins is positive.
func (s *Accounts) issue(ctx context.Context, a Actor, name string, expires *time.Time, joins int) (api.CreatedToken, error) {
	if err := CheckName("name", name, false); err != nil {
		return api.CreatedToken{}, err
	}
	now := s.now()
	if expires != nil && !expires.After(now) {
		return api.CreatedToken{}, Field("expires_at", "%s is not in the future", expires.Format(time.RFC3339))
	}
	if expires != nil {
		if err := CheckTime("expires_at", *expires); err != nil {
			return api.CreatedToken{}, err
		}
	}
	var out api.CreatedToken
	err := s.tx(ctx, func(tx cloud.Tx) error {
		u, err := tx.GetUser(ctx, a.ID)
		if err != nil {
			return err
		}
		out = newToken(u, name, now, expires)
		reason := "token " + out.Token.ID + " created"
		if joins > 0 {
			out.Token.Role, out.Token.MaxUses = cloud.RoleJoin, joins
			reason = fmt.Sprintf("join token %s (%s) created for %d joins", out.Token.ID, name, joins)
		}
		if err := tx.CreateToken(ctx, out.Token); err != nil {
			return err
		}
		return tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: EventTokenCreated,
			TenantID: u.TenantID, Actor: a.ID, Reason: reason})
	})
	if err != nil {
		return api.CreatedToken{}, err
	}
	return out, nil
}

// JoinTokens lists every join token, revoked and expired ones included
// (admins). RevokeToken revokes one.
func (s *Accounts) JoinTokens(ctx context.Context, a Actor) ([]*cloud.Token, error) {
	if err := adminOnly(a, "listing join tokens"); err != nil {
		return nil, err
	}
	var out []*cloud.Token
	err := s.tx(ctx, func(tx cloud.Tx) error {
		ts, err := tx.ListTokens(ctx, "")
		out = out[:0]
		for _, t := range ts {
			if t.Role == cloud.RoleJoin {
				out = append(out, t)
			}
		}
		return err
	})
	return out, err
}

// RevokeToken revokes a token a may see (Tokens): members their own,
// admins any. Another user's token answers NotFound, like a missing one:
// a member of the operator tenant cannot revoke the admins' tokens.
// Revoking a revoked token changes nothing and answers it again. Whoever
// caches token checks must drop its cache once this returns.
func (s *Accounts) RevokeToken(ctx context.Context, a Actor, id string) (*cloud.Token, error) {
	if err := usersOnly(a, "revoking tokens"); err != nil {
		return nil, err
	}
	var out *cloud.Token
	err := s.tx(ctx, func(tx cloud.Tx) error {
		out = nil
		tenant, err := Scope(ctx, tx, a, "", "")
		if err != nil {
			return err
		}
		ts, err := tx.ListTokens(ctx, tenant)
		if err != nil {
			return err
		}
		i := slices.IndexFunc(ts, func(t *cloud.Token) bool { return t.ID == id && tokenVisible(a, t) })
		if i < 0 {
			return NotFound("token", id)
		}
		t := ts[i]
		out = t
		if t.RevokedAt != nil {
			return nil
		}
		now := s.now()
		if err := tx.RevokeToken(ctx, id, now); err != nil {
			return err
		}
		t.RevokedAt = &now
		return tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: EventTokenRevoked,
			TenantID: t.TenantID, Actor: a.ID, Reason: "token " + t.ID + " revoked"})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// TokenOf finds the live token (not revoked, not expired) whose secret is
// secret: how every request's bearer token is authenticated. An unknown,
// revoked or expired token is NotFound; the caller answers all of them
// alike.
func (s *Accounts) TokenOf(ctx context.Context, secret string) (*cloud.Token, error) {
	var t *cloud.Token
	err := s.tx(ctx, func(tx cloud.Tx) error {
		var err error
		t, err = tx.TokenByHash(ctx, HashToken(secret), s.now())
		return err
	})
	return t, err
}
