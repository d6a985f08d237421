package sqlstore

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
)

// Spot requests and the spot price history: part of cloud.BillingTx.

const spotRequestCols = "id, tenant_id, name, type, max_price, interruption, pools, state, reason, instance_id," +
	" launches, command, env, volumes, tags, version, idempotency_key, created_at, updated_at, image," +
	" subnet_id, security_groups"

func scanSpotRequest(sc scanner) (*cloud.SpotRequest, error) {
	var r cloud.SpotRequest
	err := sc.Scan(&r.ID, &r.TenantID, &r.Name, &r.Type, &r.MaxPrice, &r.Interruption, jsonCol{&r.Pools},
		&r.State, &r.Reason, &r.InstanceID, &r.Launches, jsonCol{&r.Command}, jsonCol{&r.Env},
		jsonCol{&r.Volumes}, jsonCol{&r.Tags}, &r.Version, &r.IdempotencyKey,
		timeCol{&r.CreatedAt}, timeCol{&r.UpdatedAt}, &r.Image,
		&r.Subnet, jsonCol{&r.SecurityGroups})
	return &r, err
}

func validSpotRequest(r *cloud.SpotRequest) error {
	switch {
	case r.ID == "":
		return invalidf("spot request has no id")
	case r.TenantID == "":
		return invalidf("spot request %s has no tenant", r.ID)
	case r.Type != cloud.SpotOneTime && r.Type != cloud.SpotPersistent:
		return invalidf("spot request %s: type %q is not one_time or persistent", r.ID, r.Type)
	case r.Interruption != cloud.ActionTerminate && r.Interruption != cloud.ActionStop:
		return invalidf("spot request %s: interruption behaviour %q is not terminate or stop", r.ID, r.Interruption)
	case r.MaxPrice < 0:
		return invalidf("spot request %s: max price %d is negative", r.ID, r.MaxPrice)
	case r.Launches < 0:
		return invalidf("spot request %s: launches %d is negative", r.ID, r.Launches)
	case len(r.Pools) == 0:
		return invalidf("spot request %s has no pools", r.ID)
	}
	switch r.State {
	case cloud.SpotOpen, cloud.SpotActive, cloud.SpotDisabled, cloud.SpotClosed, cloud.SpotCancelled:
	default:
		return invalidf("spot request %s: state %q is unknown", r.ID, r.State)
	}
	for _, p := range r.Pools {
		if p.Offering == "" {
			return invalidf("spot request %s: pool %q needs an offering (an empty zone means any zone)", r.ID, p.String())
		}
	}
	return nil
}

// spotRequestDoc is the JSON text of a request's list and map fields.
type spotRequestDoc struct{ pools, command, env, volumes, tags, securityGroups string }

func encodeSpotRequest(r *cloud.SpotRequest) (*spotRequestDoc, error) {
	var d spotRequestDoc
	var err error
	for _, f := range []struct {
		name string
		dst  *string
		v    any
	}{
		{"pools", &d.pools, r.Pools}, {"command", &d.command, r.Command}, {"env", &d.env, r.Env},
		{"volumes", &d.volumes, r.Volumes}, {"tags", &d.tags, r.Tags},
		{"security groups", &d.securityGroups, r.SecurityGroups},
	} {
		if *f.dst, err = jsonArg("spot request "+r.ID+" "+f.name, f.v); err != nil {
			return nil, err
		}
	}
	return &d, nil
}

// CreateSpotRequest is idempotent by key as CreateInstance is.
func (t *tx) CreateSpotRequest(ctx context.Context, r *cloud.SpotRequest) error {
	if err := validSpotRequest(r); err != nil {
		return err
	}
	if r.IdempotencyKey != "" {
		if err := t.spotRequestByKey(ctx, r); err != nil {
			return err
		}
	}
	if err := t.mustExist(ctx, "tenants", "tenant", r.TenantID); err != nil {
		return err
	}
	doc, err := encodeSpotRequest(r)
	if err != nil {
		return err
	}
	created, updated := normTime(r.CreatedAt), normTime(r.UpdatedAt)
	d := &t.s.d
	n, err := t.execN(ctx, "create spot request "+r.ID,
		"INSERT INTO spot_requests ("+spotRequestCols+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?, ?)"+
			" ON CONFLICT DO NOTHING",
		r.ID, r.TenantID, r.Name, string(r.Type), int64(r.MaxPrice), r.Interruption, doc.pools, string(r.State),
		r.Reason, r.InstanceID, r.Launches, doc.command, doc.env, doc.volumes, doc.tags, r.IdempotencyKey,
		d.timeArg(created), d.timeArg(updated), r.Image, r.Subnet, doc.securityGroups)
	if err != nil {
		return err
	}
	if n == 0 {
		if r.IdempotencyKey != "" {
			if err := t.spotRequestByKey(ctx, r); err != nil {
				return err
			}
		}
		return conflictf("spot request %s already exists", r.ID)
	}
	r.Version, r.CreatedAt, r.UpdatedAt = 1, created, updated
	return nil
}

