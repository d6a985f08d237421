package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agent"
	"github.com/gpucloud/gpucloud/agent/gpu/sim"
	"github.com/gpucloud/gpucloud/agent/network"
	"github.com/gpucloud/gpucloud/agent/network/fabric"
	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
)

// The private networks' environment (issue 19), as `gpucloud up` builds
// it: the hosts of a cluster each live in a network namespace of their own
// on a fabric (agent/network/fabric), and each host's containerd runtime
// puts its instances on the kernel overlay (network.Overlay) of its
// namespace, through network.Hook; each agent reports its underlay address
// so that the server can hand it to the other hosts. The containers run
// on the test's private containerd (containerHost).

// netEnv is one cloud's fabric and the overlays and runtimes of its hosts.
// It lives as long as the (sub)test that made it: the overlays of two
// clouds with the same VNIs cannot share a host namespace, and each store's
// cloud numbers its networks from the start.
type netEnv struct {
	ch    *containerHost
	cloud string
	fab   *fabric.Fabric

	mu sync.Mutex
	// hosts are the fabric's hosts by simulated host ID, in the order
	// their runtimes were made.
	hosts map[string]fabric.Host
	ovs   []*network.Overlay
	rts   []*trackingContainers
}

// newNetEnv makes a fabric of n hosts for one cloud, named from an
// identity of its own ("n" and five random hex digits), removed with
// everything on it when t ends: after the cluster's cleanup has stopped
// the agents and the workloads, since newNetEnv is called before the
// cluster starts.
func newNetEnv(t *testing.T, ch *containerHost, n int) *netEnv {
	t.Helper()
	cloudID := fmt.Sprintf("n%05x", rand.Uint32N(1<<20))
	fab, err := fabric.New(t.Context(), fabric.Config{Cloud: cloudID, Hosts: n, Log: logger()})
	if err != nil {
		t.Fatalf("the hosts' fabric: %v", err)
	}
	e := &netEnv{ch: ch, cloud: cloudID, fab: fab, hosts: map[string]fabric.Host{}}
	t.Cleanup(e.close)
	return e
}

// runtimeOf is the runtime of the next host of the fabric: containers on
// the private containerd, whose instances join the overlay of the host's
// namespace (startClusterOn's newRuntime).
func (e *netEnv) runtimeOf(t *testing.T, h *sim.Host, dir string) hostRuntime {
	t.Helper()
	e.mu.Lock()
	i := len(e.hosts)
	e.mu.Unlock()
	fhs := e.fab.Hosts()
	if i >= len(fhs) {
		t.Fatalf("host %s: the fabric has only %d hosts", h.ID(), len(fhs))
	}
	fh := fhs[i]
	ov, err := network.NewOverlay(t.Context(), network.OverlayConfig{Cloud: e.cloud, HostNetns: fh.Netns,
		Underlay: fh.Underlay, UnderlayMTU: e.fab.MTU(), Log: logger()})
	if err != nil {
		t.Fatalf("host %s: the overlay: %v", h.ID(), err)
	}
	e.mu.Lock()
	e.ovs = append(e.ovs, ov)
	e.hosts[h.ID()] = fh
	e.mu.Unlock()
	tc := e.ch.containerRuntime(t, h, dir, &network.Hook{Driver: ov})
	e.mu.Lock()
	e.rts = append(e.rts, tc)
	e.mu.Unlock()
	return tc
}

// tuneAgent gives a host's agent its underlay on the fabric, which it
// reports to the server (startClusterOn's tuneAgent, which it calls after
// the host's newRuntime, runtimeOf, has given the host its place).
func (e *netEnv) tuneAgent(cfg *agent.Config) {
	h, ok := cfg.Driver.(*sim.Host)
	if !ok {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if fh, ok := e.hosts[h.ID()]; ok {
		cfg.Underlay, cfg.UnderlayMTU = fh.Underlay, e.fab.MTU()
	}
}

// close removes the containers, the overlays and the fabric, in that
// order.
func (e *netEnv) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, tc := range e.rts {
		closeRuntime(ctx, tc)
	}
	for _, ov := range e.ovs {
		_ = ov.Destroy(ctx)
	}
	_ = e.fab.Close(ctx)
}

// netHosts are the two hosts of the network tests: one H100 each, in one
// zone, told apart by the label e2e-host (a or b), which an instance's
// placement selects.
var netHosts = []sim.Spec{
	{ID: "net-a", Zone: "net-zone", Labels: map[string]string{"e2e-host": "a"}, GPUs: sim.GPUSpec{Model: "H100", Count: 2}},
	{ID: "net-b", Zone: "net-zone", Labels: map[string]string{"e2e-host": "b"}, GPUs: sim.GPUSpec{Model: "H100", Count: 2}},
}

// startNetCluster starts a cluster on db whose two hosts (netHosts) are
// on a fabric with the overlay, as under gpucloud up.
func startNetCluster(t *testing.T, ch *containerHost, db string) *cluster {
	t.Helper()
	return startNetClusterOf(t, ch, db, netHosts...)
}

