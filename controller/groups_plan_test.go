package controller

import (
	"slices"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/billing"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
)

// TestGroupsPlan feeds the group controller's planning one group and its
// members at a time (no store: a snapshot) and checks the plan: a
// deleting group's drain, launches up to the desired capacity, failed
// members replaced, and the scale-in notices to withdraw or enforce.
func TestGroupsPlan(t *testing.T) {
	ps, err := billing.DefaultPrices(catalog.Default())
	if err != nil {
		t.Fatal(err)
	}
	now := t0.Add(time.Hour)
	member := func(id string, st cloud.State) *cloud.Instance {
		return &cloud.Instance{ID: id, GroupID: "grp-1", Offering: "l40s.1x", Zone: fleet.MockZone, State: st,
			Market: cloud.MarketOnDemand, CreatedAt: t0, UpdatedAt: t0}
	}
	noticed := func(in *cloud.Instance, reason string, deadline time.Time, held bool) *cloud.Instance {
		in.Interruption = &cloud.Interruption{Action: cloud.ActionTerminate, Reason: reason, NoticedAt: t0, Deadline: deadline}
		if held {
			in.ScaleIn = &cloud.ScaleIn{Protected: true}
		}
		return in
	}
	for _, tc := range []struct {
		name     string
		state    cloud.GroupState
		desired  int
		members  []*cloud.Instance
		drain    []string
		deleted  bool
		scale    bool // a scaling part
		launches int
		replace  []string
		backoff  bool
		withdraw []string
		due      []string
	}{
		{name: "deleting", state: cloud.GroupDeleting, members: []*cloud.Instance{member("i-1", cloud.Running), member("i-2", cloud.Pending)},
			drain: []string{"i-1", "i-2"}},
		{name: "deleting, empty", state: cloud.GroupDeleting, deleted: true},
		{name: "launch to desired", desired: 2, scale: true, launches: 2},
		{name: "at desired", desired: 1, members: []*cloud.Instance{member("i-1", cloud.Running)}},
		// A failure starts the relaunch backoff: the replacement waits.
		{name: "failed replaced", desired: 1, members: []*cloud.Instance{member("i-1", cloud.Failed)},
			scale: true, replace: []string{"i-1"}, backoff: true},
		{name: "stopped replaced", desired: 1, members: []*cloud.Instance{member("i-1", cloud.Stopped)},
			scale: true, launches: 1, replace: []string{"i-1"}},
		{name: "notices", desired: 3, members: []*cloud.Instance{
			noticed(member("i-due", cloud.Running), cloud.ReclaimScaleIn, now, false),
			noticed(member("i-held", cloud.Running), cloud.ReclaimIdle, now.Add(time.Minute), true),
			noticed(member("i-later", cloud.Running), cloud.ReclaimScaleIn, now.Add(time.Minute), false),
			noticed(member("i-spot", cloud.Running), cloud.ReclaimCapacity, now, false),
			noticed(member("i-leaving", cloud.Terminating), cloud.ReclaimScaleIn, now, false),
		}, withdraw: []string{"i-held"}, due: []string{"i-due"}, scale: true, launches: 3}, // every member is leaving
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := tc.state
			if state == "" {
				state = cloud.GroupActive
			}
			g := &cloud.Group{ID: "grp-1", Name: "web", TenantID: "t1", State: state, Version: 4, Min: 0, Max: 10, Desired: tc.desired,
				Template: cloud.GroupTemplate{Offerings: []string{"l40s.1x"}, Zones: []string{fleet.MockZone}}}
			s := &groupSnap{groups: []*cloud.Group{g}, members: map[string][]*cloud.Instance{g.ID: tc.members},
				prices: billing.NewPriceBook(ps, nil)}
			c := &Groups{}
			p, err := c.planGroup(g, s, nil, now)
			if err != nil {
				t.Fatal(err)
			}
			if p.GroupID != g.ID || p.Version != 4 || p.Name != "web" {
				t.Errorf("plan reads %s v%d (%s)", p.GroupID, p.Version, p.Name)
			}
			if !slices.Equal(p.Drain, tc.drain) || p.Deleted != tc.deleted {
				t.Errorf("drain %v, deleted %v; want %v, %v", p.Drain, p.Deleted, tc.drain, tc.deleted)
			}
			if !slices.Equal(p.Withdraw, tc.withdraw) || !slices.Equal(p.Due, tc.due) {
				t.Errorf("withdraw %v, due %v; want %v, %v", p.Withdraw, p.Due, tc.withdraw, tc.due)
			}
			if (p.Scale != nil) != tc.scale {
				t.Fatalf("scale = %+v, want one: %v", p.Scale, tc.scale)
			}
			if p.Scale == nil {
				return
			}
			if len(p.Scale.Launch) != tc.launches || !slices.Equal(p.Scale.Replace, tc.replace) {
				t.Errorf("launches %+v, replace %v; want %d, %v", p.Scale.Launch, p.Scale.Replace, tc.launches, tc.replace)
			}
			if (p.Scale.Backoff != nil) != tc.backoff {
				t.Errorf("backoff %+v, want one: %v", p.Scale.Backoff, tc.backoff)
			}
			for _, l := range p.Scale.Launch {
				if l.Offering != "l40s.1x" || l.Zone != fleet.MockZone {
					t.Errorf("launch %+v", l)
				}
			}
			if p.Scale.Notice != time.Duration(DefaultNoticeSeconds)*time.Second {
				t.Errorf("notice %s", p.Scale.Notice)
			}
		})
	}
}