// spotRequestByKey is commitmentByKey for spot requests.
func (t *tx) spotRequestByKey(ctx context.Context, r *cloud.SpotRequest) error {
	found := true
	old, err := one(ctx, t, "find spot request by idempotency key", func() error { found = false; return nil },
		"SELECT "+spotRequestCols+" FROM spot_requests WHERE tenant_id = ? AND idempotency_key = ?"+
			" AND idempotency_key <> ''", []any{r.TenantID, r.IdempotencyKey}, scanSpotRequest)
	if err != nil || !found {
		return err
	}
	key := r.IdempotencyKey
	*r = *old
	return idempotencyConflict("spot request", old.ID, key)
}

func (t *tx) GetSpotRequest(ctx context.Context, id string) (*cloud.SpotRequest, error) {
	return one(ctx, t, "get spot request "+id, func() error { return notFoundf("spot request %s not found", id) },
		"SELECT "+spotRequestCols+" FROM spot_requests WHERE id = ?", []any{id}, scanSpotRequest)
}

func (t *tx) ListSpotRequests(ctx context.Context, f cloud.SpotRequestFilter) ([]*cloud.SpotRequest, error) {
	var conds []string
	var args []any
	if f.TenantID != "" {
		conds, args = append(conds, "tenant_id = ?"), append(args, f.TenantID)
	}
	if len(f.States) > 0 {
		var cond string
		cond, args = inList("state", f.States, args)
		conds = append(conds, cond)
	}
	return list(ctx, t, "list spot requests",
		"SELECT "+spotRequestCols+" FROM spot_requests"+where(conds)+" ORDER BY id", args, scanSpotRequest)
}

// UpdateSpotRequest writes every field except the ones fixed at creation:
// ID, TenantID, IdempotencyKey and CreatedAt.
func (t *tx) UpdateSpotRequest(ctx context.Context, r *cloud.SpotRequest) error {
	if err := validSpotRequest(r); err != nil {
		return err
	}
	doc, err := encodeSpotRequest(r)
	if err != nil {
		return err
	}
	updated := normTime(r.UpdatedAt)
	n, err := t.execN(ctx, "update spot request "+r.ID,
		"UPDATE spot_requests SET name = ?, type = ?, max_price = ?, interruption = ?, pools = ?, state = ?,"+
			" reason = ?, instance_id = ?, launches = ?, command = ?, env = ?, volumes = ?, tags = ?,"+
			" image = ?, subnet_id = ?, security_groups = ?, updated_at = ?, version = version + 1 WHERE id = ? AND version = ?",
		r.Name, string(r.Type), int64(r.MaxPrice), r.Interruption, doc.pools, string(r.State),
		r.Reason, r.InstanceID, r.Launches, doc.command, doc.env, doc.volumes, doc.tags,
		r.Image, r.Subnet, doc.securityGroups, t.s.d.timeArg(updated), r.ID, r.Version)
	if err != nil {
		return err
	}
	if n == 0 {
		return t.staleVersion(ctx, "spot_requests", "spot request", r.ID, r.Version)
	}
	r.Version++
	r.UpdatedAt = updated
	return nil
}

func (t *tx) SpotRequestByKey(ctx context.Context, tenantID, key string) (*cloud.SpotRequest, error) {
	return one(ctx, t, "find spot request by idempotency key",
		func() error {
			return notFoundf("tenant %s has no spot request with idempotency key %s", tenantID, strconv.Quote(key))
		},
		"SELECT "+spotRequestCols+" FROM spot_requests WHERE tenant_id = ? AND idempotency_key = ? AND idempotency_key <> ''",
		[]any{tenantID, key}, scanSpotRequest)
}

// ---- spot price history ----

