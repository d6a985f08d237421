package sqlstore

import (
	"context"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
)

// Prices, commitments, spot requests and the spot price history, addresses
// and budgets: cloud.BillingTx. The usage ledger, which the store writes
// itself, is in billing_ledger.go. Money is stored as integer micros.

// idempotencyConflict is the error of a create that repeats an idempotency
// key: a Conflict whose Details carry the ID of the row created first, as
// CreateInstance returns.
func idempotencyConflict(what, existing, key string) error {
	return &cloud.Error{
		Code:    cloud.Conflict,
		Message: what + " " + existing + " was already created with idempotency key " + strconv.Quote(key),
		Details: map[string]any{"existing_id": existing},
	}
}

// inList returns the condition "col IN (?, ...)" for vals and appends them
// to args.
func inList[T ~string](col string, vals []T, args []any) (string, []any) {
	for _, v := range vals {
		args = append(args, string(v))
	}
	return col + " IN (" + values("?", len(vals)) + ")", args
}

// ---- prices ----

const priceCols = "id, kind, offering, zone, amount, effective_at, created_at, actor, idempotency_key"

func scanPrice(sc scanner) (*cloud.Price, error) {
	var p cloud.Price
	err := sc.Scan(&p.ID, &p.Kind, &p.Offering, &p.Zone, &p.Amount, timeCol{&p.EffectiveAt},
		timeCol{&p.CreatedAt}, &p.Actor, &p.IdempotencyKey)
	return &p, err
}

func validPriceKind(k cloud.PriceKind) bool {
	switch k {
	case cloud.PriceCompute, cloud.PriceVolume, cloud.PriceAddress:
		return true
	}
	return false
}

// AddPrice appends a version; the ID it sets only grows. It is idempotent
// by key as CreateInstance is, the key unique across every price, and for
// the same reasons looks the key up before and after its insert.
func (t *tx) AddPrice(ctx context.Context, p *cloud.Price) error {
	if !validPriceKind(p.Kind) {
		return invalidf("price kind %q is not compute, volume or address", p.Kind)
	}
	if p.Amount < 0 {
		return invalidf("price amount %d is negative", p.Amount)
	}
	if p.IdempotencyKey != "" {
		if err := t.priceByKey(ctx, p); err != nil {
			return err
		}
	}
	effective, created := normTime(p.EffectiveAt), normTime(p.CreatedAt)
	d := &t.s.d
	var id int64
	added := true
	err := t.get(ctx, "add price", func() error { added = false; return nil },
		"INSERT INTO prices (kind, offering, zone, amount, effective_at, created_at, actor, idempotency_key)"+
			" VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING id",
		[]any{string(p.Kind), p.Offering, p.Zone, int64(p.Amount), d.timeArg(effective), d.timeArg(created), p.Actor,
			p.IdempotencyKey},
		&id)
	if err != nil {
		return err
	}
	if !added {
		// Only the key is unique: a concurrent add with it committed
		// after the lookup above.
		if p.IdempotencyKey != "" {
			if err := t.priceByKey(ctx, p); err != nil {
				return err
			}
		}
		return internal("add price", errNoID)
	}
	p.ID, p.EffectiveAt, p.CreatedAt = id, effective, created
	return nil
}

// priceByKey returns the idempotency Conflict, with *p set to the version
// added first and Details "existing_id" its (int64) ID, when a price was
// already added with p's key; nil when none was.
func (t *tx) priceByKey(ctx context.Context, p *cloud.Price) error {
	found := true
	old, err := one(ctx, t, "find price by idempotency key", func() error { found = false; return nil },
		"SELECT "+priceCols+" FROM prices WHERE idempotency_key = ? AND idempotency_key <> ''",
		[]any{p.IdempotencyKey}, scanPrice)
	if err != nil || !found {
		return err
	}
	key := p.IdempotencyKey
	*p = *old
	return &cloud.Error{
		Code:    cloud.Conflict,
		Message: "price " + strconv.FormatInt(old.ID, 10) + " was already added with idempotency key " + strconv.Quote(key),
		Details: map[string]any{"existing_id": old.ID},
	}
}

// ListPrices orders by kind, offering, zone, effective time and ID (byte
// order of the text columns on both backends).
func (t *tx) ListPrices(ctx context.Context, f cloud.PriceFilter) ([]*cloud.Price, error) {
	var conds []string
	var args []any
	for _, c := range []struct{ col, val string }{
		{"kind", string(f.Kind)}, {"offering", f.Offering}, {"zone", f.Zone},
	} {
		if c.val != "" {
			conds = append(conds, c.col+" = ?")
			args = append(args, c.val)
		}
	}
	return list(ctx, t, "list prices",
		"SELECT "+priceCols+" FROM prices"+where(conds)+" ORDER BY kind, offering, zone, effective_at, id",
		args, scanPrice)
}

