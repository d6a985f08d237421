package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/testkit"
)

// seedShareHost creates tenants t1 and t2 and one host with one L40S.
func seedShareHost(t *testing.T, st cloud.Store) {
	ctx := context.Background()
	tx(t, st, func(tx cloud.Tx) error {
		for _, id := range []string{"t1", "t2", "t3"} {
			if err := tx.CreateTenant(ctx, &cloud.Tenant{ID: id, Name: "tenant " + id, CreatedAt: t0}); err != nil {
				return err
			}
		}
		h := fleet.MockHost("l40s-one", "L40S", 1)
		return tx.PutHost(ctx, &cloud.Host{ID: h.ID, State: fleet.Schedulable, Spec: *h, LastHeartbeat: t0})
	})
}

func createFor(t *testing.T, st cloud.Store, tenant, id, offering string, at time.Time) {
	tx(t, st, func(tx cloud.Tx) error {
		return tx.CreateInstance(context.Background(), &cloud.Instance{ID: id, TenantID: tenant, Offering: offering,
			State: cloud.Pending, CreatedAt: at, UpdatedAt: at})
	})
}

// TestSchedulerShareTenants: the GPU shares of one GPU belong to one
// tenant. On a one-GPU host, a second tenant's share waits, saying why,
// while the first tenant's shares stack; the placements record their
// tenant.
func TestSchedulerShareTenants(t *testing.T) {
	st := newStore(t)
	seedShareHost(t, st)
	createFor(t, st, "t1", "a1", "l40s.shared.0.25", t0)
	createFor(t, st, "t2", "b1", "l40s.shared.0.25", t0.Add(time.Second))
	createFor(t, st, "t1", "a2", "l40s.shared.0.25", t0.Add(2*time.Second))
	s := newScheduler(st)
	if n, err := s.Step(context.Background()); err != nil || n != 2 {
		t.Fatalf("placed %d, err %v", n, err)
	}
	if err := s.Fleet().Check(); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a1", "a2"} {
		in := get(t, st, id)
		if in.State != cloud.Scheduled || in.Placement == nil || in.Placement.Tenant != "t1" {
			t.Fatalf("%s: %s, placement %+v", id, in.State, in.Placement)
		}
	}
	b := get(t, st, "b1")
	if b.State != cloud.Pending || !strings.Contains(b.Reason, "GPU shared by another tenant") {
		t.Fatalf("b1: %s %q", b.State, b.Reason)
	}
	if got := s.PendingByReason(); got[PendingShareTenant] != 1 {
		t.Errorf("pending by reason %v, want 1 %s", got, PendingShareTenant)
	}
	if g := s.Fleet().Host("l40s-one").GPUs[0]; g.ShareTenant != "t1" || g.Shares != 2 {
		t.Fatalf("gpu: %d shares of %q", g.Shares, g.ShareTenant)
	}
	// Once tenant t1's shares are gone, t2's takes the GPU.
	testkit.Walk(t, st, "a1", cloud.Stopped, testkit.Via{}, t0)
	if n, err := s.Step(context.Background()); err != nil || n != 0 {
		t.Fatalf("one of t1's shares left: placed %d, err %v", n, err)
	}
	testkit.Walk(t, st, "a2", cloud.Stopped, testkit.Via{}, t0)
	if n, err := s.Step(context.Background()); err != nil || n != 1 {
		t.Fatalf("t1's shares gone: placed %d, err %v", n, err)
	}
	if b := get(t, st, "b1"); b.State != cloud.Scheduled || b.Placement.Tenant != "t2" {
		t.Fatalf("b1: %s, placement %+v", b.State, b.Placement)
	}
}

// TestSchedulerRebuildShareTenants: a rebuild gives placements stored
// without a tenant (before tenants were recorded) their instance's, so
// another tenant's share still waits afterwards.
func TestSchedulerRebuildShareTenants(t *testing.T) {
	st := newStore(t)
	seedShareHost(t, st)
	createFor(t, st, "t1", "a1", "l40s.shared.0.25", t0)
	s := newScheduler(st)
	if n, err := s.Step(context.Background()); err != nil || n != 1 {
		t.Fatalf("placed %d, err %v", n, err)
	}
	// Store a1's placement as an older server would have: no tenant.
	tx(t, st, func(tx cloud.Tx) error {
		in, err := tx.GetInstance(context.Background(), "a1")
		if err != nil {
			return err
		}
		in.Placement.Tenant = ""
		return tx.UpdateInstance(context.Background(), in)
	})
	if p := get(t, st, "a1").Placement; p == nil || p.Tenant != "" {
		t.Fatalf("stored placement %+v", p)
	}
	createFor(t, st, "t2", "b1", "l40s.shared.0.25", t0.Add(time.Second))
	createFor(t, st, "t1", "a2", "l40s.shared.0.25", t0.Add(2*time.Second))
	s2 := newScheduler(st)
	if err := s2.Rebuild(context.Background()); err != nil {
		t.Fatal(err)
	}
	if p := s2.Fleet().Allocation("a1"); p == nil || p.Tenant != "t1" {
		t.Fatalf("rebuilt allocation %+v", p)
	}
	if g := s2.Fleet().Host("l40s-one").GPUs[0]; g.ShareTenant != "t1" {
		t.Fatalf("rebuilt gpu share tenant %q", g.ShareTenant)
	}
	if n, err := s2.Step(context.Background()); err != nil || n != 1 {
		t.Fatalf("placed %d, err %v", n, err)
	}
	if a := get(t, st, "a2"); a.State != cloud.Scheduled {
		t.Fatalf("a2: %s %q", a.State, a.Reason)
	}
	if b := get(t, st, "b1"); b.State != cloud.Pending || !strings.Contains(b.Reason, "GPU shared by another tenant") {
		t.Fatalf("b1: %s %q", b.State, b.Reason)
	}
}

