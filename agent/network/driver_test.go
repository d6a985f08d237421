package network

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/agentapi"
)

// fakeDriver records the calls a Hook makes.
type fakeDriver struct {
	calls []string
	addr  netip.Addr
}

func (f *fakeDriver) Setup(ctx context.Context, id string, n *runtime.Network) (string, error) {
	f.calls = append(f.calls, "setup "+id+" "+n.ID)
	return "/var/run/netns/" + id, nil
}
func (f *fakeDriver) Teardown(ctx context.Context, id string) error {
	f.calls = append(f.calls, "teardown "+id)
	return nil
}
func (f *fakeDriver) Sync(ctx context.Context, nets []agentapi.HostNetwork) error {
	f.calls = append(f.calls, "sync "+nets[0].ID)
	return nil
}
func (f *fakeDriver) Reconcile(ctx context.Context, keep []string) error {
	f.calls = append(f.calls, "reconcile "+strings.Join(keep, ","))
	return nil
}
func (f *fakeDriver) Destroy(ctx context.Context) error {
	f.calls = append(f.calls, "destroy")
	return nil
}
func (f *fakeDriver) Address(id string) (netip.Addr, bool) {
	return f.addr, id == "i1"
}

// TestHook: an instance with a network goes to the driver, one without
// to the per-tenant network, and one that needs a network the host lacks
// is refused; views, reconciles and addresses reach the driver.
func TestHook(t *testing.T) {
	ctx := t.Context()
	d := &fakeDriver{addr: netip.MustParseAddr("10.0.1.10")}
	h := &Hook{Driver: d}
	if p, err := h.Setup(ctx, "i1", "ten", &runtime.Network{ID: "net-1"}); err != nil || p != "/var/run/netns/i1" {
		t.Fatalf("setup on a network: %q, %v", p, err)
	}
	if _, err := h.Setup(ctx, "i2", "ten", nil); err == nil || !strings.Contains(err.Error(), "no per-tenant network") {
		t.Fatalf("setup without a network on a host without the per-tenant network: %v", err)
	}
	if err := h.SyncNetworks(ctx, &agentapi.NetworkView{Networks: []agentapi.HostNetwork{{ID: "net-1"}}}); err != nil {
		t.Fatal(err)
	}
	if err := h.Reconcile(ctx, []string{"i1"}); err != nil {
		t.Fatal(err)
	}
	if err := h.Teardown(ctx, "i1"); err != nil {
		t.Fatal(err)
	}
	if a, ok := h.Address("i1"); !ok || a != d.addr {
		t.Fatalf("address %v, %v", a, ok)
	}
	if _, ok := h.Address("i9"); ok {
		t.Fatal("an address for an unknown instance")
	}
	if got, want := strings.Join(d.calls, "; "), "setup i1 net-1; sync net-1; reconcile i1; teardown i1"; got != want {
		t.Fatalf("calls %q, want %q", got, want)
	}
	if _, err := (&Hook{}).Setup(ctx, "i3", "ten", &runtime.Network{ID: "net-1"}); err == nil || !strings.Contains(err.Error(), "no private networks") {
		t.Fatalf("a network on a host without the overlay: %v", err)
	}
}
