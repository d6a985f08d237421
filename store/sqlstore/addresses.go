package sqlstore

import (
	"context"
	"net/netip"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
)

// Public addresses: part of cloud.BillingTx.

const addressCols = "id, tenant_id, ip, zone, instance_id, created_at, released_at, idempotency_key, tags"

func scanAddress(sc scanner) (*cloud.Address, error) {
	var a cloud.Address
	err := sc.Scan(&a.ID, &a.TenantID, &a.IP, &a.Zone, strCol{&a.InstanceID}, timeCol{&a.CreatedAt},
		nullTimeCol{&a.ReleasedAt}, &a.IdempotencyKey, jsonCol{&a.Tags})
	return &a, err
}

// CreateAddress stores the IP in its canonical text form (and sets a.IP to
// it), so that two spellings of one IPv6 address cannot both be held. It
// appends the usage On at CreatedAt, and the Off at ReleasedAt when the
// address is created released. It is idempotent by key as CreateInstance
// is: a retry appends no usage.
func (t *tx) CreateAddress(ctx context.Context, a *cloud.Address) error {
	if a.ID == "" {
		return invalidf("address has no id")
	}
	if a.TenantID == "" {
		return invalidf("address %s has no tenant", a.ID)
	}
	ip, err := netip.ParseAddr(a.IP)
	if err != nil {
		return invalidf("address %s: %q is not an IP address", a.ID, a.IP)
	}
	created, released := normTime(a.CreatedAt), normTimePtr(a.ReleasedAt)
	if released != nil && released.Before(created) {
		return invalidf("address %s is released before it is created", a.ID)
	}
	if a.IdempotencyKey != "" {
		if err := t.addressByKey(ctx, a); err != nil {
			return err
		}
	}
	if err := t.mustExist(ctx, "tenants", "tenant", a.TenantID); err != nil {
		return err
	}
	if a.InstanceID != "" {
		if err := t.mustExist(ctx, "instances", "instance", a.InstanceID); err != nil {
			return err
		}
	}
	tags, err := jsonArg("address "+a.ID+" tags", a.Tags)
	if err != nil {
		return err
	}
	d := &t.s.d
	n, err := t.execN(ctx, "create address "+a.ID,
		"INSERT INTO addresses ("+addressCols+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
		a.ID, a.TenantID, ip.String(), a.Zone, nullStr(a.InstanceID), d.timeArg(created), d.nullTimeArg(released),
		a.IdempotencyKey, tags)
	if err != nil {
		return err
	}
	if n == 0 {
		if a.IdempotencyKey != "" {
			if err := t.addressByKey(ctx, a); err != nil {
				return err
			}
		}
		dup, err := t.exists(ctx, "find address "+a.ID, "SELECT 1 FROM addresses WHERE id = ?", a.ID)
		if err != nil {
			return err
		}
		if dup {
			return conflictf("address %s already exists", a.ID)
		}
		return conflictf("IP address %s is held by another address", ip)
	}
	a.IP, a.CreatedAt, a.ReleasedAt = ip.String(), created, released
	meter := []*cloud.Usage{addressUsage(a, created, true)}
	if released != nil {
		meter = append(meter, addressUsage(a, *released, false))
	}
	return t.appendUsage(ctx, meter...)
}

// addressByKey is commitmentByKey for addresses.
func (t *tx) addressByKey(ctx context.Context, a *cloud.Address) error {
	found := true
	old, err := one(ctx, t, "find address by idempotency key", func() error { found = false; return nil },
		"SELECT "+addressCols+" FROM addresses WHERE tenant_id = ? AND idempotency_key = ?"+
			" AND idempotency_key <> ''", []any{a.TenantID, a.IdempotencyKey}, scanAddress)
	if err != nil || !found {
		return err
	}
	key := a.IdempotencyKey
	*a = *old
	return idempotencyConflict("address", old.ID, key)
}

func (t *tx) GetAddress(ctx context.Context, id string) (*cloud.Address, error) {
	return one(ctx, t, "get address "+id, func() error { return notFoundf("address %s not found", id) },
		"SELECT "+addressCols+" FROM addresses WHERE id = ?", []any{id}, scanAddress)
}

// ListAddresses includes released addresses, as ListVolumes includes
// deleted volumes.
func (t *tx) ListAddresses(ctx context.Context, tenantID string) ([]*cloud.Address, error) {
	q, args := "SELECT "+addressCols+" FROM addresses", []any(nil)
	if tenantID != "" {
		q, args = q+" WHERE tenant_id = ?", append(args, tenantID)
	}
	return list(ctx, t, "list addresses", q+" ORDER BY id", args, scanAddress)
}

// UpdateAddress writes InstanceID and ReleasedAt alone. Releasing appends
// the usage Off at ReleasedAt. A released address stays released: setting
// ReleasedAt back to nil is Invalid (its IP may be held by another address
// by now), and releasing it again at another time is a Conflict; writing
// the same ReleasedAt again is allowed and appends nothing.
func (t *tx) UpdateAddress(ctx context.Context, a *cloud.Address) error {
	old, err := t.GetAddress(ctx, a.ID)
	if err != nil {
		return err
	}
	released := normTimePtr(a.ReleasedAt)
	var meter []*cloud.Usage
	switch {
	case old.ReleasedAt != nil && released == nil:
		return invalidf("address %s was released at %s and cannot be taken back",
			a.ID, old.ReleasedAt.Format(time.RFC3339Nano))
	case old.ReleasedAt != nil && !released.Equal(*old.ReleasedAt):
		return conflictf("address %s was already released at %s", a.ID, old.ReleasedAt.Format(time.RFC3339Nano))
	case old.ReleasedAt == nil && released != nil:
		if released.Before(old.CreatedAt) {
			return invalidf("address %s is released before it was created", a.ID)
		}
		meter = append(meter, addressUsage(old, *released, false))
	}
	if a.InstanceID != "" {
		if err := t.mustExist(ctx, "instances", "instance", a.InstanceID); err != nil {
			return err
		}
	}
	n, err := t.execN(ctx, "update address "+a.ID,
		"UPDATE addresses SET instance_id = ?, released_at = ? WHERE id = ?",
		nullStr(a.InstanceID), t.s.d.nullTimeArg(released), a.ID)
	if err != nil {
		return err
	}
	if n == 0 {
		return notFoundf("address %s not found", a.ID)
	}
	if err := t.appendUsage(ctx, meter...); err != nil {
		return err
	}
	a.ReleasedAt = released
	return nil
}
