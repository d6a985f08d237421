package controller

import (
	"context"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/service"
)

func TestMarkSilentHosts(t *testing.T) {
	st := newStore(t)
	seed(t, st)
	create(t, st, "a", "h100.1x", t0)
	s := newScheduler(st)
	if n, err := s.Step(context.Background()); err != nil || n != 1 {
		t.Fatalf("placed %d, %v", n, err)
	}
	// The L40S host heartbeats later; the H100 host stays silent.
	tx(t, st, func(tx cloud.Tx) error {
		h, err := tx.GetHost(context.Background(), "l40s-a")
		if err != nil {
			return err
		}
		h.LastHeartbeat = t0.Add(50 * time.Second)
		return tx.PutHost(context.Background(), h)
	})
	marked, err := service.MarkSilentHosts(context.Background(), st, t0.Add(60*time.Second), 30*time.Second)
	if err != nil || len(marked) != 1 || marked[0] != "h100-a" {
		t.Fatalf("marked %v, %v", marked, err)
	}
	in := get(t, st, "a")
	if in.State != cloud.Lost || in.Placement != nil {
		t.Fatalf("instance after host loss: %+v", in)
	}
	var h *cloud.Host
	tx(t, st, func(tx cloud.Tx) (err error) { h, err = tx.GetHost(context.Background(), "h100-a"); return })
	if h.State != fleet.Unhealthy {
		t.Fatalf("host state %s", h.State)
	}
	// Marking again changes nothing; the scheduler rebuilds and frees the GPU.
	if marked, _ := service.MarkSilentHosts(context.Background(), st, t0.Add(70*time.Second), 30*time.Second); len(marked) != 0 {
		t.Fatalf("marked again: %v", marked)
	}
	if _, err := s.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(s.Fleet().Allocations()); n != 0 {
		t.Fatalf("%d allocations left after the host was lost", n)
	}
}

// TestHeartbeatWatcherAfterDowntime: a watcher that starts (or resumes
// after a gap of more than two intervals: the server was down, or another
// replica led) long after the hosts' last heartbeats gives them one
// timeout to reach it before marking them, and a host that heartbeats
// meanwhile is never marked; while it runs without a gap, silence counts
// from the last heartbeat as before.
func TestHeartbeatWatcherAfterDowntime(t *testing.T) {
	st := newStore(t)
	seed(t, st)
	now := t0.Add(time.Hour) // every host last heartbeated at t0
	w := &HeartbeatWatcher{Store: st, Now: func() time.Time { return now }, Timeout: 30 * time.Second}
	beat := func(id string) {
		tx(t, st, func(tx cloud.Tx) error {
			h, err := tx.GetHost(context.Background(), id)
			if err != nil {
				return err
			}
			h.LastHeartbeat = now
			return tx.PutHost(context.Background(), h)
		})
	}
	state := func(id string) fleet.HostState {
		var h *cloud.Host
		tx(t, st, func(tx cloud.Tx) (err error) { h, err = tx.GetHost(context.Background(), id); return })
		return h.State
	}
	step := func(d time.Duration) {
		t.Helper()
		now = now.Add(d)
		if err := w.Reconcile(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	step(0)
	if state("h100-a") == fleet.Unhealthy || state("l40s-a") == fleet.Unhealthy {
		t.Fatal("a host was marked at the watcher's first reconcile, before any agent could reach it")
	}
	for range 3 {
		step(7 * time.Second)
	}
	beat("l40s-a") // 21 s after the watcher began
	step(7 * time.Second)
	step(7 * time.Second) // 35 s
	if state("h100-a") != fleet.Unhealthy || state("l40s-a") == fleet.Unhealthy {
		t.Fatalf("after one timeout of watching: h100-a %s (want unhealthy), l40s-a %s", state("h100-a"), state("l40s-a"))
	}
	// Running on without a gap: the L40S host's silence counts from its
	// heartbeat, 21 s after the watcher began.
	for range 4 {
		step(7 * time.Second)
	}
	if state("l40s-a") != fleet.Unhealthy {
		t.Fatalf("l40s-a silent for 42 s of a run without a gap: %s", state("l40s-a"))
	}
	// A gap (the replica stopped leading for a minute): the run begins
	// again, and the host that heartbeats now is not marked by it.
	beat("h100-a")
	tx(t, st, func(tx cloud.Tx) error {
		h, err := tx.GetHost(context.Background(), "h100-a")
		if err != nil {
			return err
		}
		h.State = fleet.Schedulable
		return tx.PutHost(context.Background(), h)
	})
	step(time.Minute)
	if state("h100-a") == fleet.Unhealthy {
		t.Fatal("h100-a marked at the first reconcile after a gap")
	}
}
