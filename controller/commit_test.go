package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
)

// hookStore runs before in the transaction that commits placements, just
// before the scheduler writes them, once.
type hookStore struct {
	cloud.Store
	before func(cloud.Tx) error
}

func (h *hookStore) Tx(ctx context.Context, fn func(cloud.Tx) error) error {
	return h.Store.Tx(ctx, func(tx cloud.Tx) error { return fn(&hookTx{Tx: tx, h: h}) })
}

type hookTx struct {
	cloud.Tx
	h *hookStore
}

func (t *hookTx) UpdateInstanceStates(ctx context.Context, ins []*cloud.Instance) ([]string, error) {
	if f := t.h.before; f != nil {
		t.h.before = nil
		if err := f(t.Tx); err != nil {
			return nil, err
		}
	}
	return t.Tx.UpdateInstanceStates(ctx, ins)
}

// events counts the events of a kind, and for state events only the moves
// into to (when to is not empty).
func events(t *testing.T, st cloud.Store, kind cloud.EventKind, to ...cloud.State) int {
	var evs []*cloud.Event
	tx(t, st, func(tx cloud.Tx) (err error) {
		evs, err = tx.ListEvents(context.Background(), cloud.EventFilter{})
		return
	})
	n := 0
	for _, e := range evs {
		if e.Kind == kind && (len(to) == 0 || e.To == to[0]) {
			n++
		}
	}
	return n
}

func hostVersion(t *testing.T, st cloud.Store, id string) int64 {
	var h *cloud.Host
	tx(t, st, func(tx cloud.Tx) (err error) { h, err = tx.GetHost(context.Background(), id); return })
	return h.Version
}

// TestSchedulerCommitsInBatches: placements are committed BatchSize at a
// time, each batch bumping the version of the host it lands on once, and
// the fleet matches what a restarted scheduler rebuilds from the store.
func TestSchedulerCommitsInBatches(t *testing.T) {
	st := newStore(t)
	seed(t, st)
	for i := 0; i < 8; i++ {
		create(t, st, fmt.Sprintf("g%d", i), "h100.1x", t0.Add(time.Duration(i)*time.Second))
	}
	s := newScheduler(st)
	s.BatchSize = 3
	if n, err := s.Step(context.Background()); err != nil || n != 8 {
		t.Fatalf("placed %d, err %v", n, err)
	}
	if v := hostVersion(t, st, "h100-a"); v != 4 {
		t.Errorf("h100-a has version %d after three batches, want 4", v)
	}
	if n := events(t, st, cloud.EventInstanceState, cloud.Scheduled); n != 8 {
		t.Errorf("%d scheduled events, want 8", n)
	}
	check := newScheduler(st)
	if err := check.Rebuild(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := check.Fleet().Check(); err != nil {
		t.Fatal(err)
	}
	if got, want := explainAll(check.Fleet().Allocations()), explainAll(s.Fleet().Allocations()); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("rebuilt allocations differ:\n%v\n%v", got, want)
	}
	// Nothing changed: the next step rebuilds nothing and places nothing.
	f := s.Fleet()
	if n, err := s.Step(context.Background()); err != nil || n != 0 || s.Fleet() != f {
		t.Fatalf("idle step: placed %d, err %v, rebuilt %v", n, err, s.Fleet() != f)
	}
}

// TestSchedulerDropsChangedInstance: an instance terminated while its
// batch is being committed is left out, its placement given back; the
// others of the batch are committed.
func TestSchedulerDropsChangedInstance(t *testing.T) {
	base := newStore(t)
	seed(t, base)
	for i := 0; i < 3; i++ {
		create(t, base, fmt.Sprintf("g%d", i), "h100.2x", t0.Add(time.Duration(i)*time.Second))
	}
	st := &hookStore{Store: base, before: func(tx cloud.Tx) error {
		in, err := tx.GetInstance(context.Background(), "g1")
		if err != nil {
			return err
		}
		in.State = cloud.Terminated
		return tx.UpdateInstance(context.Background(), in)
	}}
	s := newScheduler(st)
	if n, err := s.Step(context.Background()); err != nil || n != 2 {
		t.Fatalf("placed %d, err %v", n, err)
	}
	if in := get(t, base, "g1"); in.State != cloud.Terminated || in.Placement != nil {
		t.Fatalf("g1: %s %+v", in.State, in.Placement)
	}
	if s.Fleet().Allocation("g1") != nil || len(s.Fleet().Allocations()) != 2 {
		t.Fatalf("fleet holds %v", explainAll(s.Fleet().Allocations()))
	}
	if err := s.Fleet().Check(); err != nil {
		t.Fatal(err)
	}
}

