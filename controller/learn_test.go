package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/placement"
)

// TestSchedulerLearnsWorkload: the scheduler gives the placement policy the
// mix the fleet runs once it runs placement.DefaultLearnMin allocations,
// keeps it while the mix holds (the engine keeps its cached scores), and
// replaces it, no sooner than LearnEvery, once the mix moves.
func TestSchedulerLearnsWorkload(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	tx(t, st, func(tx cloud.Tx) error {
		if err := tx.CreateTenant(ctx, &cloud.Tenant{ID: "t1", Name: "acme", CreatedAt: t0}); err != nil {
			return err
		}
		for i := 0; i < 40; i++ {
			h := fleet.MockHost(fmt.Sprintf("l40s-%02d", i), "L40S", 2)
			if err := tx.PutHost(ctx, &cloud.Host{ID: h.ID, State: fleet.Schedulable, Spec: *h, LastHeartbeat: t0}); err != nil {
				return err
			}
		}
		return nil
	})
	now := t0
	s := newScheduler(st)
	s.Now = func() time.Time { return now }
	step := func() {
		t.Helper()
		if _, err := s.Step(ctx); err != nil {
			t.Fatal(err)
		}
	}
	halves := func() float64 {
		for _, ty := range s.Engine.Scorer().(*placement.GPUCloud).Workload().Types {
			if ty.Milli == 500 && ty.Models["L40S"] {
				return ty.Weight
			}
		}
		return 0
	}
	add := func(n int, offering string) {
		for i := 0; i < n; i++ {
			create(t, st, fmt.Sprintf("%s-%d-%d", offering, now.Unix(), i), offering, now)
		}
	}

	add(placement.DefaultLearnMin-1, "l40s.shared.0.5")
	step() // places them; the step learned from the empty fleet before
	now = now.Add(2 * DefaultLearnInterval)
	step()
	if n, times := s.Learned(); times != 0 || n != 0 {
		t.Fatalf("learned from %d allocations (%d times) below placement.DefaultLearnMin", n, times)
	}

	add(1, "l40s.shared.0.5")
	step()
	now = now.Add(2 * DefaultLearnInterval)
	step()
	if n, times := s.Learned(); times != 1 || n != placement.DefaultLearnMin {
		t.Fatalf("learned %d times from %d allocations, want once from %d", times, n, placement.DefaultLearnMin)
	}
	if w := halves(); w != 1 {
		t.Fatalf("the L40S half share weighs %v in the learned mix, want 1", w)
	}

	// The same mix, a minute later: kept.
	add(8, "l40s.shared.0.5")
	step()
	now = now.Add(2 * DefaultLearnInterval)
	step()
	if _, times := s.Learned(); times != 1 {
		t.Fatalf("an unchanged mix was learned again (%d times)", times)
	}

	// A quarter of the fleet's allocations become quarter shares: learned,
	// but not before LearnEvery has passed.
	add(14, "l40s.shared.0.25")
	step()
	now = now.Add(DefaultLearnInterval / 2)
	step()
	if _, times := s.Learned(); times != 1 {
		t.Fatalf("learned again %v after the last time (%d times)", DefaultLearnInterval/2, times)
	}
	now = now.Add(DefaultLearnInterval)
	step()
	if n, times := s.Learned(); times != 2 || n != placement.DefaultLearnMin+8+14 {
		t.Fatalf("learned %d times from %d allocations, want twice from %d", times, n, placement.DefaultLearnMin+8+14)
	}
	if w, want := halves(), float64(placement.DefaultLearnMin+8)/float64(placement.DefaultLearnMin+8+14); w < want-1e-9 || w > want+1e-9 {
		t.Fatalf("the L40S half share weighs %v, want %v", w, want)
	}
}

// TestSchedulerLearnsMIGMix: the MIG profile mix that slot choice keeps
// room for is learned from the MIG instances the fleet runs.
func TestSchedulerLearnsMIGMix(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	tx(t, st, func(tx cloud.Tx) error {
		if err := tx.CreateTenant(ctx, &cloud.Tenant{ID: "t1", Name: "acme", CreatedAt: t0}); err != nil {
			return err
		}
		h := fleet.MockNVLinkHost("h100-mig", "H100-80GB-SXM", 8)
		for i := range h.GPUs {
			h.GPUs[i].MIG = true
		}
		return tx.PutHost(ctx, &cloud.Host{ID: h.ID, State: fleet.Schedulable, Spec: *h, LastHeartbeat: t0})
	})
	now := t0
	s := newScheduler(st)
	s.Now = func() time.Time { return now }
	for i := 0; i < placement.DefaultLearnMin; i++ {
		create(t, st, fmt.Sprintf("m%d", i), "h100.mig.1g.10gb", now)
	}
	for i := 0; i < 2; i++ {
		if _, err := s.Step(ctx); err != nil {
			t.Fatal(err)
		}
		now = now.Add(2 * DefaultLearnInterval)
	}
	mix := s.Engine.MIGMix()
	if len(mix) != 1 {
		t.Fatalf("MIG mix %v, want the 1g.10gb profile alone", mix)
	}
	m, err := s.Catalog.Model("H100-80GB-SXM")
	if err != nil {
		t.Fatal(err)
	}
	for id, w := range mix {
		if p := m.ProfileByID(id); p == nil || p.Name != "1g.10gb" || w != 1 {
			t.Fatalf("MIG mix %v: profile %d is %+v", mix, id, p)
		}
	}
}