// TestSchedulerRebuildLegacyMixedShares: a GPU that holds shares of two
// tenants (placed before one GPU's shares were kept to one tenant) keeps
// both through a rebuild, so that its capacity is never handed out twice,
// and takes no third tenant's share.
func TestSchedulerRebuildLegacyMixedShares(t *testing.T) {
	st := newStore(t)
	seedShareHost(t, st)
	createFor(t, st, "t1", "a1", "l40s.shared.0.25", t0)
	s := newScheduler(st)
	if n, err := s.Step(context.Background()); err != nil || n != 1 {
		t.Fatalf("placed %d, err %v", n, err)
	}
	// b1 of another tenant, on the same GPU, as an older server placed it.
	a1 := get(t, st, "a1")
	createFor(t, st, "t2", "b1", "l40s.shared.0.25", t0.Add(time.Second))
	tx(t, st, func(tx cloud.Tx) error {
		in, err := tx.GetInstance(context.Background(), "b1")
		if err != nil {
			return err
		}
		p := *a1.Placement
		p.ID, p.Tenant = "b1", ""
		in.State, in.HostID, in.Placement = cloud.Scheduled, a1.HostID, &p
		return tx.UpdateInstance(context.Background(), in)
	})
	createFor(t, st, "t3", "c1", "l40s.shared.0.25", t0.Add(2*time.Second))
	s2 := newScheduler(st)
	if err := s2.Rebuild(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s2.Fleet().Allocation("a1") == nil || s2.Fleet().Allocation("b1") == nil {
		t.Fatalf("rebuild kept a1 %v, b1 %v; want both", s2.Fleet().Allocation("a1"), s2.Fleet().Allocation("b1"))
	}
	if g := s2.Fleet().Host(a1.HostID).GPUs[0]; g.Shares != 2 {
		t.Fatalf("the GPU holds %d shares, want 2", g.Shares)
	}
	if err := s2.Fleet().Check(); err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	if c := get(t, st, "c1"); c.State != cloud.Pending {
		t.Fatalf("a third tenant's share on the mixed GPU: %s", c.State)
	}
}

// TestReservationShareTenant: a capacity placeholder of a shared offering
// holds its share for the commitment's tenant, whose other shares may join
// its GPU, while another tenant's may not.
func TestReservationShareTenant(t *testing.T) {
	st := newStore(t)
	seedShareHost(t, st)
	ctx := context.Background()
	tx(t, st, func(tx cloud.Tx) error {
		return tx.CreateCommitment(ctx, &cloud.Commitment{ID: "c1", TenantID: "t1", Plan: cloud.PlanReservation,
			Offering: "l40s.shared.0.25", Zone: fleet.MockZone, Quantity: 1, Payment: cloud.PaymentNoUpfront,
			HourlyFee: 1, Start: t0, End: t0.Add(24 * time.Hour), CreatedAt: t0})
	})
	s := newScheduler(st)
	if _, err := s.Step(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(s.placeholders); n != 1 {
		t.Fatalf("%d placeholders, want 1", n)
	}
	if g := s.Fleet().Host("l40s-one").GPUs[0]; g.Shares != 1 || g.ShareTenant != "t1" {
		t.Fatalf("placeholder: gpu with %d shares of %q", g.Shares, g.ShareTenant)
	}
	createFor(t, st, "t2", "b1", "l40s.shared.0.5", t0)
	createFor(t, st, "t1", "a1", "l40s.shared.0.5", t0.Add(time.Second))
	if _, err := s.Step(ctx); err != nil {
		t.Fatal(err)
	}
	if a := get(t, st, "a1"); a.State != cloud.Scheduled {
		t.Fatalf("t1's share next to its reservation: %s %q", a.State, a.Reason)
	}
	if b := get(t, st, "b1"); b.State != cloud.Pending || !strings.Contains(b.Reason, "GPU shared by another tenant") {
		t.Fatalf("t2's share on t1's reserved GPU: %s %q", b.State, b.Reason)
	}
}
