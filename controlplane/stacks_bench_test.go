package controlplane

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/store/pgtest"
)

// BenchmarkStackApplyWallClock applies a stack of 50 h100.1x instances to
// a running server (its controller loop: the stack controller, then the
// scheduler, every 200 ms) over the API, and reports, per apply, the
// wall-clock milliseconds from the apply request to the stack's active
// state (active-ms) and to all 50 instances placed (placed-ms). The apply
// is bounded by the scheduler when the two are within one tick.
func BenchmarkStackApplyWallClock(b *testing.B) {
	b.Run("sqlite", func(b *testing.B) {
		benchStackWallClock(b, "sqlite://"+filepath.Join(b.TempDir(), "gpucloud.db"))
	})
	b.Run("postgres", func(b *testing.B) { benchStackWallClock(b, pgtest.URL(b)) })
}

const benchStack50 = `
resources:
  nodes:
    type: instance
    count: 50
    properties: {name: "node-${count.index}", offering: h100.1x, command: [train]}
`

func benchStackWallClock(b *testing.B, db string) {
	ctx := context.Background()
	st, err := OpenStore(ctx, db)
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	if err := st.Tx(ctx, func(tx cloud.Tx) error {
		for i := range 16 {
			h := fleet.MockNVLinkHost(fmt.Sprintf("host-%02d", i), "H100-80GB-SXM", 8)
			if err := tx.PutHost(ctx, &cloud.Host{ID: h.ID, State: fleet.Schedulable, Spec: *h, LastHeartbeat: now}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	st.Close()
	s, err := Start(ctx, Config{DB: db, Listen: "127.0.0.1:0", Log: quiet, HeartbeatTimeout: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close(ctx)
	admin := client.New(s.URL, s.AdminToken, s.HTTPClient())
	var active, placed time.Duration
	b.ResetTimer()
	for i := range b.N {
		name := fmt.Sprintf("bench-%d", i)
		start := time.Now()
		if _, err := admin.ApplyStack(ctx, name, api.ApplyStackRequest{Template: benchStack50}); err != nil {
			b.Fatal(err)
		}
		var ids []string
		for {
			v, err := admin.GetStack(ctx, "", name)
			if err != nil {
				b.Fatal(err)
			}
			if v.State == cloud.StackActive {
				active += time.Since(start)
				for _, r := range v.Resources {
					ids = append(ids, r.ID)
				}
				break
			}
			if v.State != cloud.StackApplying {
				b.Fatalf("stack %s: %s", v.State, v.Reason)
			}
			time.Sleep(5 * time.Millisecond)
		}
		for {
			l, err := admin.ListInstances(ctx, client.ListInstancesOptions{States: []cloud.State{cloud.Scheduled}, Limit: 1000})
			if err != nil {
				b.Fatal(err)
			}
			if len(l.Instances) >= 50 {
				placed += time.Since(start)
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		b.StopTimer()
		// Free the fleet for the next apply: the instances end as their
		// agents would report, then the stack goes.
		if err := s.Store.Tx(ctx, func(tx cloud.Tx) error {
			ins, err := tx.ListInstances(ctx, cloud.InstanceFilter{IDs: ids})
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
		if _, err := admin.DestroyStack(ctx, "", name); err != nil {
			b.Fatal(err)
		}
		for {
			if _, err := admin.GetStack(ctx, "", name); cloud.ErrorCode(err) == cloud.NotFound {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(active.Milliseconds())/float64(b.N), "active-ms")
	b.ReportMetric(float64(placed.Milliseconds())/float64(b.N), "placed-ms")
}
