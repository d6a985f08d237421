package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpucloud/gpucloud/billing"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
)

// DefaultAccruedRefresh is how long one rating of every tenant serves the
// scrapes of gpucloud_tenant_accrued_dollars.
const DefaultAccruedRefresh = time.Minute

// WatchAccrued exposes the amount each tenant accrued this month, rated at
// most once per refresh (DefaultAccruedRefresh when zero), with now as the
// clock (time.Now when nil).
func (s *Registry) WatchAccrued(st cloud.Store, refresh time.Duration, now func() time.Time) {
	c := NewAccruedCollector(st)
	c.Refresh, c.Now, c.Log = refresh, now, s.log()
	s.Registry.MustRegister(c)
}

// AccruedCollector exposes gpucloud_tenant_accrued_dollars{tenant}: what
// each tenant has accrued in the current billing period (the calendar
// month in UTC) up to the time of the rating, as its running invoice says
// (billing.Load and billing.Rate: commitments, minimums, volumes and
// addresses included). Every tenant has a series, 0 included; the set of
// tenants is bounded.
//
// Rating every tenant reads the month's usage ledger and prices, which
// costs far more than the rest of a scrape (about 0.2 s for 1,000 tenants
// and 30,000 ledger entries on SQLite; metrics/bench_test.go), so one
// rating serves the scrapes of Refresh. The first scrape after that still
// serves it and starts the next rating in the background; only the very
// first scrape waits for a rating. The values are therefore at most
// Refresh plus one rating old. A rating that fails is served (as the
// scrape's error) until the next refresh too, so that a broken store or
// price book is not rated at every scrape.
//
// Amounts are integer micro-dollars everywhere in gpucloud; they become a
// float here only because Prometheus values are floats. A float64 holds
// every amount below 2^53 micro-dollars (9 billion dollars) exactly.
type AccruedCollector struct {
	Store cloud.Store
	// Refresh is how long one rating serves scrapes; DefaultAccruedRefresh
	// when zero.
	Refresh time.Duration
	// Now is the clock of the ratings and of their age; time.Now when nil.
	Now func() time.Time
	// Log receives the tenants a rating had to leave out; slog.Default
	// when nil.
	Log *slog.Logger

	accrued *prometheus.Desc
	// rating serializes the ratings; last is the latest one.
	rating sync.Mutex
	last   atomic.Pointer[accrual]
}

// accrual is one rating of every tenant.
type accrual struct {
	at     time.Time
	totals map[string]money.Micros
	err    error
}

// NewAccruedCollector rates st.
func NewAccruedCollector(st cloud.Store) *AccruedCollector {
	return &AccruedCollector{Store: st, accrued: desc("tenant_accrued_dollars",
		"What the tenant has accrued in the current billing period (calendar month, UTC) so far, in dollars, as of the last rating (rated in the background about once a minute by default).",
		"tenant")}
}

func (c *AccruedCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.accrued }

func (c *AccruedCollector) Collect(ch chan<- prometheus.Metric) {
	a := c.current()
	if a.err != nil {
		ch <- prometheus.NewInvalidMetric(c.accrued, a.err)
		return
	}
	for tenant, m := range a.totals {
		ch <- prometheus.MustNewConstMetric(c.accrued, prometheus.GaugeValue, dollars(m), tenant)
	}
}

func (c *AccruedCollector) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

func (c *AccruedCollector) refresh() time.Duration {
	if c.Refresh > 0 {
		return c.Refresh
	}
	return DefaultAccruedRefresh
}

// fresh reports whether a rating still serves scrapes at now.
func (c *AccruedCollector) fresh(a *accrual, now time.Time) bool {
	return a != nil && !now.Before(a.at) && now.Sub(a.at) < c.refresh()
}

// current returns the rating to serve: the last one while it is fresh.
// Once it is stale, the scrape serves it still and starts a new rating in
// the background (one at a time, bounded by ScrapeTimeout), so that no
// scrape but the very first waits for a rating.
func (c *AccruedCollector) current() *accrual {
	a := c.last.Load()
	if c.fresh(a, c.now()) {
		return a
	}
	if a == nil {
		c.rating.Lock()
		defer c.rating.Unlock()
		if b := c.last.Load(); b != nil {
			return b // rated while this scrape waited
		}
		b := c.rate()
		c.last.Store(b)
		return b
	}
	if c.rating.TryLock() {
		if b := c.last.Load(); b != a {
			// Another scrape's rating ended between the load above and
			// the lock: serve it, and start none.
			c.rating.Unlock()
			return b
		}
		go func() {
			defer c.rating.Unlock()
			c.last.Store(c.rate())
		}()
	}
	return a
}

// rate rates every tenant's current month as of now, in one transaction
// bounded by ScrapeTimeout. When the price book has a gap (usage at a time
// no price covers: the operator's to fix), the tenants are rated one by
// one and those that cannot be rated are left out and logged, so that one
// tenant's gap does not hide the others.
func (c *AccruedCollector) rate() *accrual {
	now := c.now()
	utc := now.UTC()
	period := billing.Month(utc.Year(), utc.Month())
	a := &accrual{at: now, totals: map[string]money.Micros{}}
	ctx, cancel := context.WithTimeout(context.Background(), ScrapeTimeout)
	defer cancel()
	var skipped []string
	a.err = c.Store.Tx(ctx, func(tx cloud.Tx) error {
		clear(a.totals)
		skipped = skipped[:0]
		tenants, err := tx.ListTenants(ctx)
		if err != nil {
			return err
		}
		for _, t := range tenants {
			a.totals[t.ID] = 0
		}
		invs, err := rateTenant(ctx, tx, "", period, now)
		var missing *billing.MissingPriceError
		if errors.As(err, &missing) {
			invs = nil
			for _, t := range tenants {
				one, err := rateTenant(ctx, tx, t.ID, period, now)
				if errors.As(err, &missing) {
					delete(a.totals, t.ID)
					skipped = append(skipped, t.ID+": "+err.Error())
					continue
				}
				if err != nil {
					return err
				}
				invs = append(invs, one...)
			}
		} else if err != nil {
			return err
		}
		for _, inv := range invs {
			if inv != nil {
				a.totals[inv.TenantID] += inv.Total
			}
		}
		return nil
	})
	if a.err != nil {
		a.err = fmt.Errorf("rate the tenants' accrued amounts: %w", a.err)
	}
	if len(skipped) > 0 {
		log := c.Log
		if log == nil {
			log = slog.Default()
		}
		log.Warn("metrics: tenants left out of gpucloud_tenant_accrued_dollars: the price book has a gap",
			"tenants", len(skipped), "first", skipped[0])
	}
	return a
}

// rateTenant rates one tenant, or every tenant when tenant is empty.
func rateTenant(ctx context.Context, tx cloud.Tx, tenant string, period billing.Period, now time.Time) ([]*billing.Invoice, error) {
	in, err := billing.Load(ctx, tx, tenant, period, now)
	if err != nil {
		return nil, err
	}
	res, err := billing.Rate(in)
	if err != nil {
		return nil, err
	}
	return res.Invoices, nil
}
