package metrics

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/controller"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/internal/testkit"
	"github.com/gpucloud/gpucloud/store/sqlite"
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
	s := NewServer()
	s.WatchStore(st)
	s.WatchFleet(sched)
	s.WatchMarket(q)
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
