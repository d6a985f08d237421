package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/autoscale"
	"github.com/gpucloud/gpucloud/billing"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/money"
	"github.com/gpucloud/gpucloud/service"
)

// groupBed is the market test bed (one 2-GPU L40S host, the built-in price
// book) with a group controller.
type groupBed struct {
	*market
	g *Groups
}

func newGroupBed(t *testing.T) *groupBed {
	mk := newMarket(t)
	g := &Groups{Store: mk.st, Catalog: catalog.Default(), Quotes: mk.m, Now: mk.clock.Now, HistorySave: time.Minute}
	return &groupBed{market: mk, g: g}
}

// round runs the market, the groups and the scheduler once, in the
// leader's order.
func (b *groupBed) round() {
	b.t.Helper()
	ctx := context.Background()
	if err := b.m.Step(ctx); err != nil {
		b.t.Fatal(err)
	}
	if err := b.g.Step(ctx); err != nil {
		b.t.Fatal(err)
	}
	if _, err := b.s.Step(ctx); err != nil {
		b.t.Fatal(err)
	}
}

func (b *groupBed) create(g *cloud.Group) *cloud.Group {
	b.t.Helper()
	now := b.clock.Now()
	g.TenantID, g.State, g.CreatedAt, g.UpdatedAt = "t1", cloud.GroupActive, now, now
	if g.ID == "" {
		g.ID = "grp-" + g.Name
	}
	if len(g.Template.Offerings) == 0 {
		g.Template.Offerings = []string{"l40s.1x"}
		g.Template.Zones = []string{fleet.MockZone}
		g.Template.Command = []string{"train"}
	}
	tx(b.t, b.st, func(tx cloud.Tx) error { return tx.CreateGroup(context.Background(), g) })
	return g
}

func (b *groupBed) group(id string) *cloud.Group {
	b.t.Helper()
	var g *cloud.Group
	tx(b.t, b.st, func(tx cloud.Tx) (err error) { g, err = tx.GetGroup(context.Background(), id); return })
	return g
}

// members lists a group's instances that are not terminated, by ID.
func (b *groupBed) members(id string) []*cloud.Instance {
	b.t.Helper()
	var out []*cloud.Instance
	tx(b.t, b.st, func(tx cloud.Tx) (err error) {
		out, err = tx.ListInstances(context.Background(), cloud.InstanceFilter{GroupID: id, States: liveStates})
		return
	})
	return out
}

// runAll walks every scheduled member to running.
func (b *groupBed) runAll(id string) {
	b.t.Helper()
	for _, in := range b.members(id) {
		if in.State == cloud.Scheduled || in.State == cloud.Starting {
			b.move(in.ID, cloud.Running)
		}
	}
}

// load reports a GPU utilization for every running member of a group.
func (b *groupBed) load(id string, gpu float64) {
	b.t.Helper()
	var ps []cloud.MetricPoint
	for _, in := range b.members(id) {
		if in.State == cloud.Running {
			ps = append(ps, cloud.MetricPoint{TenantID: "t1", Name: cloud.MetricGPUUtilization, InstanceID: in.ID,
				At: b.clock.Now(), Value: gpu})
		}
	}
	if len(ps) == 0 {
		return
	}
	tx(b.t, b.st, func(tx cloud.Tx) error { return tx.AppendMetrics(context.Background(), ps) })
}

func (b *groupBed) update(id string, fn func(in *cloud.Instance)) {
	b.t.Helper()
	tx(b.t, b.st, func(tx cloud.Tx) error {
		in, err := tx.GetInstance(context.Background(), id)
		if err != nil {
			return err
		}
		fn(in)
		_, err = tx.UpdateInstances(context.Background(), []*cloud.Instance{in})
		return err
	})
}

