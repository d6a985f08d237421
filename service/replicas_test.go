package service_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

// TestReplicaRegistry (both stores): replicas see each other and each
// other's hosts through their heartbeats; a replica that stops writing is
// left out once its record is older than the TTL, and its row deleted by
// the next heartbeat; its hosts go with it; a bad record is refused and
// writes nothing.
func TestReplicaRegistry(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		ctx := context.Background()
		clock := testkit.NewClock(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))
		svc := service.New(st, nil, service.Options{Now: clock.Now})
		ttl := 10 * time.Second
		beat := func(id string, hosts ...string) []*cloud.Replica {
			t.Helper()
			r := cloud.Replica{ID: id, Address: id + ":7878", Load: "{}"}
			for _, h := range hosts {
				r.Hosts = append(r.Hosts, cloud.ReplicaHost{HostID: h, Since: clock.Now()})
			}
			live, err := svc.Replicas.Heartbeat(ctx, r, ttl)
			if err != nil {
				t.Fatal(err)
			}
			return live
		}
		ids := func(rs []*cloud.Replica) (out []string) {
			for _, r := range rs {
				out = append(out, r.ID)
				for _, h := range r.Hosts {
					out = append(out, " "+h.HostID)
				}
			}
			return out
		}
		eq := func(step string, got []*cloud.Replica, want ...string) {
			t.Helper()
			if g := ids(got); len(g) != len(want) || func() bool {
				for i := range g {
					if g[i] != want[i] {
						return true
					}
				}
				return false
			}() {
				t.Fatalf("%s: %q, want %q", step, g, want)
			}
		}
		eq("A alone", beat("A", "h-1"), "A", " h-1")
		clock.Advance(2 * time.Second)
		eq("B sees A", beat("B", "h-2", "h-3"), "A", " h-1", "B", " h-2", " h-3")
		// A keeps beating, B stops (it died).
		for range 4 {
			clock.Advance(2 * time.Second)
			beat("A", "h-1", "h-3")
		}
		clock.Advance(2 * time.Second)
		// B's record is 10 s old: still live at the cut.
		eq("B at its TTL", beat("A", "h-1", "h-3"), "A", " h-1", " h-3", "B", " h-2", " h-3")
		clock.Advance(time.Second)
		eq("B forgotten", beat("A", "h-1", "h-3"), "A", " h-1", " h-3")
		var rows []*cloud.Replica
		if err := st.Tx(ctx, func(tx cloud.Tx) (err error) { rows, err = tx.ListReplicas(ctx, time.Time{}); return err }); err != nil {
			t.Fatal(err)
		}
		eq("B's row deleted", rows, "A", " h-1", " h-3")
		// B comes back.
		eq("B again", beat("B"), "A", " h-1", " h-3", "B")

		for _, c := range []struct {
			name  string
			r     cloud.Replica
			field string
		}{
			{"no id", cloud.Replica{Address: "x:1"}, "id"},
			{"no address", cloud.Replica{ID: "C"}, "address"},
		} {
			_, err := svc.Replicas.Heartbeat(ctx, c.r, ttl)
			var ce *cloud.Error
			if !errors.As(err, &ce) || ce.Code != cloud.Invalid || ce.Details["field"] != c.field {
				t.Errorf("%s: %v, want invalid_argument on %s", c.name, err, c.field)
			}
		}
		eq("nothing written", beat("B"), "A", " h-1", " h-3", "B")

		// A second server under A's name, at another address: refused
		// while A's record is live, and A's record stands.
		imposter := cloud.Replica{ID: "A", Address: "elsewhere:7879", Load: "{}"}
		_, err := svc.Replicas.Heartbeat(ctx, imposter, ttl)
		var ce *cloud.Error
		if !errors.As(err, &ce) || ce.Code != cloud.Conflict || ce.Details["address"] != "A:7878" {
			t.Fatalf("a second replica named A: %v, want conflict naming A's address", err)
		}
		eq("A's record stands", beat("B"), "A", " h-1", " h-3", "B")
		// A restarting at its own address takes its record back at once.
		eq("A restarted", beat("A", "h-1"), "A", " h-1", "B")
		// Once A's record is past the TTL, the name is free for another
		// address (a replica that moved).
		clock.Advance(11 * time.Second)
		if live, err := svc.Replicas.Heartbeat(ctx, imposter, ttl); err != nil || len(live) != 1 || live[0].Address != "elsewhere:7879" {
			t.Fatalf("A at its new address after the TTL: %v, %v", ids(live), err)
		}
	})
}