// AppendSpotPrices appends all the points or none: a point whose pool
// already has one at the same time (stored, or earlier in ps) is a
// Conflict, and a pool without offering or zone or a negative price is
// Invalid. It takes two statements per batchRows points: a lookup of the
// clashes, then the insert.
func (t *tx) AppendSpotPrices(ctx context.Context, ps []cloud.SpotPrice) error {
	type key struct {
		pool cloud.Pool
		at   time.Time
	}
	seen := make(map[key]bool, len(ps))
	d := &t.s.d
	args := make([]any, 0, 4*len(ps))
	for _, p := range ps {
		if p.Pool.Offering == "" || p.Pool.Zone == "" {
			return invalidf("spot price of pool %q: a pool needs an offering and a zone", p.Pool.String())
		}
		if p.Price < 0 {
			return invalidf("spot price %d of pool %s is negative", p.Price, p.Pool)
		}
		at := normTime(p.Time)
		k := key{p.Pool, at}
		if seen[k] {
			return conflictf("spot price of pool %s at %s is given twice", p.Pool, at.Format(time.RFC3339Nano))
		}
		seen[k] = true
		args = append(args, p.Pool.Offering, p.Pool.Zone, d.timeArg(at), int64(p.Price))
	}
	row := "(?, ?, " + d.typed("timestamptz") + ", " + d.typed("bigint") + ")"
	for lo := 0; lo < len(ps); lo += batchRows {
		hi := min(lo+batchRows, len(ps))
		clash, err := list(ctx, t, "append spot prices",
			"WITH v (offering, zone, at, price) AS (VALUES "+values(row, hi-lo)+")"+
				" SELECT p.offering, p.zone, p.at, p.price FROM v JOIN spot_prices p"+
				" ON p.offering = v.offering AND p.zone = v.zone AND p.at = v.at LIMIT 1",
			args[4*lo:4*hi], scanSpotPrice)
		if err != nil {
			return err
		}
		if len(clash) > 0 {
			c := clash[0]
			return conflictf("pool %s already has a spot price at %s", c.Pool, c.Time.Format(time.RFC3339Nano))
		}
	}
	for lo := 0; lo < len(ps); lo += batchRows {
		hi := min(lo+batchRows, len(ps))
		if _, err := t.exec(ctx, "append spot prices",
			"INSERT INTO spot_prices (offering, zone, at, price) VALUES "+values("(?, ?, ?, ?)", hi-lo),
			args[4*lo:4*hi]...); err != nil {
			return err
		}
	}
	return nil
}

const spotPriceCols = "offering, zone, at, price"

func scanSpotPrice(sc scanner) (*cloud.SpotPrice, error) {
	var p cloud.SpotPrice
	err := sc.Scan(&p.Pool.Offering, &p.Pool.Zone, timeCol{&p.Time}, &p.Price)
	return &p, err
}

func derefAll[T any](ps []*T) []T {
	out := make([]T, len(ps))
	for i, p := range ps {
		out[i] = *p
	}
	return out
}

// ListSpotPrices selects the points with Since <= Time (and Time < Until
// when Until is set), in time order, pools in byte order of offering and
// zone at equal times, the first f.Limit of them when f.Limit > 0.
func (t *tx) ListSpotPrices(ctx context.Context, f cloud.SpotPriceFilter) ([]cloud.SpotPrice, error) {
	if f.Limit < 0 {
		return nil, invalidf("limit %d is negative", f.Limit)
	}
	d := &t.s.d
	var conds []string
	var args []any
	if len(f.Pools) > 0 {
		pools := make([]string, len(f.Pools))
		for i, p := range f.Pools {
			pools[i] = "(offering = ? AND zone = ?)"
			args = append(args, p.Offering, p.Zone)
		}
		conds = append(conds, "("+strings.Join(pools, " OR ")+")")
	}
	if !f.Since.IsZero() {
		conds, args = append(conds, "at >= ?"), append(args, d.timeArg(normTime(f.Since)))
	}
	if !f.Until.IsZero() {
		conds, args = append(conds, "at < ?"), append(args, d.timeArg(normTime(f.Until)))
	}
	q := "SELECT " + spotPriceCols + " FROM spot_prices" + where(conds) + " ORDER BY at, offering, zone"
	if f.Limit > 0 {
		q, args = q+" LIMIT ?", append(args, f.Limit)
	}
	ps, err := list(ctx, t, "list spot prices", q, args, scanSpotPrice)
	if err != nil {
		return nil, err
	}
	return derefAll(ps), nil
}

// LatestSpotPrices orders the pools by offering and zone.
func (t *tx) LatestSpotPrices(ctx context.Context) ([]cloud.SpotPrice, error) {
	ps, err := list(ctx, t, "latest spot prices",
		"SELECT p.offering, p.zone, p.at, p.price FROM spot_prices p"+
			" JOIN (SELECT offering, zone, MAX(at) AS at FROM spot_prices GROUP BY offering, zone) m"+
			" ON p.offering = m.offering AND p.zone = m.zone AND p.at = m.at ORDER BY p.offering, p.zone",
		nil, scanSpotPrice)
	if err != nil {
		return nil, err
	}
	return derefAll(ps), nil
}