func TestFixedGroupKeepsItsSizeAndReplacesFailures(t *testing.T) {
	b := newGroupBed(t)
	g := b.create(&cloud.Group{Name: "fixed", Min: 2, Max: 2, Desired: 2})
	b.round()
	ms := b.members(g.ID)
	if len(ms) != 2 {
		t.Fatalf("%d members, want 2", len(ms))
	}
	for _, m := range ms {
		if m.Tags["gpucloud:group"] != g.ID || m.GroupID != g.ID {
			t.Fatalf("member %s not tagged with its group: %v", m.ID, m.Tags)
		}
	}
	b.runAll(g.ID)
	// Rounds with nothing to do launch nothing more.
	b.clock.Advance(10 * time.Second)
	b.round()
	if n := len(b.members(g.ID)); n != 2 {
		t.Fatalf("%d members after a quiet round", n)
	}
	bad := ms[0].ID
	b.move(bad, cloud.Failed)
	b.clock.Advance(10 * time.Second)
	b.round()
	// The first failure starts a short backoff (BackoffBase) before the
	// replacement.
	if b.group(g.ID).Status.Backoff == nil {
		t.Fatalf("no backoff after a failure")
	}
	b.clock.Advance(autoscale.BackoffBase)
	b.round()
	if in := b.get(bad); in.State != cloud.Terminating && in.State != cloud.Terminated {
		t.Fatalf("failed member is %s, want terminating", in.State)
	}
	live := 0
	for _, m := range b.members(g.ID) {
		if m.ID != bad && m.State != cloud.Terminating {
			live++
		}
	}
	if live != 2 {
		t.Fatalf("%d live members after the replacement, want 2", live)
	}
	if seq := b.group(g.ID).Status.LaunchSeq; seq != 3 {
		t.Fatalf("launch sequence %d, want 3", seq)
	}
}

func TestRelaunchLoopBacksOff(t *testing.T) {
	b := newGroupBed(t)
	g := b.create(&cloud.Group{Name: "crash", Min: 1, Max: 1, Desired: 1})
	launched := map[string]bool{}
	for i := 0; i < 6; i++ {
		b.round()
		for _, m := range b.members(g.ID) {
			launched[m.ID] = true
			if m.State == cloud.Scheduled {
				b.move(m.ID, cloud.Failed)
			}
		}
		b.clock.Advance(5 * time.Second)
	}
	cur := b.group(g.ID)
	if cur.Status.Backoff == nil {
		t.Fatalf("no backoff after %d failed launches; status %+v", len(launched), cur.Status)
	}
	if len(launched) >= 6 {
		t.Fatalf("%d launches in 6 rounds: the relaunch loop did not back off", len(launched))
	}
	if cur.Status.Backoff.Reason == "" {
		t.Fatalf("backoff without a reason: %+v", cur.Status.Backoff)
	}
}

