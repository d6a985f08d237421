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
