package e2e

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agent/gpu/sim"
	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/billing"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
	"github.com/gpucloud/gpucloud/store/pgtest"
)

// TestStoppedInstanceBillsStorage runs an instance with a 500 GiB volume and
// a public address, stops it, and checks the invoice: compute for exactly
// the seconds it ran and not one more, while the volume and the address
// keep billing until the invoice's as-of time.
func TestStoppedInstanceBillsStorage(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { testStoppedBilling(t, "sqlite://"+filepath.Join(t.TempDir(), "gpucloud.db")) })
	t.Run("postgres", func(t *testing.T) { testStoppedBilling(t, pgtest.URL(t)) })
}

func testStoppedBilling(t *testing.T, db string) {
	clock := newScaledClock()
	spec := sim.Spec{ID: "sim-l4", Zone: "e2e-a", Rack: "rack-1", GPUs: sim.GPUSpec{Model: "L4", Count: 1}}
	c := startClusterWith(t, db, clock.configure, spec)
	ctx := t.Context()
	_, alice, _ := c.member("acme", "alice")

	// Each create is retried with its key, as a client that lost the
	// answer would: the invoice below bills one volume and one address.
	volReq := api.CreateVolumeRequest{Name: "data", SizeGiB: 500, Zone: "e2e-a"}
	vol, err := alice.CreateVolume(ctx, volReq, "stopped-billing-vol")
	if err != nil {
		t.Fatal(err)
	}
	if again, err := alice.CreateVolume(ctx, volReq, "stopped-billing-vol"); err != nil || again.ID != vol.ID {
		t.Fatalf("retried volume create = %+v, %v; want %s", again, err, vol.ID)
	}
	in, err := alice.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "l4.1x", Command: []string{"sleep", "600"},
		Volumes: []string{vol.ID}}, "stopped-billing")
	if err != nil {
		t.Fatal(err)
	}
	c.waitState(alice, in.ID, cloud.Running)
	addr, err := alice.AllocateAddress(ctx, api.AllocateAddressRequest{InstanceID: in.ID}, "stopped-billing-ip")
	if err != nil {
		t.Fatal(err)
	}
	if again, err := alice.AllocateAddress(ctx, api.AllocateAddressRequest{InstanceID: in.ID}, "stopped-billing-ip"); err != nil || again.ID != addr.ID {
		t.Fatalf("retried address allocation = %+v, %v; want %s", again, err, addr.ID)
	}
	clock.pass(t, time.Minute)
	if _, err := alice.StopInstance(ctx, in.ID, 0); err != nil {
		t.Fatal(err)
	}
	c.waitState(alice, in.ID, cloud.Stopped)

	// The seconds it ran, from its events.
	evs, err := alice.InstanceEvents(ctx, in.ID, client.EventsOptions{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var on, off time.Time
	for _, e := range evs.Events {
		if e.Kind != cloud.EventInstanceState {
			continue
		}
		if o, f := cloud.MeterEdge(e.From, e.To); o {
			on = e.Time
		} else if f {
			off = e.Time
		}
	}
	ran := int64(off.Truncate(time.Second).Sub(on.Truncate(time.Second)) / time.Second)
	if on.IsZero() || off.IsZero() || ran < 60 {
		t.Fatalf("run from %s to %s (%d s): want a run of a scaled minute or more", on, off, ran)
	}

	invoice := func() *billing.Invoice {
		invs, err := alice.Invoices(ctx, client.InvoicesOptions{Month: "2026-12"})
		if err != nil || len(invs) != 1 {
			t.Fatalf("invoices: %v, %v", invs, err)
		}
		return invs[0]
	}
	check := func(inv *billing.Invoice) (compute, volume, address int64) {
		sum := money.Micros(0)
		for _, l := range inv.Lines {
			sum += l.Amount
			switch l.Category {
			case billing.CategoryCompute, billing.CategoryMinimum:
				compute += l.Quantity
			case billing.CategoryVolume:
				volume += l.Quantity
			case billing.CategoryAddress:
				address += l.Quantity
			}
		}
		if sum != inv.Total {
			t.Fatalf("lines sum to %s, total %s", sum, inv.Total)
		}
		asOf := inv.AsOf.Truncate(time.Second)
		if want := 500 * int64(asOf.Sub(vol.CreatedAt.Truncate(time.Second))/time.Second); volume != want {
			t.Errorf("volume billed %d GiB-seconds, want 500 GiB × %d s = %d", volume, want/500, want)
		}
		if want := int64(asOf.Sub(addr.CreatedAt.Truncate(time.Second)) / time.Second); address != want {
			t.Errorf("address billed %d s, want %d", address, want)
		}
		if compute != ran {
			t.Errorf("compute billed %d s, want the %d s it ran", compute, ran)
		}
		return
	}
	_, v1, a1 := check(invoice())
	clock.pass(t, time.Minute) // stopped
	inv := invoice()
	_, v2, a2 := check(inv)
	if v2 <= v1 || a2 <= a1 {
		t.Errorf("storage stopped billing while the instance was stopped: volume %d → %d, address %d → %d", v1, v2, a1, a2)
	}
	t.Logf("stopped instance: %d s of compute; by the as-of time %d GiB-s of volume and %d s of address; total %s", ran, v2, a2, inv.Total)
}
