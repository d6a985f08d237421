package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/testkit"
)

// BenchmarkGroupsStep1000 is one round of the group controller over 1,000
// target-tracking groups of two running members each, every member
// reporting its GPU utilization each round (goal: under 50 ms). Loads stay
// inside the target's band, so a round reads, folds and plans but writes
// nothing: the steady state of a large cloud. It runs on SQLite and on
// PostgreSQL (skipped without GPUCLOUD_TEST_POSTGRES_URL).
func BenchmarkGroupsStep1000(b *testing.B) {
	for _, be := range testkit.Backends() {
		b.Run("store="+be.Name, func(b *testing.B) { benchGroupsStep(b, be.Open(b)) })
	}
}

func benchGroupsStep(b *testing.B, st cloud.Store) {
	ctx := context.Background()
	clock := testkit.NewClock(t0)
	const groups = 1000
	var ids []string
	if err := st.Tx(ctx, func(tx cloud.Tx) error {
		if err := tx.CreateTenant(ctx, &cloud.Tenant{ID: "t1", Name: "acme", CreatedAt: t0}); err != nil {
			return err
		}
		for i := 0; i < groups; i++ {
			g := &cloud.Group{ID: fmt.Sprintf("grp-%04d", i), TenantID: "t1", Name: fmt.Sprintf("g%04d", i),
				Template: cloud.GroupTemplate{Offerings: []string{"l40s.1x"}, Zones: []string{fleet.MockZone}, Command: []string{"train"}},
				Min:      1, Max: 4, Desired: 2, State: cloud.GroupActive, CreatedAt: t0, UpdatedAt: t0,
				Policies: []cloud.ScalingPolicy{{Name: "gpu", Type: cloud.PolicyTarget, Metric: cloud.MetricGPUUtilization, Target: 0.6}},
				Timing:   cloud.GroupTiming{WarmupSeconds: 1}}
			if err := tx.CreateGroup(ctx, g); err != nil {
				return err
			}
			ids = append(ids, g.ID)
			for j := 0; j < 2; j++ {
				in := &cloud.Instance{ID: fmt.Sprintf("%s-%d", g.ID, j), TenantID: "t1", Offering: "l40s.1x", GroupID: g.ID,
					Zone: fleet.MockZone, Market: cloud.MarketOnDemand, State: cloud.Running, CreatedAt: t0, UpdatedAt: t0}
				if err := tx.CreateInstance(ctx, in); err != nil {
					return err
				}
			}
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	c := &Groups{Store: st, Catalog: catalog.Default(), Now: clock.Now}
	report := func() {
		var ps []cloud.MetricPoint
		for _, id := range ids {
			for j := 0; j < 2; j++ {
				ps = append(ps, cloud.MetricPoint{TenantID: "t1", Name: cloud.MetricGPUUtilization,
					InstanceID: fmt.Sprintf("%s-%d", id, j), At: clock.Now(), Value: 0.55})
			}
		}
		if err := st.Tx(ctx, func(tx cloud.Tx) error { return tx.AppendMetrics(ctx, ps) }); err != nil {
			b.Fatal(err)
		}
	}
	// Two warm-up rounds: the members are seen running, then warm.
	for i := 0; i < 2; i++ {
		report()
		if err := c.Step(ctx); err != nil {
			b.Fatal(err)
		}
		clock.Advance(10 * time.Second)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		clock.Advance(10 * time.Second)
		report()
		b.StartTimer()
		if err := c.Step(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	var g *cloud.Group
	if err := st.Tx(ctx, func(tx cloud.Tx) (err error) { g, err = tx.GetGroup(ctx, ids[0]); return }); err != nil {
		b.Fatal(err)
	}
	if g.Desired != 2 {
		b.Fatalf("desired %d: the steady state moved (%+v)", g.Desired, g.Status)
	}
}
