package sqlstore

import (
	"context"
	"strconv"

	"github.com/gpucloud/gpucloud/cloud"
)

// SSH public keys: cloud.KeyTx.

const keyCols = "id, tenant_id, name, public_key, key_type, bits, fingerprint, idempotency_key, created_at"

func scanKey(sc scanner) (*cloud.Key, error) {
	var k cloud.Key
	err := sc.Scan(&k.ID, &k.TenantID, &k.Name, &k.PublicKey, &k.Type, &k.Bits, &k.Fingerprint, &k.IdempotencyKey,
		timeCol{&k.CreatedAt})
	return &k, err
}

// CreateKey is idempotent by key as CreatePlacementGroup is: the key is
// looked up before the name and the fingerprint, so that a retry is a
// retry, not a conflict with the key it created.
func (t *tx) CreateKey(ctx context.Context, k *cloud.Key) error {
	switch {
	case k.ID == "":
		return invalidf("key has no id")
	case k.TenantID == "":
		return invalidf("key %s has no tenant", k.ID)
	case k.Name == "":
		return invalidf("key %s has no name", k.ID)
	case k.PublicKey == "" || k.Type == "" || k.Fingerprint == "":
		return invalidf("key %s has no public key, type or fingerprint", k.ID)
	}
	if k.IdempotencyKey != "" {
		found := true
		old, err := one(ctx, t, "find key by idempotency key", func() error { found = false; return nil },
			"SELECT "+keyCols+" FROM ssh_keys WHERE tenant_id = ? AND idempotency_key = ? AND idempotency_key <> ''",
			[]any{k.TenantID, k.IdempotencyKey}, scanKey)
		if err != nil {
			return err
		}
		if found {
			key := k.IdempotencyKey
			*k = *old
			return idempotencyConflict("key", old.ID, key)
		}
	}
	if err := t.mustExist(ctx, "tenants", "tenant", k.TenantID); err != nil {
		return err
	}
	for _, u := range []struct{ col, what, value string }{
		{"name", "named " + strconv.Quote(k.Name), k.Name},
		{"fingerprint", "with fingerprint " + k.Fingerprint, k.Fingerprint},
	} {
		var other string
		taken := true
		if err := t.get(ctx, "find key by "+u.col, func() error { taken = false; return nil },
			"SELECT id FROM ssh_keys WHERE tenant_id = ? AND "+u.col+" = ?", []any{k.TenantID, u.value}, &other); err != nil {
			return err
		}
		if taken {
			return &cloud.Error{Code: cloud.Conflict,
				Message: "tenant " + k.TenantID + " already has a key " + u.what + " (" + other + ")",
				Details: map[string]any{u.col: u.value, "key_id": other}}
		}
	}
	created := normTime(k.CreatedAt)
	n, err := t.execN(ctx, "create key "+k.ID,
		"INSERT INTO ssh_keys ("+keyCols+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
		k.ID, k.TenantID, k.Name, k.PublicKey, k.Type, k.Bits, k.Fingerprint, k.IdempotencyKey, t.s.d.timeArg(created))
	if err != nil {
		return err
	}
	if n == 0 {
		return conflictf("key %s already exists", k.ID)
	}
	k.CreatedAt = created
	return nil
}

func (t *tx) GetKey(ctx context.Context, id string) (*cloud.Key, error) {
	return one(ctx, t, "get key "+id, func() error { return notFoundf("key %s not found", id) },
		"SELECT "+keyCols+" FROM ssh_keys WHERE id = ?", []any{id}, scanKey)
}

func (t *tx) ListKeys(ctx context.Context, tenantID string) ([]*cloud.Key, error) {
	q, args := "SELECT "+keyCols+" FROM ssh_keys", []any(nil)
	if tenantID != "" {
		q, args = q+" WHERE tenant_id = ?", append(args, tenantID)
	}
	return list(ctx, t, "list keys", q+" ORDER BY id", args, scanKey)
}

func (t *tx) DeleteKey(ctx context.Context, id string) error {
	n, err := t.execN(ctx, "delete key "+id, "DELETE FROM ssh_keys WHERE id = ?", id)
	if err != nil {
		return err
	}
	if n == 0 {
		return notFoundf("key %s not found", id)
	}
	return nil
}
