package sqlstore

import (
	"context"
	"errors"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
)

// Lists are ordered by ID everywhere, so that results are deterministic and
// identical on both backends. A tenantID of "" lists every tenant's rows,
// like the zero fields of InstanceFilter and EventFilter.

const tenantCols = "id, name, created_at"

func scanTenant(sc scanner) (*cloud.Tenant, error) {
	var t cloud.Tenant
	err := sc.Scan(&t.ID, &t.Name, timeCol{&t.CreatedAt})
	return &t, err
}

func (t *tx) CreateTenant(ctx context.Context, tn *cloud.Tenant) error {
	if tn.ID == "" {
		return invalidf("tenant has no id")
	}
	created := normTime(tn.CreatedAt)
	n, err := t.execN(ctx, "create tenant "+tn.ID,
		"INSERT INTO tenants ("+tenantCols+") VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
		tn.ID, tn.Name, t.s.d.timeArg(created))
	if err != nil {
		return err
	}
	if n == 0 {
		// ON CONFLICT DO NOTHING, rather than a failing INSERT, keeps the
		// transaction usable on PostgreSQL; then find out which key clashed.
		dup, err := t.exists(ctx, "find tenant "+tn.ID, "SELECT 1 FROM tenants WHERE id = ?", tn.ID)
		if err != nil {
			return err
		}
		if dup {
			return conflictf("tenant %s already exists", tn.ID)
		}
		return conflictf("tenant name %q is already taken", tn.Name)
	}
	tn.CreatedAt = created
	return nil
}

func (t *tx) GetTenant(ctx context.Context, id string) (*cloud.Tenant, error) {
	return one(ctx, t, "get tenant "+id, func() error { return notFoundf("tenant %s not found", id) },
		"SELECT "+tenantCols+" FROM tenants WHERE id = ?", []any{id}, scanTenant)
}

func (t *tx) ListTenants(ctx context.Context) ([]*cloud.Tenant, error) {
	return list(ctx, t, "list tenants", "SELECT "+tenantCols+" FROM tenants ORDER BY id", nil, scanTenant)
}

const userCols = "id, tenant_id, name, role, created_at"

func scanUser(sc scanner) (*cloud.User, error) {
	var u cloud.User
	err := sc.Scan(&u.ID, &u.TenantID, &u.Name, &u.Role, timeCol{&u.CreatedAt})
	return &u, err
}

func (t *tx) CreateUser(ctx context.Context, u *cloud.User) error {
	if u.ID == "" {
		return invalidf("user has no id")
	}
	if err := t.mustExist(ctx, "tenants", "tenant", u.TenantID); err != nil {
		return err
	}
	created := normTime(u.CreatedAt)
	n, err := t.execN(ctx, "create user "+u.ID,
		"INSERT INTO users ("+userCols+") VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
		u.ID, u.TenantID, u.Name, string(u.Role), t.s.d.timeArg(created))
	if err != nil {
		return err
	}
	if n == 0 {
		return conflictf("user %s already exists", u.ID)
	}
	u.CreatedAt = created
	return nil
}

func (t *tx) GetUser(ctx context.Context, id string) (*cloud.User, error) {
	return one(ctx, t, "get user "+id, func() error { return notFoundf("user %s not found", id) },
		"SELECT "+userCols+" FROM users WHERE id = ?", []any{id}, scanUser)
}

const tokenCols = "id, user_id, tenant_id, role, name, hash, created_at, expires_at, revoked_at, host_id, max_uses, uses"

func scanToken(sc scanner) (*cloud.Token, error) {
	var k cloud.Token
	err := sc.Scan(&k.ID, &k.UserID, &k.TenantID, &k.Role, &k.Name, &k.Hash,
		timeCol{&k.CreatedAt}, nullTimeCol{&k.ExpiresAt}, nullTimeCol{&k.RevokedAt}, &k.HostID, &k.MaxUses, &k.Uses)
	return &k, err
}

// normTimePtr normalizes an optional time into a new pointer, so that the
// caller's time.Time, which may be shared, is not changed behind its back.
func normTimePtr(p *time.Time) *time.Time {
	if p == nil {
		return nil
	}
	t := normTime(*p)
	return &t
}