// ---- commitments ----

const commitmentCols = "id, tenant_id, plan, offering, zone, quantity, payment, discount_bp, upfront_fee," +
	" hourly_fee, usage_rate, starts_at, ends_at, created_at, idempotency_key, tags"

func scanCommitment(sc scanner) (*cloud.Commitment, error) {
	var c cloud.Commitment
	err := sc.Scan(&c.ID, &c.TenantID, &c.Plan, &c.Offering, &c.Zone, &c.Quantity, &c.Payment,
		&c.DiscountBP, &c.UpfrontFee, &c.HourlyFee, &c.UsageRate, timeCol{&c.Start}, timeCol{&c.End},
		timeCol{&c.CreatedAt}, &c.IdempotencyKey, jsonCol{&c.Tags})
	return &c, err
}

func validCommitment(c *cloud.Commitment) error {
	switch {
	case c.ID == "":
		return invalidf("commitment has no id")
	case c.TenantID == "":
		return invalidf("commitment %s has no tenant", c.ID)
	case c.Plan != cloud.PlanReservation && c.Plan != cloud.PlanRetainer:
		return invalidf("commitment %s: plan %q is not reservation or retainer", c.ID, c.Plan)
	case c.Offering == "":
		return invalidf("commitment %s has no offering", c.ID)
	case c.Quantity <= 0:
		return invalidf("commitment %s: quantity %d is not positive", c.ID, c.Quantity)
	case !normTime(c.End).After(normTime(c.Start)):
		return invalidf("commitment %s ends at or before its start", c.ID)
	case c.DiscountBP < 0 || c.DiscountBP > 10000:
		return invalidf("commitment %s: discount %d bp is outside 0-10000", c.ID, c.DiscountBP)
	case c.UpfrontFee < 0 || c.HourlyFee < 0 || c.UsageRate < 0:
		return invalidf("commitment %s has a negative fee or rate", c.ID)
	}
	switch c.Payment {
	case "", cloud.PaymentAllUpfront, cloud.PaymentPartialUpfront, cloud.PaymentNoUpfront:
		return nil
	}
	return invalidf("commitment %s: payment %q is not all_upfront, partial_upfront or no_upfront", c.ID, c.Payment)
}

// CreateCommitment is idempotent by key as CreateInstance is, and for the
// same reasons looks the key up before and after its insert.
func (t *tx) CreateCommitment(ctx context.Context, c *cloud.Commitment) error {
	if err := validCommitment(c); err != nil {
		return err
	}
	if c.IdempotencyKey != "" {
		if err := t.commitmentByKey(ctx, c); err != nil {
			return err
		}
	}
	if err := t.mustExist(ctx, "tenants", "tenant", c.TenantID); err != nil {
		return err
	}
	start, end, created := normTime(c.Start), normTime(c.End), normTime(c.CreatedAt)
	tags, err := jsonArg("commitment "+c.ID+" tags", c.Tags)
	if err != nil {
		return err
	}
	d := &t.s.d
	n, err := t.execN(ctx, "create commitment "+c.ID,
		"INSERT INTO commitments ("+commitmentCols+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"+
			" ON CONFLICT DO NOTHING",
		c.ID, c.TenantID, string(c.Plan), c.Offering, c.Zone, c.Quantity, string(c.Payment), c.DiscountBP,
		int64(c.UpfrontFee), int64(c.HourlyFee), int64(c.UsageRate),
		d.timeArg(start), d.timeArg(end), d.timeArg(created), c.IdempotencyKey, tags)
	if err != nil {
		return err
	}
	if n == 0 {
		if c.IdempotencyKey != "" {
			if err := t.commitmentByKey(ctx, c); err != nil {
				return err
			}
		}
		return conflictf("commitment %s already exists", c.ID)
	}
	c.Start, c.End, c.CreatedAt = start, end, created
	return nil
}