func TestTargetScalesOutAndInNeverTouchingALockedMember(t *testing.T) {
	b := newGroupBed(t)
	g := b.create(&cloud.Group{Name: "web", Min: 1, Max: 2, Desired: 1,
		Policies: []cloud.ScalingPolicy{{Name: "gpu", Type: cloud.PolicyTarget, Metric: cloud.MetricGPUUtilization, Target: 0.6}},
		Timing:   cloud.GroupTiming{WarmupSeconds: 1, StabilizationSeconds: 60, NoticeSeconds: 30}})
	b.round()
	b.runAll(g.ID)
	b.clock.Advance(5 * time.Second)
	b.round() // the member is seen running: its warm-up starts
	b.clock.Advance(5 * time.Second)
	b.load(g.ID, 1.0)
	b.round()
	if d := b.group(g.ID).Desired; d != 2 {
		t.Fatalf("desired %d after load 1.0 at target 0.6, want 2; status %+v", d, b.group(g.ID).Status)
	}
	ms := b.members(g.ID)
	if len(ms) != 2 {
		t.Fatalf("%d members, want 2", len(ms))
	}
	// Scale-in: each member locked in turn, so that the lock decides and
	// not the scale-in order.
	for _, locked := range []int{0, 1} {
		t.Run(fmt.Sprint("locked-", locked), func(t *testing.T) {
			c := newGroupBed(t)
			g := c.create(&cloud.Group{Name: "web", Min: 1, Max: 2, Desired: 2,
				Policies: []cloud.ScalingPolicy{{Name: "gpu", Type: cloud.PolicyTarget, Metric: cloud.MetricGPUUtilization, Target: 0.6}},
				Timing:   cloud.GroupTiming{WarmupSeconds: 1, StabilizationSeconds: 60, NoticeSeconds: 30}})
			c.round()
			c.runAll(g.ID)
			ms := c.members(g.ID)
			if len(ms) != 2 {
				t.Fatalf("%d members", len(ms))
			}
			keep := ms[locked].ID
			c.update(keep, func(in *cloud.Instance) {
				in.ScaleIn = &cloud.ScaleIn{Lock: &cloud.ScaleLock{Reason: "saving step", At: c.clock.Now()}}
			})
			var noticed string
			for i := 0; i < 20 && noticed == ""; i++ {
				c.clock.Advance(10 * time.Second)
				c.load(g.ID, 0.05)
				c.round()
				for _, m := range c.members(g.ID) {
					if m.Interruption != nil && m.Interruption.Action != "" {
						noticed = m.ID
					}
				}
				if i == 2 && noticed != "" {
					t.Fatalf("scaled in after 30 s, inside the 60 s stabilization window")
				}
			}
			if noticed == "" {
				t.Fatalf("no scale-in after 200 s of idle load; status %+v", c.group(g.ID).Status)
			}
			if noticed == keep {
				t.Fatalf("the locked member %s got the scale-in notice", keep)
			}
			in := c.get(noticed)
			if in.Interruption.Reason != cloud.ReclaimScaleIn || in.Interruption.Deadline.Sub(in.Interruption.NoticedAt) != 30*time.Second {
				t.Fatalf("notice %+v, want scale-in with 30 s", in.Interruption)
			}
			if in.State != cloud.Running {
				t.Fatalf("noticed member is %s: the notice must come before the stop", in.State)
			}
			c.clock.Advance(31 * time.Second)
			c.round()
			if in := c.get(noticed); in.State != cloud.Terminating {
				t.Fatalf("member %s after its notice: %s", noticed, in.State)
			}
			if in := c.get(keep); in.State != cloud.Running || in.Interruption != nil {
				t.Fatalf("locked member %s: %s %+v", keep, in.State, in.Interruption)
			}
			if d := c.group(g.ID).Desired; d != 1 {
				t.Fatalf("desired %d, want 1", d)
			}
		})
	}
}

