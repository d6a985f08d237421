package sqlstore

import (
	"context"
	"strconv"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
)

// Prices, commitments and budgets: part of cloud.BillingTx. Spot requests
// and the spot price history are in spot.go, addresses in addresses.go,
// and the usage ledger, which the store writes itself, in
// billing_ledger.go. Money is stored as integer micros.

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

func (t *tx) PriceByKey(ctx context.Context, key string) (*cloud.Price, error) {
	return one(ctx, t, "find price by idempotency key",
		func() error { return notFoundf("no price version has idempotency key %s", strconv.Quote(key)) },
		"SELECT "+priceCols+" FROM prices WHERE idempotency_key = ? AND idempotency_key <> ''",
		[]any{key}, scanPrice)
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

func (t *tx) CommitmentByKey(ctx context.Context, tenantID, key string) (*cloud.Commitment, error) {
	return one(ctx, t, "find commitment by idempotency key",
		func() error {
			return notFoundf("tenant %s has no commitment with idempotency key %s", tenantID, strconv.Quote(key))
		},
		"SELECT "+commitmentCols+" FROM commitments WHERE tenant_id = ? AND idempotency_key = ? AND idempotency_key <> ''",
		[]any{tenantID, key}, scanCommitment)
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
