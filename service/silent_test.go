package service_test

import (
	"context"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

// TestSilentHostRule: a host is silent when neither a heartbeat nor a
// heartbeat the server refused reached the server within the timeout; a
// refused heartbeat is recorded without writing anything but the time,
// and does not heal an unhealthy host.
func TestSilentHostRule(t *testing.T) {
	const timeout = 30 * time.Second
	// A step advances the clock (by wait), then does op: "beat" (an
	// accepted heartbeat), "refused" (one the rate limit refused), or
	// "mark" (the watcher's round, which must mark the host or not).
	type step struct {
		wait time.Duration
		op   string
		mark bool
	}
	for _, c := range []struct {
		name  string
		steps []step
		// state is the host's state at the end, last its LastHeartbeat
		// since the join.
		state fleet.HostState
		last  time.Duration
	}{
		{"silent past the timeout: marked", []step{{31 * time.Second, "mark", true}},
			fleet.Unhealthy, 0},
		{"silent exactly the timeout: not yet", []step{{timeout, "mark", false}},
			fleet.Schedulable, 0},
		{"an accepted heartbeat within the timeout", []step{{20 * time.Second, "beat", false}, {20 * time.Second, "mark", false}},
			fleet.Schedulable, 20 * time.Second},
		{"a refused heartbeat within the timeout is a sign of life", []step{{20 * time.Second, "refused", false}, {20 * time.Second, "mark", false}},
			fleet.Schedulable, 20 * time.Second},
		{"refused heartbeats only, for 50 s: never marked", []step{
			{10 * time.Second, "refused", false}, {10 * time.Second, "mark", false}, {10 * time.Second, "refused", false},
			{10 * time.Second, "refused", false}, {10 * time.Second, "refused", false}, {0, "mark", false}},
			fleet.Schedulable, 50 * time.Second},
		{"a refused heartbeat after the timeout but before the watcher's round", []step{
			{31 * time.Second, "refused", false}, {0, "mark", false}}, fleet.Schedulable, 31 * time.Second},
		{"the last sign of life too old: marked", []step{
			{10 * time.Second, "refused", false}, {31 * time.Second, "mark", true}}, fleet.Unhealthy, 10 * time.Second},
		{"a refused heartbeat does not heal an unhealthy host", []step{
			{31 * time.Second, "mark", true}, {5 * time.Second, "refused", false}, {0, "mark", false}}, fleet.Unhealthy, 0},
		{"an accepted one does", []step{
			{31 * time.Second, "mark", true}, {5 * time.Second, "refused", false}, {5 * time.Second, "beat", false}, {0, "mark", false}},
			fleet.Schedulable, 41 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
				f := newAHFixture(t, st)
				ctx := context.Background()
				join, jtID := f.joinActor("rack-1")
				if _, _, _, _, err := f.svc.Agents.Join(ctx, join, jtID, ahInventory("node-1", "H100", 2), nil, ""); err != nil {
					t.Fatal(err)
				}
				joined := f.clock.Now()
				agent := service.AgentActor("node-1")
				for i, s := range c.steps {
					f.clock.Advance(s.wait)
					switch s.op {
					case "beat":
						if err := f.svc.Agents.Heartbeat(ctx, agent, nil); err != nil {
							t.Fatal(err)
						}
					case "refused":
						before, v := f.state(), f.host("node-1").Version
						if err := f.svc.Agents.RefusedHeartbeat(ctx, agent); err != nil {
							t.Fatal(err)
						}
						f.unchanged(before, "a refused heartbeat")
						if h := f.host("node-1"); h.Version != v {
							t.Errorf("step %d: a refused heartbeat bumped the host's version %d -> %d", i, v, h.Version)
						}
					case "mark":
						marked, err := service.MarkSilentHosts(ctx, st, f.clock.Now(), timeout)
						if err != nil || (len(marked) == 1) != s.mark {
							t.Fatalf("step %d at +%v: marked %v, %v; want marked %v", i, f.clock.Now().Sub(joined), marked, err, s.mark)
						}
					}
				}
				if h := f.host("node-1"); h.State != c.state || !h.LastHeartbeat.Equal(joined.Add(c.last)) {
					t.Fatalf("host %s, last heartbeat +%v; want %s, +%v", h.State, h.LastHeartbeat.Sub(joined), c.state, c.last)
				}
			})
		})
	}
}

// TestRefusedHeartbeatRefuses: only an agent, for its own host, records a
// sign of life, and a missing host is not_found.
func TestRefusedHeartbeatRefuses(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newAHFixture(t, st)
		ctx := context.Background()
		before := f.state()
		for _, c := range []struct {
			name  string
			actor service.Actor
			code  cloud.Code
		}{
			{"a member", f.acme, cloud.PermissionDenied},
			{"an admin", f.admin, cloud.PermissionDenied},
			{"an agent without a host", service.Actor{ID: "u-x", Role: cloud.RoleAgent}, cloud.PermissionDenied},
			{"an agent of no host", service.AgentActor("node-9"), cloud.NotFound},
		} {
			if err := f.svc.Agents.RefusedHeartbeat(ctx, c.actor); cloud.ErrorCode(err) != c.code {
				t.Errorf("%s: %v, want %s", c.name, err, c.code)
			}
		}
		f.unchanged(before, "refused signs of life")
	})
}
