package service_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

// schedFixture is a store with a tenant, two hosts and a spot request that
// stops its instances on reclaim, for ApplySchedule's tests.
type schedFixture struct {
	t   *testing.T
	st  cloud.Store
	now time.Time
}

const schedTenant = "tn-s"

func newSchedFixture(t *testing.T, st cloud.Store) *schedFixture {
	f := &schedFixture{t: t, st: st, now: testkit.Epoch}
	f.tx(func(ctx context.Context, tx cloud.Tx) error {
		if err := tx.CreateTenant(ctx, &cloud.Tenant{ID: schedTenant, Name: "s", CreatedAt: f.now}); err != nil {
			return err
		}
		for _, id := range []string{"h-1", "h-2"} {
			if err := tx.PutHost(ctx, &cloud.Host{ID: id, State: fleet.Schedulable, LastHeartbeat: f.now,
				Spec: fleet.Host{ID: id, Zone: "zone-a", CPUMilli: 64000, MemoryMiB: 512 << 10}}); err != nil {
				return err
			}
		}
		return tx.CreateSpotRequest(ctx, &cloud.SpotRequest{ID: "sr-stop", TenantID: schedTenant, Type: cloud.SpotPersistent,
			Interruption: cloud.ActionStop, Pools: []cloud.Pool{{Offering: "l4.1x"}}, State: cloud.SpotActive,
			CreatedAt: f.now, UpdatedAt: f.now})
	})
	return f
}

func (f *schedFixture) tx(fn func(context.Context, cloud.Tx) error) {
	f.t.Helper()
	ctx := context.Background()
	if err := f.st.Tx(ctx, func(tx cloud.Tx) error { return fn(ctx, tx) }); err != nil {
		f.t.Fatal(err)
	}
}

// create stores in and returns it as read back.
func (f *schedFixture) create(in *cloud.Instance) *cloud.Instance {
	f.t.Helper()
	in.TenantID, in.CreatedAt, in.UpdatedAt = schedTenant, f.now, f.now
	if in.Offering == "" {
		in.Offering = "l4.1x"
	}
	if in.Market == "" {
		in.Market = cloud.MarketOnDemand
	}
	if in.State.Holds() {
		in.HostID, in.Zone = "h-1", "zone-a"
		in.Placement = &fleet.Placement{ID: in.ID, HostID: "h-1", CPUMilli: 1000, MemoryMiB: 1024, Preemptible: in.Market == cloud.MarketSpot}
	}
	f.tx(func(ctx context.Context, tx cloud.Tx) error { return tx.CreateInstance(ctx, in) })
	return f.get(in.ID)
}

func (f *schedFixture) pending(id string) *cloud.Instance {
	return f.create(&cloud.Instance{ID: id, State: cloud.Pending})
}

// spot stores a running spot instance of request sr (none when empty),
// under notice it when not nil.
func (f *schedFixture) spot(id, sr string, it *cloud.Interruption) *cloud.Instance {
	return f.create(&cloud.Instance{ID: id, State: cloud.Running, Market: cloud.MarketSpot, SpotRequestID: sr, Interruption: it})
}

// change makes a change to an instance behind the plan's back.
func (f *schedFixture) change(id string) {
	f.tx(func(ctx context.Context, tx cloud.Tx) error {
		in, err := tx.GetInstance(ctx, id)
		if err != nil {
			return err
		}
		in.Name = "renamed"
		return tx.UpdateInstance(ctx, in)
	})
}

func (f *schedFixture) get(id string) *cloud.Instance {
	f.t.Helper()
	var in *cloud.Instance
	f.tx(func(ctx context.Context, tx cloud.Tx) (err error) { in, err = tx.GetInstance(ctx, id); return })
	return in
}

func (f *schedFixture) hostVersion(id string) int64 {
	f.t.Helper()
	var h *cloud.Host
	f.tx(func(ctx context.Context, tx cloud.Tx) (err error) { h, err = tx.GetHost(ctx, id); return })
	return h.Version
}