// TestSchedulerHostChangeFailsBatch: a host that changed between the
// choice and the commit fails the whole batch, which is rolled back; the
// scheduler rebuilds its fleet and places everything on the next step.
func TestSchedulerHostChangeFailsBatch(t *testing.T) {
	base := newStore(t)
	seed(t, base)
	for i := 0; i < 3; i++ {
		create(t, base, fmt.Sprintf("g%d", i), "h100.1x", t0.Add(time.Duration(i)*time.Second))
	}
	st := &hookStore{Store: base, before: func(tx cloud.Tx) error {
		h, err := tx.GetHost(context.Background(), "h100-a")
		if err != nil {
			return err
		}
		h.Spec.Labels = map[string]string{"driver": "555.42"}
		return tx.PutHost(context.Background(), h)
	}}
	s := newScheduler(st)
	if n, err := s.Step(context.Background()); err != nil || n != 0 {
		t.Fatalf("placed %d, err %v", n, err)
	}
	if n := len(s.Fleet().Allocations()); n != 0 {
		t.Fatalf("the fleet kept %d placements of a failed batch", n)
	}
	if in := get(t, base, "g0"); in.State != cloud.Pending || hostVersion(t, base, "h100-a") != 1 {
		t.Fatalf("the failed batch left g0 %s, h100-a version %d", in.State, hostVersion(t, base, "h100-a"))
	}
	if n, err := s.Step(context.Background()); err != nil || n != 3 {
		t.Fatalf("second step: placed %d, err %v", n, err)
	}
	if err := s.Fleet().Check(); err != nil {
		t.Fatal(err)
	}
}

// TestSchedulerWaitsForCapacity: an instance that did not fit is not put
// to the engine again until capacity may have changed: a release or a new
// host.
func TestSchedulerWaitsForCapacity(t *testing.T) {
	st := newStore(t)
	seed(t, st)
	create(t, st, "big", "h100.8x", t0)
	create(t, st, "second", "h100.8x", t0.Add(time.Second))
	create(t, st, "third", "h100.8x", t0.Add(2*time.Second))
	s := newScheduler(st)
	if n, err := s.Step(context.Background()); err != nil || n != 1 {
		t.Fatalf("placed %d, err %v", n, err)
	}
	asked := s.steps
	for i := 0; i < 3; i++ {
		if n, err := s.Step(context.Background()); err != nil || n != 0 {
			t.Fatalf("placed %d, err %v", n, err)
		}
	}
	if s.steps != asked {
		t.Fatalf("the engine was asked %d more times with nothing changed", s.steps-asked)
	}
	// A new host: both are looked at again, and one fits.
	tx(t, st, func(tx cloud.Tx) error {
		h := fleet.MockNVLinkHost("h100-b", "H100-80GB-SXM", 8)
		return tx.PutHost(context.Background(), &cloud.Host{ID: h.ID, State: fleet.Schedulable, Spec: *h, LastHeartbeat: t0})
	})
	if n, err := s.Step(context.Background()); err != nil || n != 1 || s.steps != asked+2 {
		t.Fatalf("after a new host: placed %d (err %v), asked the engine %d times", n, err, s.steps-asked)
	}
	if in := get(t, st, "second"); in.State != cloud.Scheduled {
		t.Fatalf("second: %s %q", in.State, in.Reason)
	}
	// A release: the last one is looked at again and fits.
	tx(t, st, func(tx cloud.Tx) error {
		big, err := tx.GetInstance(context.Background(), "big")
		if err != nil {
			return err
		}
		big.State, big.HostID, big.Placement = cloud.Terminated, "", nil
		return tx.UpdateInstance(context.Background(), big)
	})
	if n, err := s.Step(context.Background()); err != nil || n != 1 {
		t.Fatalf("after a release: placed %d, err %v", n, err)
	}
}