// commitmentByKey returns the idempotency Conflict, with *c set to the
// commitment created first, when c's tenant already used c's key; nil when
// it did not.
func (t *tx) commitmentByKey(ctx context.Context, c *cloud.Commitment) error {
	found := true
	old, err := one(ctx, t, "find commitment by idempotency key", func() error { found = false; return nil },
		"SELECT "+commitmentCols+" FROM commitments WHERE tenant_id = ? AND idempotency_key = ?"+
			" AND idempotency_key <> ''", []any{c.TenantID, c.IdempotencyKey}, scanCommitment)
	if err != nil || !found {
		return err
	}
	key := c.IdempotencyKey
	*c = *old
	return idempotencyConflict("commitment", old.ID, key)
}

func (t *tx) GetCommitment(ctx context.Context, id string) (*cloud.Commitment, error) {
	return one(ctx, t, "get commitment "+id, func() error { return notFoundf("commitment %s not found", id) },
		"SELECT "+commitmentCols+" FROM commitments WHERE id = ?", []any{id}, scanCommitment)
}

func (t *tx) ListCommitments(ctx context.Context, tenantID string) ([]*cloud.Commitment, error) {
	q, args := "SELECT "+commitmentCols+" FROM commitments", []any(nil)
	if tenantID != "" {
		q, args = q+" WHERE tenant_id = ?", append(args, tenantID)
	}
	return list(ctx, t, "list commitments", q+" ORDER BY id", args, scanCommitment)
}

// ---- spot requests ----

const spotRequestCols = "id, tenant_id, name, type, max_price, interruption, pools, state, reason, instance_id," +
	" launches, command, env, volumes, tags, version, idempotency_key, created_at, updated_at, image"

func scanSpotRequest(sc scanner) (*cloud.SpotRequest, error) {
	var r cloud.SpotRequest
	err := sc.Scan(&r.ID, &r.TenantID, &r.Name, &r.Type, &r.MaxPrice, &r.Interruption, jsonCol{&r.Pools},
		&r.State, &r.Reason, &r.InstanceID, &r.Launches, jsonCol{&r.Command}, jsonCol{&r.Env},
		jsonCol{&r.Volumes}, jsonCol{&r.Tags}, &r.Version, &r.IdempotencyKey,
		timeCol{&r.CreatedAt}, timeCol{&r.UpdatedAt}, &r.Image)
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
type spotRequestDoc struct{ pools, command, env, volumes, tags string }

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
		"INSERT INTO spot_requests ("+spotRequestCols+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?)"+
			" ON CONFLICT DO NOTHING",
		r.ID, r.TenantID, r.Name, string(r.Type), int64(r.MaxPrice), r.Interruption, doc.pools, string(r.State),
		r.Reason, r.InstanceID, r.Launches, doc.command, doc.env, doc.volumes, doc.tags, r.IdempotencyKey,
		d.timeArg(created), d.timeArg(updated), r.Image)
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
			" image = ?, updated_at = ?, version = version + 1 WHERE id = ? AND version = ?",
		r.Name, string(r.Type), int64(r.MaxPrice), r.Interruption, doc.pools, string(r.State),
		r.Reason, r.InstanceID, r.Launches, doc.command, doc.env, doc.volumes, doc.tags,
		r.Image, t.s.d.timeArg(updated), r.ID, r.Version)
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

// ---- addresses ----

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

// ---- budgets ----

func scanBudget(sc scanner) (*cloud.Budget, error) {
	var b cloud.Budget
	err := sc.Scan(&b.TenantID, &b.Amount, jsonCol{&b.Thresholds}, timeCol{&b.UpdatedAt})
	return &b, err
}

// PutBudget creates or replaces a tenant's budget.
func (t *tx) PutBudget(ctx context.Context, b *cloud.Budget) error {
	if b.Amount < 0 {
		return invalidf("budget of tenant %s: amount %d is negative", b.TenantID, b.Amount)
	}
	for _, th := range b.Thresholds {
		if th <= 0 {
			return invalidf("budget of tenant %s: threshold %d%% is not positive", b.TenantID, th)
		}
	}
	if err := t.mustExist(ctx, "tenants", "tenant", b.TenantID); err != nil {
		return err
	}
	thresholds, err := jsonArg("budget thresholds", b.Thresholds)
	if err != nil {
		return err
	}
	updated := normTime(b.UpdatedAt)
	_, err = t.exec(ctx, "put budget of tenant "+b.TenantID,
		"INSERT INTO budgets (tenant_id, amount, thresholds, updated_at) VALUES (?, ?, ?, ?)"+
			" ON CONFLICT (tenant_id) DO UPDATE SET amount = excluded.amount, thresholds = excluded.thresholds,"+
			" updated_at = excluded.updated_at",
		b.TenantID, int64(b.Amount), thresholds, t.s.d.timeArg(updated))
	if err != nil {
		return err
	}
	b.UpdatedAt = updated
	return nil
}

