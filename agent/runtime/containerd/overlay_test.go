package containerd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agent/network"
	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/agentapi"
)

// TestPrivateNetwork: a container whose Spec has a private network joins
// the overlay's namespace for it (its address, MTU), the runtime forwards
// the network view to the hook, and the instance's namespace goes with
// the container; a Spec with a network on a host without the overlay is
// refused.
func TestPrivateNetwork(t *testing.T) {
	needNetwork(t)
	// The host: a namespace of its own with an underlay address on a
	// veth (whose peer stays there too).
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	suffix := hex.EncodeToString(b)
	hostNS := "gcrth" + suffix
	for _, args := range [][]string{
		{"netns", "add", hostNS},
		{"-n", hostNS, "link", "add", "d0", "mtu", "1400", "type", "veth", "peer", "name", "d1", "mtu", "1400"},
		{"-n", hostNS, "addr", "add", "10.250.250.1/24", "dev", "d0"},
		{"-n", hostNS, "link", "set", "d0", "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", hostNS).Run() })
	ov, err := network.NewOverlay(t.Context(), network.OverlayConfig{Cloud: "r" + suffix[:5], HostNetns: hostNS,
		Underlay: netip.MustParseAddr("10.250.250.1")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := ov.Destroy(ctx); err != nil {
			t.Error(err)
		}
	})
	rt := newRuntime(t, func(cfg *Config) { cfg.Network = &network.Hook{Driver: ov} })
	n := &runtime.Network{ID: "net-1", VNI: 4242, CIDR: netip.MustParsePrefix("10.0.0.0/16"), Subnet: netip.MustParsePrefix("10.0.1.0/24"),
		Gateway: netip.MustParseAddr("10.0.1.1"), Addr: netip.MustParseAddr("10.0.1.10"), MAC: "02:00:0a:00:01:0a"}
	id := newID(t)
	if err := rt.Start(t.Context(), runtime.Spec{InstanceID: id, TenantID: "ten-a", Grace: grace, Network: n,
		Command: sh("cat /sys/class/net/eth0/mtu; echo ready; exec sleep 60")}); err != nil {
		t.Fatal(err)
	}
	waitLog(t, rt, id, "ready")
	if a, ok := rt.Address(id); !ok || a != n.Addr {
		t.Fatalf("address %v, %v; want %v", a, ok, n.Addr)
	}
	out, _, err := rt.Logs(id, 0)
	if err != nil || !strings.HasPrefix(string(out), "1350\n") {
		t.Fatalf("the container's eth0 MTU: %q, %v; want 1350 (the underlay's 1400 less 50)", out, err)
	}
	if err := rt.SyncNetworks(t.Context(), &agentapi.NetworkView{Version: "1", Networks: []agentapi.HostNetwork{{ID: "net-1", VNI: 4242,
		CIDR: "10.0.0.0/16", Endpoints: []agentapi.Endpoint{{InstanceID: "i-far", Address: "10.0.1.20", Underlay: "10.250.250.2"}}}}}); err != nil {
		t.Fatal(err)
	}
	if err := rt.Stop(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if got := ov.Instances(); len(got) != 0 {
		t.Fatalf("the overlay still has %v after the container exited", got)
	}
	if _, err := os.Stat(ov.NetnsPath(id)); err == nil {
		t.Fatal("the instance's namespace is left")
	}
	// A network on a host without the overlay: refused, nothing left.
	legacy := newRuntime(t, func(cfg *Config) { cfg.Network = &network.Hook{} })
	if err := legacy.Start(t.Context(), runtime.Spec{InstanceID: newID(t), TenantID: "ten-a", Grace: grace, Network: n,
		Command: sh("exec sleep 60")}); err == nil || !strings.Contains(err.Error(), "carries no private networks") {
		t.Fatalf("a private network without the overlay: %v", err)
	}
}