// startNetClusterOf is startNetCluster with hosts of the caller's.
func startNetClusterOf(t *testing.T, ch *containerHost, db string, specs ...sim.Spec) *cluster {
	t.Helper()
	e := newNetEnv(t, ch, len(specs))
	c := startClusterOn(t, db, nil, e.tuneAgent, e.runtimeOf, specs...)
	// Every host reports its underlay before an instance is placed.
	c.until("the hosts to report their underlay addresses", func() (bool, string) {
		hs := c.hostSpecs()
		for _, s := range specs {
			h := hs[s.ID]
			if h == nil || h.Spec.Underlay != e.hosts[s.ID].Underlay.String() {
				return false, fmt.Sprintf("host %s: %+v", s.ID, h)
			}
		}
		return true, ""
	})
	return c
}

// tenantNet is a tenant's network, subnet and group for the tests.
type tenantNet struct {
	cl     *client.Client
	net    *cloud.Network
	subnet *cloud.Subnet
	group  *cloud.SecurityGroup
	// rule is the group's rule that lets its members in on tcp port.
	rule *cloud.SecurityRule
}

// netPort is the port the network tests' listeners serve.
const netPort = 7000

// makeTenantNet makes, as cl's tenant, a network name with cidr, a subnet
// of it (subnet) in the hosts' zone, and a group "app" that lets in tcp
// netPort from its own members and, by default, lets everything out.
func (c *cluster) makeTenantNet(cl *client.Client, name, cidr, subnet string) *tenantNet {
	c.t.Helper()
	ctx := c.t.Context()
	n, err := cl.CreateNetwork(ctx, api.CreateNetworkRequest{Name: name, CIDR: cidr}, "")
	if err != nil {
		c.t.Fatalf("create network %s: %v", name, err)
	}
	s, err := cl.CreateSubnet(ctx, api.CreateSubnetRequest{Network: n.ID, Name: "main", CIDR: subnet, Zone: netHosts[0].Zone}, "")
	if err != nil {
		c.t.Fatalf("create subnet %s: %v", subnet, err)
	}
	g, err := cl.CreateSecurityGroup(ctx, api.CreateSecurityGroupRequest{Network: n.ID, Name: "app"}, "")
	if err != nil {
		c.t.Fatalf("create security group: %v", err)
	}
	g, err = cl.Authorize(ctx, g.ID, selfRule(g.ID), g.Version)
	if err != nil {
		c.t.Fatalf("authorize tcp %d from the group: %v", netPort, err)
	}
	tn := &tenantNet{cl: cl, net: n, subnet: s, group: g}
	for i, r := range g.Ingress {
		if r.Protocol == cloud.ProtocolTCP && r.FromPort == netPort && r.GroupID == g.ID {
			tn.rule = &g.Ingress[i]
		}
	}
	if tn.rule == nil || len(g.Egress) == 0 {
		c.t.Fatalf("group %s after authorize: ingress %+v, egress %+v; want the rule and the default egress", g.ID, g.Ingress, g.Egress)
	}
	return tn
}

// selfRule lets group's members in on tcp netPort.
func selfRule(group string) api.AuthorizeRequest {
	return api.AuthorizeRequest{Direction: api.Ingress, Protocol: cloud.ProtocolTCP, FromPort: netPort, ToPort: netPort, Group: group}
}

// run creates an instance named name of the tenant's network, in its
// subnet and group, on the host labelled e2e-host=host, running script
// with env, and returns it as created (its private address is given at
// create).
func (tn *tenantNet) run(c *cluster, name, host, script string, env map[string]string) *cloud.Instance {
	c.t.Helper()
	in, err := tn.cl.CreateInstance(c.t.Context(), api.CreateInstanceRequest{Name: name, Offering: "h100.1x",
		Labels: []string{"e2e-host=" + host}, Subnet: tn.subnet.ID, SecurityGroups: []string{tn.group.ID},
		Env: env, Command: []string{"/bin/sh", "-c", script}}, "")
	if err != nil {
		c.t.Fatalf("create instance %s: %v", name, err)
	}
	if in.PrivateAddress == "" {
		c.t.Fatalf("instance %s has no private address at create: %+v", name, in)
	}
	return in
}

// serveScript is a workload that serves body over HTTP on each port (a
// busybox httpd each, in the background), prints "serving" and waits.
func serveScript(body string, ports ...int) string {
	var b strings.Builder
	b.WriteString("mkdir -p /work/www && echo '" + body + "' > /work/www/index.html\n")
	for _, p := range ports {
		b.WriteString("httpd -p " + strconv.Itoa(p) + " -h /work/www\n")
	}
	b.WriteString("echo serving; exec sleep 600\n")
	return b.String()
}

// fetchFn is the shell function get HOST PORT of the client scripts: it
// prints what HOST:PORT serves, or FAIL when the connection fails or
// takes more than two seconds.
const fetchFn = `get() { r=$(timeout 2 wget -q -O - "http://$1:$2/" 2>/dev/null) && echo "$r" || echo FAIL; }
`

// waitRunningOn waits until the instance runs, and checks that it runs on
// the host with the given ID.
func (c *cluster) waitRunningOn(cl *client.Client, id, host string) *cloud.Instance {
	c.t.Helper()
	in := c.waitState(cl, id, cloud.Running)
	if in.HostID != host {
		c.t.Fatalf("instance %s runs on %s, want %s", id, in.HostID, host)
	}
	return in
}
