package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/autoscale"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/service"
)

// TestLiveGroupFollowsTheReplay: a demand series fed minute by minute, on
// a simulated clock, to a group that lives in the store: each minute's
// demand published through the service POST /v1/metrics calls, the
// leader's round run as the leader runs it (market, groups, scheduler),
// the group's launches placed on hosts and run once the replay's boot
// time has passed, its notices carried out by the group controller at
// their deadline. At every step the group decides what `gpucloud sim
// autoscale`'s replay decides (desired capacity, launches, releases, the
// policy and its reason) and holds the members the replay holds (ready,
// booting, leaving), for every named policy.
func TestLiveGroupFollowsTheReplay(t *testing.T) {
	cfg := autoscale.Config{UnitGPUs: 1, Boot: 3 * time.Minute, Notice: 2 * time.Minute,
		Limits: autoscale.Limits{Min: 1, Max: 8}}
	// A day and two hours: the predictive policy acts once it has a
	// day of history.
	steps := 26 * 60
	for _, name := range autoscale.Policies() {
		t.Run(name, func(t *testing.T) {
			b := newGroupBed(t)
			// Three more 2-GPU hosts: room for Max members of one GPU.
			tx(t, b.st, func(tx cloud.Tx) error {
				for _, id := range []string{"l40s-b", "l40s-c", "l40s-d"} {
					h := fleet.MockHost(id, "L40S", 2)
					if err := tx.PutHost(context.Background(), &cloud.Host{ID: h.ID, State: fleet.Schedulable, Spec: *h, LastHeartbeat: b.clock.Now()}); err != nil {
						return err
					}
				}
				return nil
			})
			start := b.clock.Now().Truncate(time.Minute).Add(time.Minute)
			s := autoscale.Synthetic(autoscale.SyntheticConfig{Start: start, Steps: steps, Seed: 11, Base: 3, BurstsPerWeek: 150})
			var want []autoscale.Step
			if _, err := autoscale.Replay(name, s, autoscale.ReplayOptions{Config: cfg, HistorySteps: 0,
				Steps: func(_ int, st autoscale.Step) { want = append(want, st) }}); err != nil {
				t.Fatal(err)
			}
			pols, err := autoscale.PolicySpec(name, cfg)
			if err != nil {
				t.Fatal(err)
			}
			g := autoscale.ReplayGroup(cfg, pols)
			g.ID, g.Name = "", "live"
			g.Template = cloud.GroupTemplate{Offerings: []string{"l40s.1x"}, Zones: []string{fleet.MockZone}, Command: []string{"train"}}
			b.clock.Set(start)
			g = b.create(g)
			svc := service.New(b.st, catalog.Default(), service.Options{Now: b.clock.Now})
			tenant := service.Actor{ID: "u-1", TenantID: "t1", Role: cloud.RoleMember}
			ctx := context.Background()
			metric := strings.TrimPrefix(autoscale.DemandMetric, cloud.CustomMetricPrefix)
			actions, releases, decided, prev := 0, 0, 0, g.Desired
			for i := range s.GPUs {
				now := s.Time(i)
				b.clock.Set(now)
				got := autoscale.Step{Time: now, Demand: s.GPUs[i]}
				for _, in := range b.members(g.ID) {
					if (in.State == cloud.Scheduled || in.State == cloud.Starting) && !now.Before(in.CreatedAt.Add(cfg.Boot)) {
						b.move(in.ID, cloud.Running)
						in = b.get(in.ID)
					}
					switch {
					case in.Interruption != nil && in.Interruption.Action != "":
						got.Leaving++
					case in.State == cloud.Running:
						got.Ready++
					default:
						got.Booting++
					}
				}
				if i > 0 {
					at := s.Time(i - 1)
					if err := svc.Groups.PutMetrics(ctx, tenant, g.ID, []api.MetricPoint{{Name: metric, At: &at, Value: s.GPUs[i-1]}}); err != nil {
						t.Fatal(err)
					}
				}
				b.round()
				after := b.group(g.ID)
				got.Desired = after.Desired
				for _, in := range b.members(g.ID) {
					if in.CreatedAt.Equal(now) {
						got.Launched++
					}
					if it := in.Interruption; it != nil && it.Action != "" && it.NoticedAt.Equal(now) {
						got.Released++
					}
					if in.State == cloud.Terminating {
						// The host's agent stops what the controller
						// terminated at the notice's end.
						b.move(in.ID, cloud.Terminated)
					}
				}
				if n := len(after.Status.Decisions); n > 0 && after.Status.Decisions[n-1].Time.Equal(now) {
					d := after.Status.Decisions[n-1]
					got.Policy, got.Limit, got.Reason = d.Policy, d.Limit, d.Reason
					decided++
				}
				w := want[i]
				if w.Desired == prev {
					// The group records a decision that changes its
					// desired capacity; the others leave no trace.
					w.Policy, w.Limit, w.Reason = "", "", ""
				}
				prev = w.Desired
				if got != w {
					t.Fatalf("step %d (%s): the live group\n%+v\nthe replay\n%+v", i, now.Format(time.RFC3339), got, w)
				}
				if got.Launched+got.Released > 0 {
					actions++
				}
				releases += got.Released
			}
			if actions < 5 || releases == 0 {
				t.Fatalf("%d actions, %d releases: the series shows nothing", actions, releases)
			}
			t.Logf("%s: %d steps, %d actions (%d decisions recorded), %d releases, all equal", name, len(s.GPUs), actions, decided, releases)
		})
	}
}