// GetBudget returns NotFound for a tenant without a budget.
func (t *tx) GetBudget(ctx context.Context, tenantID string) (*cloud.Budget, error) {
	return one(ctx, t, "get budget of tenant "+tenantID,
		func() error { return notFoundf("budget of tenant %s not found", tenantID) },
		"SELECT tenant_id, amount, thresholds, updated_at FROM budgets WHERE tenant_id = ?", []any{tenantID},
		scanBudget)
}

// ListBudgets orders by tenant ID.
func (t *tx) ListBudgets(ctx context.Context) ([]*cloud.Budget, error) {
	return list(ctx, t, "list budgets",
		"SELECT tenant_id, amount, thresholds, updated_at FROM budgets ORDER BY tenant_id", nil, scanBudget)
}

const budgetAlertCols = "tenant_id, month, threshold, spent, at"

func scanBudgetAlert(sc scanner) (*cloud.BudgetAlert, error) {
	var a cloud.BudgetAlert
	err := sc.Scan(&a.TenantID, &a.Month, &a.Threshold, &a.Spent, timeCol{&a.Time})
	return &a, err
}

// RecordBudgetAlert takes Month as "2006-01".
func (t *tx) RecordBudgetAlert(ctx context.Context, a *cloud.BudgetAlert) error {
	if m, err := time.Parse("2006-01", a.Month); err != nil || m.Format("2006-01") != a.Month {
		return invalidf("budget alert of tenant %s: month %q is not YYYY-MM", a.TenantID, a.Month)
	}
	if a.Threshold <= 0 {
		return invalidf("budget alert of tenant %s: threshold %d%% is not positive", a.TenantID, a.Threshold)
	}
	if err := t.mustExist(ctx, "tenants", "tenant", a.TenantID); err != nil {
		return err
	}
	at := normTime(a.Time)
	n, err := t.execN(ctx, "record budget alert of tenant "+a.TenantID,
		"INSERT INTO budget_alerts ("+budgetAlertCols+") VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
		a.TenantID, a.Month, a.Threshold, int64(a.Spent), t.s.d.timeArg(at))
	if err != nil {
		return err
	}
	if n == 0 {
		return conflictf("tenant %s already had its %d%% budget alert for %s", a.TenantID, a.Threshold, a.Month)
	}
	a.Time = at
	return nil
}

// ListBudgetAlerts lists a tenant's alerts (every tenant's when tenantID
// is empty) by tenant, month and threshold.
func (t *tx) ListBudgetAlerts(ctx context.Context, tenantID string) ([]*cloud.BudgetAlert, error) {
	q, args := "SELECT "+budgetAlertCols+" FROM budget_alerts", []any(nil)
	if tenantID != "" {
		q, args = q+" WHERE tenant_id = ?", append(args, tenantID)
	}
	return list(ctx, t, "list budget alerts", q+" ORDER BY tenant_id, month, threshold", args, scanBudgetAlert)
}

func (t *tx) PriceByKey(ctx context.Context, key string) (*cloud.Price, error) {
	return one(ctx, t, "find price by idempotency key",
		func() error { return notFoundf("no price version has idempotency key %s", strconv.Quote(key)) },
		"SELECT "+priceCols+" FROM prices WHERE idempotency_key = ? AND idempotency_key <> ''",
		[]any{key}, scanPrice)
}

func (t *tx) CommitmentByKey(ctx context.Context, tenantID, key string) (*cloud.Commitment, error) {
	return one(ctx, t, "find commitment by idempotency key",
		func() error {
			return notFoundf("tenant %s has no commitment with idempotency key %s", tenantID, strconv.Quote(key))
		},
		"SELECT "+commitmentCols+" FROM commitments WHERE tenant_id = ? AND idempotency_key = ? AND idempotency_key <> ''",
		[]any{tenantID, key}, scanCommitment)
}

func (t *tx) SpotRequestByKey(ctx context.Context, tenantID, key string) (*cloud.SpotRequest, error) {
	return one(ctx, t, "find spot request by idempotency key",
		func() error {
			return notFoundf("tenant %s has no spot request with idempotency key %s", tenantID, strconv.Quote(key))
		},
		"SELECT "+spotRequestCols+" FROM spot_requests WHERE tenant_id = ? AND idempotency_key = ? AND idempotency_key <> ''",
		[]any{tenantID, key}, scanSpotRequest)
}