func TestNoticeWithdrawnWhenTheMemberLocks(t *testing.T) {
	b := newGroupBed(t)
	g := b.create(&cloud.Group{Name: "train", Min: 1, Max: 2, Desired: 2, Timing: cloud.GroupTiming{NoticeSeconds: 120}})
	b.round()
	b.runAll(g.ID)
	// The tenant lowers the desired count; the newest member gets notice.
	cur := b.group(g.ID)
	cur.Desired = 1
	tx(t, b.st, func(tx cloud.Tx) error { return tx.UpdateGroup(context.Background(), cur) })
	b.clock.Advance(10 * time.Second)
	b.round()
	var noticed *cloud.Instance
	for _, m := range b.members(g.ID) {
		if m.Interruption != nil && m.Interruption.Action != "" {
			noticed = m
		}
	}
	if noticed == nil {
		t.Fatal("no member got a scale-in notice")
	}
	// Within its notice the workload takes a completion lock.
	b.update(noticed.ID, func(in *cloud.Instance) {
		in.ScaleIn = &cloud.ScaleIn{Lock: &cloud.ScaleLock{Reason: "checkpoint", At: b.clock.Now()}}
	})
	b.clock.Advance(10 * time.Second)
	b.round()
	if in := b.get(noticed.ID); in.Interruption != nil && in.Interruption.Action != "" {
		t.Fatalf("notice kept on a locked member: %+v", in.Interruption)
	}
	// Past the old deadline it still runs; the group picks no other member
	// while the locked one is the only one it could release.
	b.clock.Advance(5 * time.Minute)
	b.round()
	if in := b.get(noticed.ID); in.State != cloud.Running {
		t.Fatalf("locked member is %s after its old deadline", in.State)
	}
	// The lock released, scale-in resumes.
	b.update(noticed.ID, func(in *cloud.Instance) { in.ScaleIn = nil })
	for i := 0; i < 3; i++ {
		b.clock.Advance(10 * time.Second)
		b.round()
	}
	n := 0
	for _, m := range b.members(g.ID) {
		if m.Interruption != nil && m.Interruption.Action != "" || m.State == cloud.Terminating {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d members leaving after the lock was released, want 1", n)
	}
}

func TestBudgetCeilingStopsScaleOut(t *testing.T) {
	b := newGroupBed(t)
	price := b.onDemandPrice("l40s.1x")
	// Room for one instance and a half.
	g := b.create(&cloud.Group{Name: "capped", Min: 0, Max: 2, Desired: 2, BudgetPerHour: price + price/2})
	b.round()
	ms := b.members(g.ID)
	if len(ms) != 1 {
		t.Fatalf("%d members under a budget for one", len(ms))
	}
	cur := b.group(g.ID)
	if cur.Desired != 1 {
		t.Fatalf("desired %d, want 1", cur.Desired)
	}
	last := cur.Status.Decisions[len(cur.Status.Decisions)-1]
	if last.Limit != "budget" {
		t.Fatalf("decision %+v: want the budget named as the limit", last)
	}
	var evs []*cloud.Event
	tx(t, b.st, func(tx cloud.Tx) (err error) {
		evs, err = tx.ListEvents(context.Background(), cloud.EventFilter{Kinds: []cloud.EventKind{cloud.EventGroupScaling}})
		return
	})
	if len(evs) == 0 || !strings.Contains(evs[len(evs)-1].Reason, "budget") {
		t.Fatalf("no scaling event names the budget: %v", evs)
	}
}

// TestBudgetHoldIsRecordedOnce: a group whose policy asks for more than
// its budget pays for, while the budget holds it at its desired capacity
// (no change to write), still records the hold once: a decision naming
// the budget, its message and a group.scaling event; later rounds of the
// same hold write nothing, and the hold is no scaling action (cooldown).
func TestBudgetHoldIsRecordedOnce(t *testing.T) {
	b := newGroupBed(t)
	price := b.onDemandPrice("l40s.1x")
	g := b.create(&cloud.Group{Name: "held", Min: 1, Max: 2, Desired: 1, BudgetPerHour: price + price/2,
		Policies: []cloud.ScalingPolicy{{Name: "gpu", Type: cloud.PolicyTarget, Metric: cloud.MetricGPUUtilization, Target: 0.6}},
		Timing:   cloud.GroupTiming{WarmupSeconds: 1, StabilizationSeconds: 60, NoticeSeconds: 30}})
	b.round()
	b.runAll(g.ID)
	b.clock.Advance(5 * time.Second)
	b.round() // the member is seen running: its warm-up starts
	events := func() []*cloud.Event {
		var evs []*cloud.Event
		tx(t, b.st, func(tx cloud.Tx) (err error) {
			evs, err = tx.ListEvents(context.Background(), cloud.EventFilter{Kinds: []cloud.EventKind{cloud.EventGroupScaling}})
			return
		})
		return evs
	}
	if n := len(events()); n != 0 {
		t.Fatalf("%d scaling events before any load", n)
	}
	b.clock.Advance(5 * time.Second)
	b.load(g.ID, 1.0) // wants 2; the budget pays for 1
	b.round()
	cur := b.group(g.ID)
	if cur.Desired != 1 || len(b.members(g.ID)) != 1 {
		t.Fatalf("desired %d, %d members under a budget for one", cur.Desired, len(b.members(g.ID)))
	}
	if len(cur.Status.Decisions) != 1 {
		t.Fatalf("decisions %+v: want the budget hold recorded", cur.Status.Decisions)
	}
	d := cur.Status.Decisions[0]
	if d.Limit != "budget" || d.From != 1 || d.To != 1 || d.Policy != "gpu" || !strings.Contains(d.Reason, "budget") {
		t.Fatalf("decision %+v: want gpu held at 1 by the budget", d)
	}
	if !strings.Contains(cur.Status.Message, "budget") || !cur.Status.LastActionAt.IsZero() {
		t.Fatalf("status %+v: want the budget in the message and no scaling action", cur.Status)
	}
	evs := events()
	if len(evs) != 1 || !strings.Contains(evs[0].Reason, "budget") || !strings.Contains(string(evs[0].Details), `"limit":"budget"`) {
		t.Fatalf("events %+v: want one naming the budget", evs)
	}
	for range 3 {
		b.clock.Advance(5 * time.Second)
		b.load(g.ID, 1.0)
		b.round()
	}
	if again := b.group(g.ID); again.Version != cur.Version || len(events()) != 1 {
		t.Fatalf("the same hold was written again: version %d -> %d, %d events", cur.Version, again.Version, len(events()))
	}
}

func (b *groupBed) onDemandPrice(off string) money.Micros {
	var ps []*cloud.Price
	tx(b.t, b.st, func(tx cloud.Tx) (err error) {
		ps, err = tx.ListPrices(context.Background(), cloud.PriceFilter{Kind: cloud.PriceCompute})
		return
	})
	p, ok := billing.NewPriceBook(ps, nil).Compute(off, fleet.MockZone, b.clock.Now())
	if !ok || p <= 0 {
		b.t.Fatalf("no on-demand price for %s", off)
	}
	return p
}

func TestDeletedGroupDrains(t *testing.T) {
	b := newGroupBed(t)
	g := b.create(&cloud.Group{Name: "gone", Min: 2, Max: 2, Desired: 2})
	b.round()
	b.runAll(g.ID)
	cur := b.group(g.ID)
	cur.State = cloud.GroupDeleting
	tx(t, b.st, func(tx cloud.Tx) error { return tx.UpdateGroup(context.Background(), cur) })
	b.round()
	for _, m := range b.members(g.ID) {
		if m.State != cloud.Terminating {
			t.Fatalf("member %s is %s in a deleting group", m.ID, m.State)
		}
		b.move(m.ID, cloud.Terminated)
	}
	b.round()
	if st := b.group(g.ID).State; st != cloud.GroupDeleted {
		t.Fatalf("group is %s with no member left", st)
	}
}

func TestHistorySurvivesALeaderChange(t *testing.T) {
	b := newGroupBed(t)
	g := b.create(&cloud.Group{Name: "hist", Min: 1, Max: 1, Desired: 1})
	b.round()
	b.runAll(g.ID)
	for i := 0; i < 5; i++ {
		b.clock.Advance(time.Minute)
		b.load(g.ID, 0.5)
		b.round()
	}
	next := &Groups{Store: b.st, Catalog: catalog.Default(), Now: b.clock.Now}
	next.load(context.Background(), []*cloud.Group{b.group(g.ID)}, b.clock.Now())
	r := next.runs[g.ID]
	if span := r.hist.Span("ready"); span < 3*time.Minute {
		t.Fatalf("a new leader restored %v of history, want several minutes", span)
	}
}

// TestSchedulerLeavesGroupNoticesToTheGroups: a spot member's scale-in
// notice is the group controller's to enforce, so a member that took its
// completion lock is not terminated by the scheduler at the deadline
// before the group round withdraws the notice.
func TestSchedulerLeavesGroupNoticesToTheGroups(t *testing.T) {
	b := newGroupBed(t)
	g := b.create(&cloud.Group{Name: "spotty", Min: 1, Max: 1, Desired: 1, Mixed: cloud.MixedInstances{Spot: true},
		Timing: cloud.GroupTiming{NoticeSeconds: 30}})
	b.round()
	b.round()
	b.runAll(g.ID)
	ms := b.members(g.ID)
	if len(ms) != 1 || ms[0].Market != cloud.MarketSpot || ms[0].State != cloud.Running {
		t.Fatalf("members %+v, want one running spot member", ms)
	}
	id := ms[0].ID
	tx(t, b.st, func(tx cloud.Tx) error {
		in, err := tx.GetInstance(context.Background(), id)
		if err != nil {
			return err
		}
		return service.NoticeGroupMember(context.Background(), tx, in, cloud.ReclaimScaleIn, 30*time.Second, "test", b.clock.Now())
	})
	b.update(id, func(in *cloud.Instance) {
		in.ScaleIn = &cloud.ScaleIn{Lock: &cloud.ScaleLock{Reason: "checkpoint", At: b.clock.Now()}}
	})
	b.clock.Advance(31 * time.Second)
	if _, err := b.s.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	if in := b.get(id); in.State != cloud.Running {
		t.Fatalf("the scheduler moved a locked member under a group notice to %s", in.State)
	}
	b.round()
	if in := b.get(id); in.State != cloud.Running || in.Interruption != nil && in.Interruption.Action != "" {
		t.Fatalf("locked member after the group round: %s %+v", in.State, in.Interruption)
	}
}