// CreateToken checks that the user exists and belongs to the token's
// tenant: a token whose tenant differs from its user's would grant access
// to another tenant.
func (t *tx) CreateToken(ctx context.Context, k *cloud.Token) error {
	if k.ID == "" {
		return invalidf("token has no id")
	}
	if len(k.Hash) == 0 {
		return invalidf("token %s has no hash", k.ID)
	}
	if k.MaxUses < 0 || k.Uses < 0 {
		return invalidf("token %s: max_uses %d and uses %d must not be negative", k.ID, k.MaxUses, k.Uses)
	}
	var userTenant string
	err := t.get(ctx, "find user "+k.UserID, func() error { return notFoundf("user %s not found", k.UserID) },
		"SELECT tenant_id FROM users WHERE id = ?", []any{k.UserID}, &userTenant)
	if err != nil {
		return err
	}
	if userTenant != k.TenantID {
		return invalidf("token %s: user %s belongs to tenant %s, not %s", k.ID, k.UserID, userTenant, k.TenantID)
	}
	created, expires, revoked := normTime(k.CreatedAt), normTimePtr(k.ExpiresAt), normTimePtr(k.RevokedAt)
	d := &t.s.d
	n, err := t.execN(ctx, "create token "+k.ID,
		"INSERT INTO tokens ("+tokenCols+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
		k.ID, k.UserID, k.TenantID, string(k.Role), k.Name, k.Hash,
		d.timeArg(created), d.nullTimeArg(expires), d.nullTimeArg(revoked), k.HostID, k.MaxUses, k.Uses)
	if err != nil {
		return err
	}
	if n == 0 {
		dup, err := t.exists(ctx, "find token "+k.ID, "SELECT 1 FROM tokens WHERE id = ?", k.ID)
		if err != nil {
			return err
		}
		if dup {
			return conflictf("token %s already exists", k.ID)
		}
		return conflictf("token %s: another token has the same hash", k.ID)
	}
	k.CreatedAt, k.ExpiresAt, k.RevokedAt = created, expires, revoked
	return nil
}

// TokenByHash treats a token as revoked from its RevokedAt on and expired
// from its ExpiresAt on (both compared with now), so a revocation or expiry
// can also be scheduled ahead.
func (t *tx) TokenByHash(ctx context.Context, hash []byte, now time.Time) (*cloud.Token, error) {
	at := t.s.d.timeArg(normTime(now))
	// The message never names the hash: it is a credential.
	return one(ctx, t, "find token by hash", func() error { return notFoundf("token not found, revoked or expired") },
		"SELECT "+tokenCols+" FROM tokens WHERE hash = ?"+
			" AND (revoked_at IS NULL OR revoked_at > ?) AND (expires_at IS NULL OR expires_at > ?)",
		[]any{hash, at, at}, scanToken)
}

func (t *tx) ListTokens(ctx context.Context, tenantID string) ([]*cloud.Token, error) {
	q, args := "SELECT "+tokenCols+" FROM tokens", []any(nil)
	if tenantID != "" {
		q, args = q+" WHERE tenant_id = ?", append(args, tenantID)
	}
	return list(ctx, t, "list tokens", q+" ORDER BY id", args, scanToken)
}

// RevokeToken keeps the first revocation time when a token is revoked again,
// so that revoking is idempotent and the audit time is the earliest one.
func (t *tx) RevokeToken(ctx context.Context, id string, at time.Time) error {
	n, err := t.execN(ctx, "revoke token "+id,
		"UPDATE tokens SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ?",
		t.s.d.timeArg(normTime(at)), id)
	if err != nil {
		return err
	}
	if n == 0 {
		return notFoundf("token %s not found", id)
	}
	return nil
}

