package controller

import (
	"fmt"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/autoscale"
	"github.com/gpucloud/gpucloud/billing"
	"github.com/gpucloud/gpucloud/cloud"
)

// TestReplayIsTheController: one demand series, step by step, through
// the group controller's own path (the custom metric ingested as POST
// /v1/metrics stores it, the members as instances, planGroup, and the
// plan carried out on them: launches boot, releases get their notice,
// notices are withdrawn from locked members and enforced at the
// deadline) and through `gpucloud sim autoscale`'s replay: every named
// policy decides the same at every step, for the same reasons.
func TestReplayIsTheController(t *testing.T) {
	s := autoscale.Synthetic(autoscale.SyntheticConfig{Steps: 2 * 24 * 60, Seed: 4, Base: 60, BurstsPerWeek: 20})
	cfg := autoscale.Config{Boot: 4 * time.Minute, Protected: 1, LockFor: 15 * time.Minute,
		Limits: autoscale.Limits{Min: 1, Max: 40}}
	for _, name := range autoscale.Policies() {
		t.Run(name, func(t *testing.T) {
			var want []autoscale.Step
			_, err := autoscale.Replay(name, s, autoscale.ReplayOptions{Config: cfg, HistorySteps: 0,
				Steps: func(_ int, st autoscale.Step) { want = append(want, st) }})
			if err != nil {
				t.Fatal(err)
			}
			pols, err := autoscale.PolicySpec(name, cfg)
			if err != nil {
				t.Fatal(err)
			}
			g := autoscale.ReplayGroup(cfg, pols)
			g.TenantID, g.CreatedAt = "ten-1", s.Start
			c := &Groups{}
			var insts []*cloud.Instance
			ready := map[string]time.Time{}
			launched, actions, releases := 0, 0, 0
			for i := range s.GPUs {
				now := s.Time(i)
				got := autoscale.Step{Time: now, Demand: s.GPUs[i]}
				for n, in := range insts {
					if in.State == cloud.Pending && !now.Before(ready[in.ID]) {
						in.State, in.UpdatedAt = cloud.Running, now
					}
					in.ScaleIn = nil
					if n == 0 && in.Name == "replay-1" {
						in.ScaleIn = &cloud.ScaleIn{Protected: true}
					}
					if in.State == cloud.Running && now.Before(ready[in.ID].Add(cfg.LockFor)) {
						in.ScaleIn = &cloud.ScaleIn{Lock: &cloud.ScaleLock{Reason: "job", At: ready[in.ID]}}
					}
					switch {
					case in.Interruption != nil:
						got.Leaving++
					case in.State == cloud.Running:
						got.Ready++
					default:
						got.Booting++
					}
				}
				snap := &groupSnap{groups: []*cloud.Group{g}, members: map[string][]*cloud.Instance{g.ID: insts},
					prices: &billing.PriceBook{}}
				if i > 0 {
					snap.points = []cloud.MetricPoint{{TenantID: g.TenantID, Name: "demand_gpus", GroupID: g.ID,
						At: s.Time(i - 1), Value: s.GPUs[i-1]}}
				}
				c.ingest(snap)
				p, err := c.planGroup(g, snap, nil, now)
				if err != nil {
					t.Fatal(err)
				}
				got.Desired = g.Desired
				if sc := p.Scale; sc != nil {
					got.Desired, got.Launched, got.Released = sc.Desired, len(sc.Launch), len(sc.Release)
					got.Policy, got.Limit, got.Reason = sc.Decision.Policy, sc.Decision.Limit, sc.Decision.Reason
					g.Desired = sc.Desired
					for range sc.Launch {
						launched++
						in := &cloud.Instance{ID: fmt.Sprintf("i-%d", launched), Name: fmt.Sprintf("replay-%d", launched),
							GroupID: g.ID, Offering: "replay", Market: cloud.MarketOnDemand, State: cloud.Pending,
							CreatedAt: now, UpdatedAt: now}
						ready[in.ID] = now.Add(cfg.Boot)
						insts = append(insts, in)
					}
					for _, r := range sc.Release {
						for _, in := range insts {
							if in.ID == r.InstanceID {
								in.Interruption = &cloud.Interruption{Action: cloud.ActionTerminate, Reason: r.Reason,
									NoticedAt: now, Deadline: now.Add(sc.Notice)}
							}
						}
					}
					releases += len(sc.Release)
				}
				gone := map[string]bool{}
				for _, id := range p.Withdraw {
					for _, in := range insts {
						if in.ID == id {
							in.Interruption = nil
						}
					}
				}
				for _, id := range p.Due {
					gone[id] = true
				}
				kept := insts[:0:0]
				for _, in := range insts {
					if !gone[in.ID] {
						kept = append(kept, in)
					}
				}
				insts = kept
				w := want[i]
				if got.Launched+got.Released == 0 && got.Desired == w.Desired {
					// The controller writes no decision for a step that
					// changes nothing; compare what it did.
					w.Policy, w.Limit, w.Reason = "", "", ""
					got.Policy, got.Limit, got.Reason = "", "", ""
				}
				if got != w {
					t.Fatalf("step %d (%s): controller\n%+v\nreplay\n%+v", i, now.Format(time.RFC3339), got, w)
				}
				if got.Launched+got.Released > 0 {
					actions++
				}
			}
			if actions < 10 || releases == 0 {
				t.Fatalf("%d actions, %d releases: the series shows nothing", actions, releases)
			}
			t.Logf("%s: %d steps, %d actions, %d releases, all equal", name, len(s.GPUs), actions, releases)
		})
	}
}
