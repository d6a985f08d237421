package agent_test

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/gpucloud/gpucloud/agent"
	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/agent/runtime/process"
	"github.com/gpucloud/gpucloud/agentapi"
)

// netRuntime is the process runtime with a network of its own: it
// records the views the agent hands it (failing the first failSyncs) and
// the Network of each Spec it starts.
type netRuntime struct {
	*process.Runtime
	mu        sync.Mutex
	views     []string // versions
	nets      map[string][]agentapi.HostNetwork
	failSyncs int
	specs     map[string]*runtime.Network
}

func (r *netRuntime) SyncNetworks(ctx context.Context, v *agentapi.NetworkView) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failSyncs > 0 {
		r.failSyncs--
		return errors.New("sync failed")
	}
	r.views = append(r.views, v.Version)
	r.nets[v.Version] = v.Networks
	return nil
}

func (r *netRuntime) Start(ctx context.Context, s runtime.Spec) error {
	r.mu.Lock()
	r.specs[s.InstanceID] = s.Network
	r.mu.Unlock()
	return r.Runtime.Start(ctx, s)
}

func (r *netRuntime) synced(version string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.views) > 0 && r.views[len(r.views)-1] == version
}

var _ agent.NetworkSyncer = (*netRuntime)(nil)

// TestNetworkViewsReachTheRuntime: the agent long-polls the host's
// network view and hands each new version to the runtime, through failed
// calls and failed syncs.
func TestNetworkViewsReachTheRuntime(t *testing.T) {
	var rt *netRuntime
	e := newEnv(t, h100, func(c *agent.Config) {
		rt = &netRuntime{Runtime: c.Runtime.(*process.Runtime), nets: map[string][]agentapi.HostNetwork{}, specs: map[string]*runtime.Network{}}
		c.Runtime = rt
	})
	e.run()
	e.until("the first view", func() bool { return rt.synced("0") })
	net1 := agentapi.HostNetwork{ID: "net-1", VNI: 100, CIDR: "10.0.0.0/16",
		Endpoints: []agentapi.Endpoint{{InstanceID: "i-1", Address: "10.0.1.10", Underlay: "192.0.2.2"}}}
	e.srv.SetNetworks(net1)
	e.until("view 1", func() bool { return rt.synced("1") })
	rt.mu.Lock()
	if got := rt.nets["1"]; len(got) != 1 || got[0].ID != "net-1" || got[0].Endpoints[0].Underlay != "192.0.2.2" {
		t.Fatalf("view 1: %+v", got)
	}
	rt.mu.Unlock()

	e.srv.FailNext("Networks", 2, errors.New("server down"))
	e.srv.SetNetworks()
	e.until("view 2, after failed calls", func() bool { return rt.synced("2") })

	rt.mu.Lock()
	rt.failSyncs = 2
	rt.mu.Unlock()
	e.srv.SetNetworks(net1)
	e.until("view 3, after failed syncs", func() bool { return rt.synced("3") })
}

// TestAssignmentNetworkReachesSpec: an assignment's network becomes the
// Spec's, and one the agent cannot read fails the instance.
func TestAssignmentNetworkReachesSpec(t *testing.T) {
	var rt *netRuntime
	e := newEnv(t, h100, func(c *agent.Config) {
		rt = &netRuntime{Runtime: c.Runtime.(*process.Runtime), nets: map[string][]agentapi.HostNetwork{}, specs: map[string]*runtime.Network{}}
		c.Runtime = rt
		c.Underlay = netip.MustParseAddr("192.0.2.7")
		c.UnderlayMTU = 9000
	})
	good := e.assignment("i-net", whole(e.host.ID(), 0), serveScript)
	good.Network = &agentapi.InstanceNetwork{NetworkID: "net-1", NetworkName: "prod", VNI: 100, CIDR: "10.0.0.0/16",
		SubnetID: "sub-1", SubnetCIDR: "10.0.1.0/24", Gateway: "10.0.1.1", Address: "10.0.1.10", MAC: "02:00:0a:00:01:0a",
		SecurityGroups: []string{"sg-1"}, DNSNames: []string{"i-net.internal"}, PublicAddress: "203.0.113.9"}
	bad := e.assignment("i-badnet", whole(e.host.ID(), 1), serveScript)
	bad.Network = &agentapi.InstanceNetwork{NetworkID: "net-1", VNI: 100, CIDR: "10.0.0.0/16", SubnetCIDR: "10.0.1.0/24",
		Gateway: "10.0.1.1", Address: "10.0.1.999", MAC: "02:00:0a:00:01:0b"}
	e.assign(good, bad)
	e.untilPhase("i-net", agentapi.PhaseRunning)
	e.untilPhase("i-badnet", agentapi.PhaseFailed)
	if r := e.lastReport("i-badnet"); !strings.Contains(r.Message, `address "10.0.1.999"`) {
		t.Errorf("failed report %+v", r)
	}
	rt.mu.Lock()
	n := rt.specs["i-net"]
	rt.mu.Unlock()
	want := runtime.Network{ID: "net-1", Name: "prod", VNI: 100, CIDR: netip.MustParsePrefix("10.0.0.0/16"),
		Subnet: netip.MustParsePrefix("10.0.1.0/24"), Gateway: netip.MustParseAddr("10.0.1.1"), Addr: netip.MustParseAddr("10.0.1.10"),
		MAC: "02:00:0a:00:01:0a", SecurityGroups: []string{"sg-1"}, DNSNames: []string{"i-net.internal"},
		Public: netip.MustParseAddr("203.0.113.9")}
	if n == nil || n.ID != want.ID || n.Name != want.Name || n.VNI != want.VNI || n.CIDR != want.CIDR || n.Subnet != want.Subnet ||
		n.Gateway != want.Gateway || n.Addr != want.Addr || n.MAC != want.MAC || n.Public != want.Public || strings.Join(n.SecurityGroups, ",") != "sg-1" ||
		strings.Join(n.DNSNames, ",") != "i-net.internal" {
		t.Fatalf("Spec.Network %+v, want %+v", n, want)
	}
	// The inventory carries the underlay.
	if err := e.ag.Heartbeat(t.Context()); err != nil {
		t.Fatal(err)
	}
	hb := e.srv.Heartbeats()[0]
	if hb.Inventory == nil || hb.Inventory.Host.Underlay != "192.0.2.7" || hb.Inventory.Host.MTU != 9000 {
		t.Fatalf("inventory %+v", hb.Inventory)
	}
}
