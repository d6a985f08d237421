package service_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

// TestApplyGroupPlan applies one group plan at a time to a fresh group
// (desired 2, min 1, max 8) with one pending member under a scale-in
// notice that has run out: the scaling applies only to the group still at
// the version read and active, while the notices, the drain and the
// history do not depend on it.
func TestApplyGroupPlan(t *testing.T) {
	groups := service.Controller("groups")
	three := 3
	scale := &service.GroupScale{Launch: []service.GroupLaunch{{Offering: "l4.1x", Zone: "zone-a"}, {Offering: "l4.1x", Zone: "zone-b"}},
		Desired: 3, Decision: cloud.GroupDecision{From: 2, To: 3, Policy: "target", Reason: "load"}, Record: true, Action: true}
	for _, tc := range []struct {
		name string
		// deleting deletes the group (the API's Delete) first; stale
		// plans on the version before the last write.
		deleting, stale bool
		plan            func(p *service.GroupPlan, member string)
		// want: the group's desired capacity, state, launch sequence and
		// decisions after; members how many live members it has; events
		// how many events the plan adds.
		desired   int
		state     cloud.GroupState
		seq       int64
		decisions int
		members   int
		events    int
	}{
		{name: "empty", desired: 2, state: cloud.GroupActive, seq: 1, members: 1,
			plan: func(p *service.GroupPlan, _ string) {}},
		// Two launches (an event each), the decision's event.
		{name: "scale", desired: 3, state: cloud.GroupActive, seq: 3, decisions: 1, members: 3, events: 3,
			plan: func(p *service.GroupPlan, _ string) { p.Scale = scale }},
		{name: "stale scale", stale: true, desired: 2, state: cloud.GroupActive, seq: 1, members: 1,
			plan: func(p *service.GroupPlan, _ string) { p.Scale = scale }},
		{name: "deleting scale", deleting: true, desired: 2, state: cloud.GroupDeleting, seq: 1, members: 1,
			plan: func(p *service.GroupPlan, _ string) { p.Scale = scale }},
		{name: "new bounds", desired: 3, state: cloud.GroupActive, seq: 1, decisions: 1, members: 1, events: 1,
			plan: func(p *service.GroupPlan, _ string) {
				p.Scale = &service.GroupScale{Min: &three, Desired: 2, Record: true, Action: true,
					Decision: cloud.GroupDecision{From: 2, To: 3, Policy: "night", Reason: "scheduled"}}
			}},
		// The due notice ends the member (its state event) whatever the
		// group's version.
		{name: "stale due", stale: true, desired: 2, state: cloud.GroupActive, seq: 1, events: 1,
			plan: func(p *service.GroupPlan, member string) { p.Scale, p.Due = scale, []string{member} }},
		{name: "drain", deleting: true, desired: 2, state: cloud.GroupDeleting, seq: 1, events: 1,
			plan: func(p *service.GroupPlan, member string) { p.Drain = []string{member} }},
		{name: "deleted", deleting: true, desired: 0, state: cloud.GroupDeleted, seq: 1, members: 1, events: 1,
			plan: func(p *service.GroupPlan, _ string) { p.Deleted = true }},
		{name: "deleted when active", desired: 2, state: cloud.GroupActive, seq: 1, members: 1,
			plan: func(p *service.GroupPlan, _ string) { p.Deleted = true }},
		{name: "history", desired: 2, state: cloud.GroupActive, seq: 1, members: 1,
			plan: func(p *service.GroupPlan, _ string) { p.History = []byte("doc") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
				w := newWorld(t, st)
				ctx := context.Background()
				g := w.group(t, w.acme, "web")
				now := w.clock.Now()
				var member *cloud.Instance
				if err := st.Tx(ctx, func(tx cloud.Tx) error {
					var err error
					member, err = service.LaunchGroupMember(ctx, tx, catalog.Default(), g, service.LaunchSpec{Offering: "l4.1x", Seq: 1}, "groups", now)
					if err != nil {
						return err
					}
					if err := service.NoticeGroupMember(ctx, tx, member, cloud.ReclaimScaleIn, 0, "groups", now); err != nil {
						return err
					}
					cur, err := tx.GetGroup(ctx, g.ID)
					if err != nil {
						return err
					}
					cur.Status.LaunchSeq = 1
					return tx.UpdateGroup(ctx, cur)
				}); err != nil {
					t.Fatal(err)
				}
				g, err := w.svc.Groups.Get(ctx, w.acme, g.ID)
				if err != nil {
					t.Fatal(err)
				}
				read := g.Version
				if tc.deleting {
					if g, err = w.svc.Groups.Delete(ctx, w.acme, g.ID, 0); err != nil {
						t.Fatal(err)
					}
					read = g.Version
				}
				if tc.stale {
					if _, err := w.svc.Groups.Update(ctx, w.acme, g.ID, api.UpdateGroupRequest{Max: &[]int{7}[0]}, 0); err != nil {
						t.Fatal(err)
					}
				}
				p := &service.GroupPlan{GroupID: g.ID, Name: g.Name, Version: read}
				tc.plan(p, member.ID)
				before := w.rows(t)
				if err := service.ApplyGroupPlan(ctx, st, catalog.Default(), groups, p, now); err != nil {
					t.Fatal(err)
				}
				after := w.rows(t)
				got, err := w.svc.Groups.Get(ctx, w.admin, g.ID)
				if err != nil {
					t.Fatal(err)
				}
				if got.Desired != tc.desired || got.State != tc.state || got.Status.LaunchSeq != tc.seq || len(got.Status.Decisions) != tc.decisions {
					t.Errorf("group = desired %d, %s, seq %d, %d decisions; want %d, %s, %d, %d", got.Desired, got.State,
						got.Status.LaunchSeq, len(got.Status.Decisions), tc.desired, tc.state, tc.seq, tc.decisions)
				}
				var live []*cloud.Instance
				_ = st.Tx(ctx, func(tx cloud.Tx) (err error) {
					live, err = tx.ListInstances(ctx, cloud.InstanceFilter{GroupID: g.ID, States: []cloud.State{cloud.Pending}})
					return
				})
				if len(live) != tc.members || after.Events != before.Events+tc.events {
					t.Errorf("%d live members, events %d -> %d; want %d, +%d", len(live), before.Events, after.Events, tc.members, tc.events)
				}
				var doc []byte
				_ = st.Tx(ctx, func(tx cloud.Tx) (err error) { doc, err = tx.GroupHistory(ctx, g.ID); return })
				if (p.History != nil) != bytes.Equal(doc, []byte("doc")) {
					t.Errorf("history = %q", doc)
				}
			})
		})
	}
}
