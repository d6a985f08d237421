package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/stackengine"
	"github.com/gpucloud/gpucloud/testkit"
)

// BenchmarkStackApply50 applies a stack of 50 instances (one cluster
// placement group, a volume on the first) to an empty fleet of 64 8-GPU
// hosts on 8 racks, and reports two times per apply: engine-ms, the stack
// engine's rounds until the stack is active (every create through the
// instance service), and sched-ms, the scheduler's steps until all 50 are
// placed. The apply is bounded by the scheduler when sched-ms is the
// larger. It then destroys the stack (not timed).
func BenchmarkStackApply50(b *testing.B) {
	for _, be := range testkit.Backends() {
		b.Run("store="+be.Name, func(b *testing.B) { benchStackApply(b, be.Open(b)) })
	}
}

const stackBench50 = `
resources:
  pg: {type: placement_group, properties: {name: bench, strategy: spread}}
  data: {type: volume, properties: {name: data, size_gib: 10}}
  first:
    type: instance
    properties: {offering: h100.1x, placement_group: "${pg.id}", volumes: ["${data.id}"], command: [train]}
  nodes:
    type: instance
    count: 49
    properties: {name: "node-${count.index}", offering: h100.1x, placement_group: "${pg.id}", command: [train]}
`

func benchStackApply(b *testing.B, st cloud.Store) {
	ctx := context.Background()
	if err := st.Tx(ctx, func(tx cloud.Tx) error {
		if err := tx.CreateTenant(ctx, &cloud.Tenant{ID: "t1", Name: "acme", CreatedAt: t0}); err != nil {
			return err
		}
		if err := tx.PutQuota(ctx, &cloud.Quota{TenantID: "t1", Instances: 1000}); err != nil {
			return err
		}
		for i := range 64 {
			h := fleet.MockNVLinkHost(fmt.Sprintf("h%02d", i), "H100-80GB-SXM", 8)
			h.Rack = fmt.Sprintf("rack-%d", i%8)
			if err := tx.PutHost(ctx, &cloud.Host{ID: h.ID, State: fleet.Schedulable, Spec: *h, LastHeartbeat: t0}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	svc := service.New(st, nil, service.Options{})
	actor := service.Actor{ID: "u1", TenantID: "t1", Role: cloud.RoleMember}
	sched := NewScheduler(st, nil)
	var engine, placing time.Duration
	b.ResetTimer()
	for i := range b.N {
		name := fmt.Sprintf("bench-%d", i)
		if _, err := svc.Stacks.Apply(ctx, actor, name, api.ApplyStackRequest{Template: stackBench50}); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		for {
			if _, err := stackengine.New(svc).Step(ctx); err != nil {
				b.Fatal(err)
			}
			v, err := svc.Stacks.Get(ctx, actor, "", name)
			if err != nil {
				b.Fatal(err)
			}
			if v.State == cloud.StackActive {
				break
			}
			if v.State != cloud.StackApplying {
				b.Fatalf("stack %s: %s", v.State, v.Reason)
			}
		}
		engine += time.Since(start)
		start = time.Now()
		for placed := 0; placed < 50; {
			n, err := sched.Step(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if n == 0 {
				b.Fatalf("the scheduler placed %d of 50", placed)
			}
			placed += n
		}
		placing += time.Since(start)
		b.StopTimer()
		// No agent runs here: end the instances as their agents would,
		// so that the destroy terminates them at once and the fleet is
		// free for the next round.
		if err := st.Tx(ctx, func(tx cloud.Tx) error {
			ins, err := tx.ListInstances(ctx, cloud.InstanceFilter{TenantID: "t1", States: cloud.HoldingStates()})
			if err != nil {
				return err
			}
			for _, in := range ins {
				in.State, in.HostID, in.Placement = cloud.Stopped, "", nil
			}
			_, err = tx.UpdateInstances(ctx, ins)
			return err
		}); err != nil {
			b.Fatal(err)
		}
		if _, err := svc.Stacks.Destroy(ctx, actor, "", name); err != nil {
			b.Fatal(err)
		}
		for round := 0; ; round++ {
			if _, err := stackengine.New(svc).Step(ctx); err != nil {
				b.Fatal(err)
			}
			v, err := svc.Stacks.Get(ctx, actor, "", name)
			if cloud.ErrorCode(err) == cloud.NotFound {
				break
			}
			if round > 20 {
				b.Fatalf("destroy: %s %q", v.State, v.Reason)
			}
		}
		if _, err := sched.Step(ctx); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(engine.Microseconds())/1000/float64(b.N), "engine-ms")
	b.ReportMetric(float64(placing.Microseconds())/1000/float64(b.N), "sched-ms")
}
