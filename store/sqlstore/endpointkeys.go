package sqlstore

import (
	"context"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
)

// Endpoint keys: cloud.EndpointKeyTx. Only a key's hash is stored.

const endpointKeyCols = "id, tenant_id, endpoint_id, name, hash, rate, burst, idempotency_key, created_at, last_used_at, revoked_at"

func scanEndpointKey(sc scanner) (*cloud.EndpointKey, error) {
	var k cloud.EndpointKey
	err := sc.Scan(&k.ID, &k.TenantID, &k.EndpointID, &k.Name, &k.Hash, &k.Rate, &k.Burst, &k.IdempotencyKey,
		timeCol{&k.CreatedAt}, nullTimeCol{&k.LastUsedAt}, nullTimeCol{&k.RevokedAt})
	return &k, err
}

func (t *tx) endpointKeyByKey(ctx context.Context, k *cloud.EndpointKey) error {
	found := true
	old, err := one(ctx, t, "find endpoint key by idempotency key", func() error { found = false; return nil },
		"SELECT "+endpointKeyCols+" FROM endpoint_keys WHERE endpoint_id = ? AND idempotency_key = ? AND idempotency_key <> ''",
		[]any{k.EndpointID, k.IdempotencyKey}, scanEndpointKey)
	if err != nil || !found {
		return err
	}
	key := k.IdempotencyKey
	*k = *old
	return idempotencyConflict("endpoint key", old.ID, key)
}

// CreateEndpointKey checks that the endpoint exists and is the key's
// tenant's: a key whose tenant differs from its endpoint's would open
// another tenant's endpoint.
func (t *tx) CreateEndpointKey(ctx context.Context, k *cloud.EndpointKey) error {
	switch {
	case k.ID == "":
		return invalidf("endpoint key has no id")
	case len(k.Hash) == 0:
		return invalidf("endpoint key %s has no hash", k.ID)
	case k.Rate < 1 || k.Burst < 1:
		return invalidf("endpoint key %s: rate %d and burst %d must be positive", k.ID, k.Rate, k.Burst)
	}
	if k.IdempotencyKey != "" {
		if err := t.endpointKeyByKey(ctx, k); err != nil {
			return err
		}
	}
	var tenant string
	if err := t.get(ctx, "find endpoint "+k.EndpointID, func() error { return notFoundf("endpoint %s not found", k.EndpointID) },
		"SELECT tenant_id FROM endpoints WHERE id = ?", []any{k.EndpointID}, &tenant); err != nil {
		return err
	}
	if tenant != k.TenantID {
		return invalidf("endpoint key %s: endpoint %s belongs to tenant %s, not %s", k.ID, k.EndpointID, tenant, k.TenantID)
	}
	created, used, revoked := normTime(k.CreatedAt), normTimePtr(k.LastUsedAt), normTimePtr(k.RevokedAt)
	d := &t.s.d
	n, err := t.execN(ctx, "create endpoint key "+k.ID,
		"INSERT INTO endpoint_keys ("+endpointKeyCols+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
		k.ID, k.TenantID, k.EndpointID, k.Name, k.Hash, k.Rate, k.Burst, k.IdempotencyKey,
		d.timeArg(created), d.nullTimeArg(used), d.nullTimeArg(revoked))
	if err != nil {
		return err
	}
	if n == 0 {
		if k.IdempotencyKey != "" {
			if err := t.endpointKeyByKey(ctx, k); err != nil {
				return err
			}
		}
		return conflictf("endpoint key %s already exists (or another has the same hash)", k.ID)
	}
	k.CreatedAt, k.LastUsedAt, k.RevokedAt = created, used, revoked
	return nil
}

func (t *tx) GetEndpointKey(ctx context.Context, id string) (*cloud.EndpointKey, error) {
	return one(ctx, t, "get endpoint key "+id, func() error { return notFoundf("endpoint key %s not found", id) },
		"SELECT "+endpointKeyCols+" FROM endpoint_keys WHERE id = ?", []any{id}, scanEndpointKey)
}

func (t *tx) ListEndpointKeys(ctx context.Context, tenantID, endpointID string, all bool) ([]*cloud.EndpointKey, error) {
	var conds []string
	var args []any
	if tenantID != "" {
		conds, args = append(conds, "tenant_id = ?"), append(args, tenantID)
	}
	if endpointID != "" {
		conds, args = append(conds, "endpoint_id = ?"), append(args, endpointID)
	}
	if !all {
		conds = append(conds, "revoked_at IS NULL")
	}
	return list(ctx, t, "list endpoint keys", "SELECT "+endpointKeyCols+" FROM endpoint_keys"+where(conds)+" ORDER BY id", args, scanEndpointKey)
}

func (t *tx) RevokeEndpointKey(ctx context.Context, id string, at time.Time) error {
	n, err := t.execN(ctx, "revoke endpoint key "+id,
		"UPDATE endpoint_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", t.s.d.timeArg(normTime(at)), id)
	if err != nil || n > 0 {
		return err
	}
	return t.mustExist(ctx, "endpoint_keys", "endpoint key", id)
}

func (t *tx) RecordEndpointKeyUse(ctx context.Context, id string, at time.Time) error {
	n, err := t.execN(ctx, "record endpoint key use "+id,
		"UPDATE endpoint_keys SET last_used_at = ? WHERE id = ?", t.s.d.timeArg(normTime(at)), id)
	if err != nil {
		return err
	}
	if n == 0 {
		return notFoundf("endpoint key %s not found", id)
	}
	return nil
}