// events lists the reasons of the events of kind, of instance id when
// not empty.
func (f *schedFixture) events(kind cloud.EventKind, id string) []string {
	f.t.Helper()
	var evs []*cloud.Event
	f.tx(func(ctx context.Context, tx cloud.Tx) (err error) {
		evs, err = tx.ListEvents(ctx, cloud.EventFilter{InstanceID: id, Kinds: []cloud.EventKind{kind}})
		return
	})
	var out []string
	for _, e := range evs {
		out = append(out, e.Reason)
	}
	return out
}

func (f *schedFixture) placement(in *cloud.Instance, host string) service.PlannedPlacement {
	return service.PlannedPlacement{Instance: in, Placement: &fleet.Placement{ID: in.ID, HostID: host, CPUMilli: 1000, MemoryMiB: 1024},
		Zone: "zone-a", HostVersion: f.hostVersion(host)}
}

// TestApplySchedule applies plans and checks what was written: every
// decision is re-checked (an instance changed since read is left out, a
// changed host fails every placement but nothing else), and each write
// comes with its event.
func TestApplySchedule(t *testing.T) {
	for _, c := range []struct {
		name  string
		plan  func(f *schedFixture) *service.SchedulePlan
		check func(t *testing.T, f *schedFixture, res *service.ScheduleResult)
	}{{
		name: "placements, one of them stale",
		plan: func(f *schedFixture) *service.SchedulePlan {
			p := &service.SchedulePlan{}
			for _, id := range []string{"p1", "p2", "p3"} {
				p.Placements = append(p.Placements, f.placement(f.pending(id), "h-1"))
			}
			p.Placements = append(p.Placements, f.placement(f.pending("p4"), "h-2"))
			f.change("p2")
			f.change("p4")
			return p
		},
		check: func(t *testing.T, f *schedFixture, res *service.ScheduleResult) {
			if res.Placed != 2 || !res.Stale["p2"] || !res.Stale["p4"] || len(res.Stale) != 2 || res.HostChanged != nil {
				t.Fatalf("result %+v", res)
			}
			for _, id := range []string{"p1", "p3"} {
				if in := f.get(id); in.State != cloud.Scheduled || in.HostID != "h-1" || in.Zone != "zone-a" || in.Placement == nil {
					t.Errorf("%s: %s on %q in %q", id, in.State, in.HostID, in.Zone)
				}
				if evs := f.events(cloud.EventInstanceState, id); len(evs) != 1 || !strings.HasPrefix(evs[0], "placed on h-1") {
					t.Errorf("%s: events %q", id, evs)
				}
			}
			for _, id := range []string{"p2", "p4"} {
				if in := f.get(id); in.State != cloud.Pending || in.Placement != nil || len(f.events(cloud.EventInstanceState, id)) != 0 {
					t.Errorf("stale %s was written: %s", id, in.State)
				}
			}
			// The host of the placements written is bumped once, the host
			// of the stale one not at all.
			if v := f.hostVersion("h-1"); v != 2 || res.Hosts["h-1"] != 2 || len(res.Hosts) != 1 || f.hostVersion("h-2") != 1 {
				t.Errorf("hosts at %d, %d; result %v", v, f.hostVersion("h-2"), res.Hosts)
			}
		},
	}, {
		name: "a changed host fails every placement, and nothing else",
		plan: func(f *schedFixture) *service.SchedulePlan {
			p := &service.SchedulePlan{Placements: []service.PlannedPlacement{f.placement(f.pending("p1"), "h-1"), f.placement(f.pending("p2"), "h-2")}}
			p.Failures = []service.PlannedFailure{{Instance: f.pending("f1"), Reason: "never"}}
			p.Waits = []service.PlannedWait{{Instance: f.pending("w1"), Reason: "no room"}}
			f.spot("s1", "", nil)
			p.Notices = []service.ReclaimNotice{{InstanceID: "s1", For: "w1", Why: "capacity needed by w1", Notice: time.Minute}}
			f.tx(func(ctx context.Context, tx cloud.Tx) error {
				h, err := tx.GetHost(ctx, "h-2")
				if err != nil {
					return err
				}
				h.Spec.Labels = map[string]string{"driver": "555"}
				return tx.PutHost(ctx, h)
			})
			return p
		},
		check: func(t *testing.T, f *schedFixture, res *service.ScheduleResult) {
			if cloud.ErrorCode(res.HostChanged) != cloud.Conflict || res.Placed != 0 || len(res.Hosts) != 0 {
				t.Fatalf("result %+v", res)
			}
			for _, id := range []string{"p1", "p2"} {
				if in := f.get(id); in.State != cloud.Pending || len(f.events(cloud.EventInstanceState, id)) != 0 {
					t.Errorf("%s: %s after a host race", id, in.State)
				}
			}
			if v1, v2 := f.hostVersion("h-1"), f.hostVersion("h-2"); v1 != 1 || v2 != 2 {
				t.Errorf("host versions %d, %d: the failed placements bumped a host", v1, v2)
			}
			if in := f.get("f1"); in.State != cloud.Failed || res.Failed != 1 {
				t.Errorf("f1: %s, %d failed", in.State, res.Failed)
			}
			if in := f.get("w1"); in.Reason != "no room" || res.Waiting["w1"] != in.Version {
				t.Errorf("w1: reason %q version %d, waiting %v", in.Reason, in.Version, res.Waiting)
			}
			if in := f.get("s1"); in.Interruption == nil || res.Noticed != 1 {
				t.Errorf("s1: %+v, %d noticed", in.Interruption, res.Noticed)
			}
		},
	}, {
		name: "failures and waits, and their stale ones",
		plan: func(f *schedFixture) *service.SchedulePlan {
			p := &service.SchedulePlan{
				Failures: []service.PlannedFailure{{Instance: f.pending("f1"), Reason: `offering "x" no longer exists`},
					{Instance: f.pending("f2"), Reason: "never"}},
				Waits: []service.PlannedWait{{Instance: f.pending("w1"), Reason: "0/2 hosts available"},
					{Instance: f.pending("w2"), Reason: "later"}},
			}
			f.change("f2")
			f.change("w2")
			return p
		},
		check: func(t *testing.T, f *schedFixture, res *service.ScheduleResult) {
			if res.Failed != 1 || !res.Stale["f2"] || !res.Stale["w2"] || len(res.Stale) != 2 {
				t.Fatalf("result %+v", res)
			}
			if in := f.get("f1"); in.State != cloud.Failed || in.Reason != `offering "x" no longer exists` {
				t.Errorf("f1: %s %q", in.State, in.Reason)
			}
			if evs := f.events(cloud.EventInstanceState, "f1"); fmt.Sprint(evs) != `[offering "x" no longer exists]` {
				t.Errorf("f1 events %q", evs)
			}
			if in := f.get("f2"); in.State != cloud.Pending {
				t.Errorf("stale f2 failed")
			}
			w1 := f.get("w1")
			if w1.State != cloud.Pending || w1.Reason != "0/2 hosts available" || res.Waiting["w1"] != w1.Version || len(res.Waiting) != 1 {
				t.Errorf("w1: %s %q version %d, waiting %v", w1.State, w1.Reason, w1.Version, res.Waiting)
			}
			if evs := f.events(cloud.EventInstanceUnschedulable, "w1"); fmt.Sprint(evs) != "[0/2 hosts available]" {
				t.Errorf("w1 events %q", evs)
			}
			if in := f.get("w2"); in.Reason != "" || len(f.events(cloud.EventInstanceUnschedulable, "w2")) != 0 {
				t.Errorf("stale w2 got reason %q", in.Reason)
			}
		},
	}, {
		name: "reclaim notices go to spot instances not yet under notice",
		plan: func(f *schedFixture) *service.SchedulePlan {
			f.spot("s-stop", "sr-stop", nil)
			f.spot("s-gone", "sr-missing", nil)
			f.spot("s-noticed", "", &cloud.Interruption{Action: cloud.ActionTerminate, Reason: cloud.ReclaimPrice, Deadline: f.now.Add(time.Hour)})
			f.create(&cloud.Instance{ID: "od", State: cloud.Running})
			notice := func(id, forID, why string) service.ReclaimNotice {
				return service.ReclaimNotice{InstanceID: id, For: forID, Why: why, Notice: 45 * time.Second}
			}
			return &service.SchedulePlan{Notices: []service.ReclaimNotice{notice("s-stop", "p9", "capacity needed by p9"),
				notice("s-gone", "placeholder/c1/0", "reserved capacity needed"), notice("s-noticed", "p9", "capacity needed by p9"),
				notice("od", "p9", "capacity needed by p9"), notice("missing", "p9", "capacity needed by p9")}}
		},
		check: func(t *testing.T, f *schedFixture, res *service.ScheduleResult) {
			if res.Noticed != 2 {
				t.Fatalf("%d noticed, want 2", res.Noticed)
			}
			for id, want := range map[string]string{"s-stop": "spot stop in 45s: capacity needed by p9",
				"s-gone": "spot terminate in 45s: reserved capacity needed"} {
				in := f.get(id)
				it := in.Interruption
				if it == nil || it.Reason != cloud.ReclaimCapacity || !it.Deadline.Equal(f.now.Add(45*time.Second)) || in.State != cloud.Running {
					t.Errorf("%s: %+v", id, it)
				}
				if evs := f.events(cloud.EventSpotInterruption, id); fmt.Sprint(evs) != "["+want+"]" {
					t.Errorf("%s events %q, want %q", id, evs, want)
				}
			}
			if it := f.get("s-noticed").Interruption; it.Reason != cloud.ReclaimPrice || len(f.events(cloud.EventSpotInterruption, "s-noticed")) != 0 {
				t.Errorf("an instance under notice was noticed again: %+v", it)
			}
			if it := f.get("od").Interruption; it != nil {
				t.Errorf("an on-demand instance was noticed: %+v", it)
			}
		},
	}, {
		name: "deadlines passed stop or terminate, others wait",
		plan: func(f *schedFixture) *service.SchedulePlan {
			notice := func(action, reason string, deadline time.Time) *cloud.Interruption {
				return &cloud.Interruption{Action: action, Reason: reason, Deadline: deadline}
			}
			f.spot("d-term", "", notice(cloud.ActionTerminate, cloud.ReclaimCapacity, f.now))
			f.spot("d-stop", "sr-stop", notice(cloud.ActionStop, cloud.ReclaimPrice, f.now.Add(-time.Minute)))
			f.spot("d-later", "", notice(cloud.ActionTerminate, cloud.ReclaimCapacity, f.now.Add(time.Second)))
			f.spot("d-member", "", notice(cloud.ActionTerminate, cloud.ReclaimScaleIn, f.now.Add(-time.Minute)))
			return &service.SchedulePlan{Deadlines: []string{"d-term", "d-stop", "d-later", "d-member", "missing"},
				Shortfalls: []service.Shortfall{{Commitment: &cloud.Commitment{ID: "c1", TenantID: schedTenant, Offering: "l4.1x",
					Zone: "zone-a", Quantity: 3}, Missing: 2}}}
		},
		check: func(t *testing.T, f *schedFixture, res *service.ScheduleResult) {
			if res.Reclaimed != 2 {
				t.Fatalf("%d reclaimed, want 2", res.Reclaimed)
			}
			for id, want := range map[string]cloud.State{"d-term": cloud.Terminating, "d-stop": cloud.Stopping,
				"d-later": cloud.Running, "d-member": cloud.Running} {
				if in := f.get(id); in.State != want {
					t.Errorf("%s: %s, want %s", id, in.State, want)
				}
			}
			if evs := f.events(cloud.EventInstanceState, "d-stop"); len(evs) != 1 || !strings.HasPrefix(evs[0], "spot reclaim (price): deadline") {
				t.Errorf("d-stop events %q", evs)
			}
			want := "[commitment c1: 2 of 3 reserved l4.1x instances in zone-a cannot be held: no capacity, even by reclaiming spot]"
			if evs := f.events(cloud.EventCommitment, ""); fmt.Sprint(evs) != want {
				t.Errorf("commitment events %q", evs)
			}
		},
	}} {
		t.Run(c.name, func(t *testing.T) {
			testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
				f := newSchedFixture(t, st)
				plan := c.plan(f)
				res, err := service.ApplySchedule(context.Background(), st, service.Controller("scheduler"), plan, f.now)
				if err != nil {
					t.Fatal(err)
				}
				c.check(t, f, res)
			})
		})
	}
}
