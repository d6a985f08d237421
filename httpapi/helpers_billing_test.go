package httpapi

import (
	"bytes"
	"context"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
	"github.com/gpucloud/gpucloud/store/pgtest"
	"github.com/gpucloud/gpucloud/store/postgres"
)

// onBothStores runs a billing test on newEnv's SQLite store, and on a
// fresh PostgreSQL schema when GPUCLOUD_TEST_POSTGRES_URL is set (it skips
// otherwise), so that the routes' transactions are tried where aborted
// statements and serialization failures are real.
func onBothStores(t *testing.T, test func(t *testing.T, e *env)) {
	t.Run("sqlite", func(t *testing.T) { test(t, newEnv(t)) })
	t.Run("postgres", func(t *testing.T) {
		ctx := context.Background()
		st, err := postgres.Open(ctx, pgtest.URL(t))
		if err != nil {
			t.Fatalf("open store: %v", err)
		}
		t.Cleanup(func() { st.Close() })
		test(t, newEnvOn(t, st))
	})
}

// newEnvOn is newEnv over the store st.
func newEnvOn(t *testing.T, st cloud.Store) *env {
	t.Helper()
	ctx := context.Background()
	e := &env{t: t, store: st, clock: &clock{t: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)}, logs: &bytes.Buffer{}}
	log := slog.New(slog.NewTextHandler(&syncWriter{w: e.logs}, nil))
	e.srv = httptest.NewServer(New(st, catalog.Default(), Options{Now: e.clock.Now, Logger: log}))
	t.Cleanup(e.srv.Close)
	tok, created, err := Bootstrap(ctx, st, e.clock.Now())
	if err != nil || !created {
		t.Fatalf("Bootstrap = %v, %v", created, err)
	}
	e.adminToken = tok
	e.admin = e.client(tok)
	for _, name := range []string{"acme", "globex"} {
		tn, err := e.admin.CreateTenant(ctx, name)
		if err != nil {
			t.Fatalf("create tenant %s: %v", name, err)
		}
		cu, err := e.admin.CreateUser(ctx, tn.ID, api.CreateUserRequest{Name: name + "-dev"})
		if err != nil {
			t.Fatalf("create user in %s: %v", name, err)
		}
		if name == "acme" {
			e.acmeID, e.acme, e.acmeUser, e.acmeToken = tn.ID, e.client(cu.Secret), cu.User, cu.Secret
		} else {
			e.globexID, e.globex, e.globexUser = tn.ID, e.client(cu.Secret), cu.User
		}
	}
	return e
}

// billingCounts is a snapshot of the store's rows, billing ones included,
// to check that a failed request changed nothing.
type billingCounts struct {
	counts
	Prices, Commitments, SpotRequests, Addresses, Released, Associated, Budgets, Alerts, Usage int
	SpotVersions                                                                               int64
}

func (e *env) billingCounts() billingCounts {
	e.t.Helper()
	c := billingCounts{counts: e.counts()}
	ctx := context.Background()
	err := e.store.Tx(ctx, func(tx cloud.Tx) error {
		c = billingCounts{counts: c.counts}
		ps, err := tx.ListPrices(ctx, cloud.PriceFilter{})
		if err != nil {
			return err
		}
		c.Prices = len(ps)
		cs, err := tx.ListCommitments(ctx, "")
		if err != nil {
			return err
		}
		c.Commitments = len(cs)
		rs, err := tx.ListSpotRequests(ctx, cloud.SpotRequestFilter{})
		if err != nil {
			return err
		}
		c.SpotRequests = len(rs)
		for _, r := range rs {
			c.SpotVersions += r.Version
		}
		as, err := tx.ListAddresses(ctx, "")
		if err != nil {
			return err
		}
		c.Addresses = len(as)
		for _, a := range as {
			if a.ReleasedAt != nil {
				c.Released++
			}
			if a.InstanceID != "" {
				c.Associated++
			}
		}
		bs, err := tx.ListBudgets(ctx)
		if err != nil {
			return err
		}
		c.Budgets = len(bs)
		for _, b := range bs {
			al, err := tx.ListBudgetAlerts(ctx, b.TenantID)
			if err != nil {
				return err
			}
			c.Alerts += len(al)
		}
		us, err := tx.ListUsage(ctx, cloud.UsageFilter{})
		if err != nil {
			return err
		}
		c.Usage = len(us)
		return nil
	})
	if err != nil {
		e.t.Fatalf("count billing rows: %v", err)
	}
	return c
}

// billingUnchanged fails the test if the store changed since before.
func (e *env) billingUnchanged(before billingCounts, what string) {
	e.t.Helper()
	if after := e.billingCounts(); after != before {
		e.t.Errorf("%s changed the store: before %+v, after %+v", what, before, after)
	}
}

// withPrices gives the store the built-in price book.
func (e *env) withPrices() {
	e.t.Helper()
	if _, err := BootstrapPrices(context.Background(), e.store, catalog.Default(), e.clock.Now()); err != nil {
		e.t.Fatalf("bootstrap prices: %v", err)
	}
}

// addPrice stores a compute price version directly.
func (e *env) addPrice(offering, zone, amount string, at time.Time) {
	e.t.Helper()
	p := &cloud.Price{Kind: cloud.PriceCompute, Offering: offering, Zone: zone, Amount: money.MustParse(amount),
		EffectiveAt: at, CreatedAt: at}
	if err := e.store.Tx(context.Background(), func(tx cloud.Tx) error { return tx.AddPrice(context.Background(), p) }); err != nil {
		e.t.Fatalf("add price: %v", err)
	}
}

// move changes an instance's state as the scheduler or agent would: the
// instance and its instance.state event in one transaction, so that the
// store meters it.
func (e *env) move(id string, to cloud.State, zone string) *cloud.Instance {
	e.t.Helper()
	ctx := context.Background()
	var in *cloud.Instance
	err := e.store.Tx(ctx, func(tx cloud.Tx) error {
		var err error
		if in, err = tx.GetInstance(ctx, id); err != nil {
			return err
		}
		from := in.State
		in.State, in.UpdatedAt = to, e.clock.Now()
		if zone != "" {
			in.Zone = zone
		}
		if err := tx.UpdateInstance(ctx, in); err != nil {
			return err
		}
		return tx.AppendEvent(ctx, &cloud.Event{Time: e.clock.Now(), Kind: cloud.EventInstanceState, TenantID: in.TenantID,
			InstanceID: in.ID, From: from, To: to, Reason: "test"})
	})
	if err != nil {
		e.t.Fatalf("move %s to %s: %v", id, to, err)
	}
	return in
}

// serverWith starts a second API server over e's store with opts changed
// by fn (the clock and logger stay e's), and returns a client of it as
// token.
func (e *env) serverWith(t *testing.T, token string, fn func(*Options)) *client.Client {
	t.Helper()
	opts := Options{Now: e.clock.Now, Logger: slog.New(slog.NewTextHandler(&syncWriter{w: e.logs}, nil))}
	fn(&opts)
	srv := httptest.NewServer(New(e.store, catalog.Default(), opts))
	t.Cleanup(srv.Close)
	return client.New(srv.URL, token, srv.Client())
}
