//go:build unix

package process

import (
	"testing"

	"github.com/gpucloud/gpucloud/agent/runtime"
)

// TestAddress: a running workload is reached at 127.0.0.1, the host's
// loopback it shares; an unknown or exited one has no address.
func TestAddress(t *testing.T) {
	rt := New(t.TempDir())
	if a, ok := rt.Address("addr-1"); ok {
		t.Fatalf("unknown instance: address %s", a)
	}
	if err := rt.Start(t.Context(), runtime.Spec{InstanceID: "addr-1", Command: sh("echo ready; sleep 30"), Grace: grace}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Stop(t.Context(), "addr-1") })
	waitLog(t, rt, "addr-1", "ready")
	if a, ok := rt.Address("addr-1"); !ok || a.String() != "127.0.0.1" {
		t.Fatalf("running instance: address %s, %v; want 127.0.0.1", a, ok)
	}
	if err := rt.Stop(t.Context(), "addr-1"); err != nil {
		t.Fatal(err)
	}
	if a, ok := rt.Address("addr-1"); ok {
		t.Fatalf("stopped instance: address %s", a)
	}
}
