package controlplane

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/store/pgtest"
	"github.com/gpucloud/gpucloud/store/sqlstore"
	"github.com/gpucloud/gpucloud/testkit"
)

// storeCost is what a piece of work cost the store: transactions begun
// and statements sent, per unit of work.
type storeCost struct {
	tx, stmts float64
}

// TestStoreCostPerCreate counts the store's transactions and statements per
// create, on the production path (TLS, quotas, rate limits, metrics): the
// API's create, from the request to the committed row, then the scheduler's
// step that places the creates. On PostgreSQL each transaction costs two
// round trips beyond its statements (BEGIN and COMMIT) and each statement
// one (pgx's cached prepared statements; see store/sqlstore). The controllers
// are stopped after a first create, so that nothing else uses the store; the
// scheduler is stepped by hand. The budgets are today's figures
// (docs/BENCHMARKS.md): a change that costs a create more work fails here.
func TestStoreCostPerCreate(t *testing.T) {
	const creates = 20
	for _, c := range []struct {
		name                     string
		db                       func(t *testing.T) string
		create, burst, placement storeCost // budgets: at most this much per create
	}{
		// A lone create: one transaction of 9 statements (the key's
		// instance, the quota, its lock, the tenant's count, its default
		// subnet, the subnet's cursor, the tenant, the instance and its
		// event). A burst of the tenant's creates sent at once shares
		// transactions (group commit): the first runs alone, the rest
		// arrive while it runs and go in the next, whose statements are
		// those of one create plus one read of all their keys. The
		// scheduler's step: 2 transactions of 8 statements in all, for 20
		// placements.
		{"sqlite", func(t *testing.T) string { return "sqlite://" + filepath.Join(t.TempDir(), "gpucloud.db") },
			storeCost{tx: 1, stmts: 9}, storeCost{tx: 0.5, stmts: 5}, storeCost{tx: 0.1, stmts: 0.4}},
		{"postgres", func(t *testing.T) string { return pgtest.URL(t) },
			storeCost{tx: 1, stmts: 9}, storeCost{tx: 0.5, stmts: 5}, storeCost{tx: 0.1, stmts: 0.4}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			s := startStill(t, c.db(t), 25) // room for both rounds
			counts := service.Unwrap(s.Store).(interface{ Counts() sqlstore.Counts }).Counts
			admin := client.New(s.URL, s.AdminToken, s.HTTPClient())
			tn, err := admin.CreateTenant(ctx, "count")
			if err != nil {
				t.Fatal(err)
			}
			u, err := admin.CreateUser(ctx, tn.ID, api.CreateUserRequest{Name: "load"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := admin.SetQuota(ctx, tn.ID, api.QuotaSpec{Instances: 100, GPUsPerModel: 100,
				RequestsPerSecond: 100, Burst: 100}); err != nil {
				t.Fatal(err)
			}
			member := client.New(s.URL, u.Secret, s.HTTPClient())
			// The first create warms what is cached (the token, prepared
			// statements). Then the controllers stop: a create that
			// leaves the creates idle kicks the leader's scheduler
			// (Options.CreatesIdle), which would place this test's
			// creates in its own rounds. The scheduler is stepped by hand
			// from then on; its first step builds its fleet.
			if _, err := member.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "h100.1x"}, "warm"); err != nil {
				t.Fatal(err)
			}
			s.StopControllers()
			if _, err := s.Scheduler.Step(ctx); err != nil {
				t.Fatal(err)
			}
			// Wait until the store is still.
			last := counts()
			testkit.Eventually(t, time.Minute, "the store to be still", func() bool {
				time.Sleep(300 * time.Millisecond)
				now := counts()
				still := now == last
				last = now
				return still
			})
			per := func(d sqlstore.Counts) storeCost {
				return storeCost{tx: float64(d.Begins) / creates, stmts: float64(d.Statements) / creates}
			}
			// Two rounds, and each figure's lower: a transaction of the
			// server's own (a leader's lease renewal) may land in one
			// round's window, not in both.
			var create, placement storeCost
			for round := range 2 {
				before := counts()
				for i := 0; i < creates; i++ {
					if _, err := member.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "h100.1x"},
						fmt.Sprintf("key-%d-%d", round, i)); err != nil {
						t.Fatal(err)
					}
				}
				created := counts()
				placed, err := s.Scheduler.Step(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if placed != creates {
					t.Fatalf("the scheduler placed %d of %d creates", placed, creates)
				}
				cr, pl := per(created.Sub(before)), per(counts().Sub(created))
				if round == 0 {
					create, placement = cr, pl
				}
				create = storeCost{tx: min(create.tx, cr.tx), stmts: min(create.stmts, cr.stmts)}
				placement = storeCost{tx: min(placement.tx, pl.tx), stmts: min(placement.stmts, pl.stmts)}
			}
			// The same creates sent at once, twice.
			var together storeCost
			for round := range 2 {
				before := counts()
				var wg sync.WaitGroup
				errs := make([]error, creates)
				start := make(chan struct{})
				for i := range creates {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						_, errs[i] = member.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "h100.1x"},
							fmt.Sprintf("burst-%d-%d", round, i))
					}()
				}
				close(start)
				wg.Wait()
				if err := errors.Join(errs...); err != nil {
					t.Fatal(err)
				}
				cr := per(counts().Sub(before))
				if round == 0 {
					together = cr
				}
				together = storeCost{tx: min(together.tx, cr.tx), stmts: min(together.stmts, cr.stmts)}
			}
			t.Logf("per create: API %.2f transactions, %.2f statements alone, %.2f and %.2f in a burst of %d; placement %.2f transactions, %.2f statements",
				create.tx, create.stmts, together.tx, together.stmts, creates, placement.tx, placement.stmts)
			for _, b := range []struct {
				what      string
				got, most storeCost
			}{{"API create", create, c.create}, {"API create in a burst", together, c.burst}, {"placement", placement, c.placement}} {
				if b.got.tx > b.most.tx || b.got.stmts > b.most.stmts {
					t.Errorf("%s costs %+v per create, over its budget of %+v", b.what, b.got, b.most)
				}
			}
		})
	}
}
