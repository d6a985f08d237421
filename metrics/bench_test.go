package metrics

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/billing"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/controller"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/store/sqlite"
	"github.com/gpucloud/gpucloud/testkit"
)

// BenchmarkScrape gathers the registry of a server with 10,000 hosts and
// 50,000 instances (100 tenants, 10 offerings, 6 states, both markets) on
// SQLite, the fleet's GPUs from a scheduler rebuilt over those hosts and
// the quotes of 100 pools: one scrape. The goal is under 200 ms.
func BenchmarkScrape(b *testing.B) {
	const hosts, instances, tenants, batch = 10_000, 50_000, 100, 2_000
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "bench.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	cat := catalog.Default()
	var offerings []string
	for _, o := range cat.Offerings() {
		if len(offerings) < 10 {
			offerings = append(offerings, o.Name)
		}
	}
	states := []cloud.State{cloud.Running, cloud.Running, cloud.Running, cloud.Pending, cloud.Stopped, cloud.Terminated,
		cloud.Scheduled, cloud.Failed}
	models := []string{"H100", "A100-80GB", "L40S"}
	for lo := 0; lo < hosts; lo += batch {
		err := st.Tx(ctx, func(tx cloud.Tx) error {
			if lo == 0 {
				for i := range tenants {
					id := fmt.Sprintf("t-%03d", i)
					if err := tx.CreateTenant(ctx, &cloud.Tenant{ID: id, Name: id, CreatedAt: testkit.Epoch}); err != nil {
						return err
					}
				}
			}
			for i := lo; i < min(lo+batch, hosts); i++ {
				h := fleet.MockHost(fmt.Sprintf("h-%05d", i), models[i%len(models)], 8)
				h.Zone = fmt.Sprintf("zone-%d", i%4)
				state := fleet.Schedulable
				if i%50 == 0 {
					state = fleet.Cordoned
				}
				if err := tx.PutHost(ctx, &cloud.Host{ID: h.ID, State: state, Spec: *h, LastHeartbeat: testkit.Epoch}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	for lo := 0; lo < instances; lo += batch {
		err := st.Tx(ctx, func(tx cloud.Tx) error {
			for i := lo; i < min(lo+batch, instances); i++ {
				market := cloud.MarketOnDemand
				if i%3 == 0 {
					market = cloud.MarketSpot
				}
				in := &cloud.Instance{ID: fmt.Sprintf("i-%06d", i), TenantID: fmt.Sprintf("t-%03d", i%tenants),
					Offering: offerings[(i/tenants)%len(offerings)], State: states[i%len(states)], Market: market,
					CreatedAt: testkit.Epoch, UpdatedAt: testkit.Epoch}
				if err := tx.CreateInstance(ctx, in); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	sched := controller.NewScheduler(st, cat)
	sched.Log = quietLog()
	if err := sched.Rebuild(ctx); err != nil {
		b.Fatal(err)
	}
	q := quotes{}
	for i, o := range cat.Offerings() {
		if i >= 25 {
			break
		}
		for z := range 4 {
			q[cloud.Pool{Offering: o.Name, Zone: fmt.Sprintf("zone-%d", z)}] = controller.PoolQuote{OnDemand: 2_000_000, Spot: 700_000, Free: 10}
		}
	}
	s := NewRegistry()
	s.WatchStore(st)
	s.WatchFleet(sched)
	s.WatchMarket(q)
	s.WatchPending(sched)
	series := 0
	b.ResetTimer()
	start := time.Now()
	for b.Loop() {
		mfs, err := s.Registry.Gather()
		if err != nil {
			b.Fatal(err)
		}
		series = 0
		for _, mf := range mfs {
			series += len(mf.GetMetric())
		}
	}
	b.ReportMetric(float64(time.Since(start).Milliseconds())/float64(b.N), "ms/scrape")
	b.ReportMetric(float64(series), "series")
}

// BenchmarkAccrued measures gpucloud_tenant_accrued_dollars on SQLite with
// 1,000 tenants, each with 10 on-demand instances (10 offerings) that ran
// twice this month: 30,000 usage ledger entries. "rating" is one rating of
// every tenant, which the collector makes in the background about once a
// minute; "scrape" a scrape of the server's registry with the collector,
// which serves the last rating.
func BenchmarkAccrued(b *testing.B) {
	const tenants, perTenant, batch = 1_000, 10, 100
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "bench.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	cat := catalog.Default()
	var offerings []string
	for _, o := range cat.Offerings() {
		if len(offerings) < perTenant {
			offerings = append(offerings, o.Name)
		}
	}
	month := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	now := month.AddDate(0, 0, 20)
	err = st.Tx(ctx, func(tx cloud.Tx) error {
		ps, err := billing.DefaultPrices(cat)
		if err != nil {
			return err
		}
		for _, p := range ps {
			if err := tx.AddPrice(ctx, p); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	entries := 0
	for lo := 0; lo < tenants; lo += batch {
		err := st.Tx(ctx, func(tx cloud.Tx) error {
			var evs []*cloud.Event
			for t := lo; t < min(lo+batch, tenants); t++ {
				tenant := fmt.Sprintf("t-%04d", t)
				if err := tx.CreateTenant(ctx, &cloud.Tenant{ID: tenant, Name: tenant, CreatedAt: testkit.Epoch}); err != nil {
					return err
				}
				for i, o := range offerings {
					id := fmt.Sprintf("i-%04d-%d", t, i)
					in := &cloud.Instance{ID: id, TenantID: tenant, Offering: o, Zone: "zone-1", State: cloud.Running,
						Market: cloud.MarketOnDemand, CreatedAt: month, UpdatedAt: month}
					if err := tx.CreateInstance(ctx, in); err != nil {
						return err
					}
					// Two runs: days 1-5 and from day 10 on (still running).
					start := month.Add(time.Duration(t%24) * time.Hour)
					for _, e := range []struct {
						at       time.Time
						from, to cloud.State
					}{
						{start, cloud.Starting, cloud.Running},
						{start.AddDate(0, 0, 4), cloud.Running, cloud.Stopped},
						{start.AddDate(0, 0, 9), cloud.Starting, cloud.Running},
					} {
						evs = append(evs, &cloud.Event{Time: e.at, Kind: cloud.EventInstanceState, TenantID: tenant, InstanceID: id,
							From: e.from, To: e.to, Actor: "bench"})
						entries++
					}
				}
			}
			return tx.AppendEvents(ctx, evs)
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	// A rating, as the background refresh makes it.
	c := NewAccruedCollector(st)
	c.Now = func() time.Time { return now }
	b.Run("rating", func(b *testing.B) {
		series := 0
		start := time.Now()
		for b.Loop() {
			a := c.rate()
			if a.err != nil {
				b.Fatal(a.err)
			}
			series = len(a.totals)
		}
		b.ReportMetric(float64(time.Since(start).Microseconds())/1000/float64(b.N), "ms/rating")
		b.ReportMetric(float64(series), "tenants")
		b.ReportMetric(float64(entries), "ledger-entries")
	})
	// A scrape, which serves the last rating.
	b.Run("scrape", func(b *testing.B) {
		s := NewRegistry()
		s.Registry.MustRegister(c)
		if _, err := s.Registry.Gather(); err != nil { // the first rating
			b.Fatal(err)
		}
		series := 0
		start := time.Now()
		for b.Loop() {
			mfs, err := s.Registry.Gather()
			if err != nil {
				b.Fatal(err)
			}
			for _, mf := range mfs {
				if mf.GetName() == "gpucloud_tenant_accrued_dollars" {
					series = len(mf.GetMetric())
				}
			}
		}
		b.ReportMetric(float64(time.Since(start).Microseconds())/1000/float64(b.N), "ms/scrape")
		b.ReportMetric(float64(series), "tenants")
	})
}