// RecordTokenUse counts the use with one UPDATE whose condition holds only
// while a use is left: it takes the row's write lock, so that of two
// transactions racing for the last use the second waits for the first and
// then (PostgreSQL, serializable) loses a serialization race and is run
// again, or (SQLite) runs after it, and finds no use left either way.
func (t *tx) RecordTokenUse(ctx context.Context, id string, now time.Time) (*cloud.Token, error) {
	at := t.s.d.timeArg(normTime(now))
	k, err := one(ctx, t, "record a use of token "+id, func() error { return errNoUse },
		"UPDATE tokens SET uses = uses + 1 WHERE id = ?"+
			" AND (revoked_at IS NULL OR revoked_at > ?) AND (expires_at IS NULL OR expires_at > ?)"+
			" AND (max_uses = 0 OR uses < max_uses) RETURNING "+tokenCols,
		[]any{id, at, at}, scanToken)
	if !errors.Is(err, errNoUse) {
		return k, err
	}
	// Nothing changed: say why.
	var uses, maxUses int
	err = t.get(ctx, "find token "+id, func() error { return notFoundf("token %s not found", id) },
		"SELECT uses, max_uses FROM tokens WHERE id = ?"+
			" AND (revoked_at IS NULL OR revoked_at > ?) AND (expires_at IS NULL OR expires_at > ?)",
		[]any{id, at, at}, &uses, &maxUses)
	if cloud.IsNotFound(err) {
		return nil, notFoundf("token %s not found, revoked or expired", id)
	}
	if err != nil {
		return nil, err
	}
	return nil, conflictf("token %s has made its %d of %d uses", id, uses, maxUses)
}

// errNoUse is RecordTokenUse's UPDATE changing no row.
var errNoUse = errors.New("no use left")

// PutQuota creates or replaces a tenant's quota.
func (t *tx) PutQuota(ctx context.Context, q *cloud.Quota) error {
	if err := t.mustExist(ctx, "tenants", "tenant", q.TenantID); err != nil {
		return err
	}
	gpus, err := jsonArg("quota gpus", q.GPUs)
	if err != nil {
		return err
	}
	_, err = t.exec(ctx, "put quota of tenant "+q.TenantID,
		"INSERT INTO quotas (tenant_id, instances, gpus, gpus_per_model, requests_per_second, burst) VALUES (?, ?, ?, ?, ?, ?)"+
			" ON CONFLICT (tenant_id) DO UPDATE SET instances = excluded.instances, gpus = excluded.gpus,"+
			" gpus_per_model = excluded.gpus_per_model, requests_per_second = excluded.requests_per_second, burst = excluded.burst",
		q.TenantID, q.Instances, gpus, q.GPUsPerModel, q.RequestsPerSecond, q.Burst)
	return err
}

// quotaCols are the columns of a quota, as scanQuota reads them.
const quotaCols = "tenant_id, instances, gpus, gpus_per_model, requests_per_second, burst"

func scanQuota(sc scanner) (*cloud.Quota, error) {
	var q cloud.Quota
	err := sc.Scan(&q.TenantID, &q.Instances, jsonCol{&q.GPUs}, &q.GPUsPerModel, &q.RequestsPerSecond, &q.Burst)
	return &q, err
}

// GetQuota returns NotFound for a tenant without a quota; callers treat that
// as no limits, the same as a zero Quota.
func (t *tx) GetQuota(ctx context.Context, tenantID string) (*cloud.Quota, error) {
	return one(ctx, t, "get quota of tenant "+tenantID,
		func() error { return notFoundf("quota of tenant %s not found", tenantID) },
		"SELECT "+quotaCols+" FROM quotas WHERE tenant_id = ?", []any{tenantID}, scanQuota)
}

// LockQuota updates the quota's row to itself: the row lock of a write,
// held to the end of the transaction, which a SELECT ... FOR UPDATE would
// not give serializable transactions in PostgreSQL (they would wait for
// it, then count from their older snapshot) and SQLite does not have.
func (t *tx) LockQuota(ctx context.Context, tenantID string) (*cloud.Quota, error) {
	return one(ctx, t, "lock quota of tenant "+tenantID,
		func() error { return notFoundf("quota of tenant %s not found", tenantID) },
		"UPDATE quotas SET instances = instances WHERE tenant_id = ? RETURNING "+quotaCols, []any{tenantID}, scanQuota)
}
