package httpapi

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

// onBothStores runs a billing test on newEnv over each backend of
// testkit.Backends: SQLite, and a fresh PostgreSQL schema when
// GPUCLOUD_TEST_POSTGRES_URL is set (it skips otherwise), so that the
// routes' transactions are tried where aborted statements and
// serialization failures are real.
func onBothStores(t *testing.T, test func(t *testing.T, e *env)) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) { test(t, newEnv(t, st)) })
}

// billingCounts and billingUnchanged are counts and unchanged: the
// snapshot (testkit.Rows) has the billing rows too.
func (e *env) billingCounts() counts { e.t.Helper(); return e.counts() }

func (e *env) billingUnchanged(before counts, what string) { e.t.Helper(); e.unchanged(before, what) }

// withPrices gives the store the built-in price book.
func (e *env) withPrices() {
	e.t.Helper()
	if _, err := service.BootstrapPrices(context.Background(), e.store, catalog.Default(), e.clock.Now()); err != nil {
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

// move moves an instance to state to as the scheduler and the agent
// would, step by step (testkit.Walk), placing it in zone (when not empty)
// if its way passes through scheduled; the store meters the moves.
func (e *env) move(id string, to cloud.State, zone string) *cloud.Instance {
	e.t.Helper()
	return testkit.Walk(e.t, e.store, id, to, testkit.Via{Zone: zone}, e.clock.Now())
}

// serverWith starts a second API server over e's store, on services
// whose options are changed by fn (the clock stays e's; the logger is
// e's), and returns a client of it as token.
func (e *env) serverWith(t *testing.T, token string, fn func(*service.Options)) *client.Client {
	t.Helper()
	so := service.Options{Now: e.clock.Now}
	fn(&so)
	srv := httptest.NewServer(New(service.New(e.store, nil, so), Options{Logger: slog.New(slog.NewTextHandler(&syncWriter{w: e.logs}, nil))}))
	t.Cleanup(srv.Close)
	return client.New(srv.URL, token, srv.Client())
}