// TestGroupsPlanSavesHistoryWhenDue: the plan carries the group's history
// document once every HistorySave, and not in between.
func TestGroupsPlanSavesHistoryWhenDue(t *testing.T) {
	ps, err := billing.DefaultPrices(catalog.Default())
	if err != nil {
		t.Fatal(err)
	}
	g := &cloud.Group{ID: "grp-1", Name: "web", TenantID: "t1", State: cloud.GroupActive, Max: 1,
		Template: cloud.GroupTemplate{Offerings: []string{"l40s.1x"}, Zones: []string{fleet.MockZone}}}
	s := &groupSnap{groups: []*cloud.Group{g}, members: map[string][]*cloud.Instance{}, prices: billing.NewPriceBook(ps, nil)}
	c := &Groups{HistorySave: 10 * time.Minute}
	c.run(g.ID).saved = t0
	for _, tc := range []struct {
		at   time.Duration
		save bool
	}{{time.Minute, false}, {10 * time.Minute, true}, {15 * time.Minute, false}, {20 * time.Minute, true}} {
		p, err := c.planGroup(g, s, nil, t0.Add(tc.at))
		if err != nil {
			t.Fatal(err)
		}
		if (p.History != nil) != tc.save {
			t.Errorf("at %s: history %d bytes, want a save: %v", tc.at, len(p.History), tc.save)
		}
	}
}

// TestGroupMemberLeaving: the planner's view of a member under notice
// says until when it serves (the interruption's deadline), which the
// gpucloud policy counts when it measures the load it did not hold; a
// rebalance recommendation (no action) is no notice, and a member
// stopping has no deadline to give.
func TestGroupMemberLeaving(t *testing.T) {
	now := t0.Add(time.Hour)
	deadline := now.Add(90 * time.Second)
	for _, tc := range []struct {
		name    string
		state   cloud.State
		intr    *cloud.Interruption
		leaving bool
		until   time.Time
	}{
		{"running", cloud.Running, nil, false, time.Time{}},
		{"scale-in notice", cloud.Running, &cloud.Interruption{Action: cloud.ActionTerminate, Reason: cloud.ReclaimScaleIn, Deadline: deadline}, true, deadline},
		{"spot reclaim", cloud.Running, &cloud.Interruption{Action: cloud.ActionStop, Reason: cloud.ReclaimCapacity, Deadline: deadline}, true, deadline},
		{"rebalance recommendation", cloud.Running, &cloud.Interruption{Reason: cloud.ReclaimRebalance, Deadline: deadline}, false, time.Time{}},
		{"terminating", cloud.Terminating, nil, true, time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &groupRun{util: map[string]*memberUtil{}, runningSince: map[string]time.Time{}}
			in := &cloud.Instance{ID: "i-1", GroupID: "grp-1", Offering: "l40s.1x", Zone: fleet.MockZone, State: tc.state,
				Market: cloud.MarketOnDemand, CreatedAt: t0, UpdatedAt: t0, Interruption: tc.intr}
			mb, _ := r.member(in, nil, false, now)
			if mb.Leaving != tc.leaving || !mb.LeavingUntil.Equal(tc.until) {
				t.Errorf("leaving %v until %v; want %v until %v", mb.Leaving, mb.LeavingUntil, tc.leaving, tc.until)
			}
		})
	}
}
