package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agent/gpu/sim"
	"github.com/gpucloud/gpucloud/agent/network"
	"github.com/gpucloud/gpucloud/agent/network/fabric"
	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/agent/runtime/containerd"
	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/store/pgtest"
)

// trackingContainers is the containerd runtime with a tracker.
type trackingContainers struct {
	*containerd.Runtime
	tracker
}

func (r *trackingContainers) Start(ctx context.Context, s runtime.Spec) error {
	return r.record(s.InstanceID, r.Runtime.Start(ctx, s))
}

func (r *trackingContainers) running() []string { return r.runningOf(r.Runtime) }

// containerHost is a private containerd for a test's clusters, with the
// base image and the e2e image imported, in a containerd namespace of the
// test's own.
type containerHost struct {
	daemon *containerd.Daemon
	ns     string

	mu   sync.Mutex
	rts  []*trackingContainers
	nets []*network.Network
	// ovs and fabs are the hosts' overlays and their one-host fabrics.
	ovs  []*network.Overlay
	fabs []*fabric.Fabric
}

// e2eImage is the image the end-to-end tests build: the base image plus a
// marker /etc/os-release, which the base image lacks.
const (
	e2eImage     = "docker.io/gpucloud/e2e:1"
	e2eOSRelease = "ID=gpucloud-e2e\nNAME=\"gpucloud end-to-end image\"\n"
)

// nsSeq numbers the containerd namespaces of one test process.
var nsSeq atomic.Int64

// startContainerHost starts a private containerd for the test (stopped
// when it ends) and imports the images. Without root, containerd, runc,
// tini, busybox-static, iproute2 or nftables the test fails in CI (CI
// set) and skips elsewhere, saying why.
func startContainerHost(t *testing.T) *containerHost {
	t.Helper()
	if why := containersMissing(); why != "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("the container tests must run in CI: %s", why)
		}
		t.Skipf("skipping the container tests: %s", why)
	}
	// A short directory: containerd's socket path has at most 107 bytes.
	dir, err := os.MkdirTemp("", "gce2e")
	if err != nil {
		t.Fatal(err)
	}
	bin, err := exec.LookPath("containerd") // the one containersMissing found
	if err != nil {
		t.Fatal(err)
	}
	d, err := containerd.StartDaemon(context.Background(), filepath.Join(dir, "d"), containerd.DaemonConfig{Binary: bin})
	if err != nil {
		_ = os.RemoveAll(dir)
		t.Fatalf("start containerd: %v", err)
	}
	ch := &containerHost{daemon: d, ns: fmt.Sprintf("gpucloud-e2e-%d-%d", os.Getpid(), nsSeq.Add(1))}
	t.Cleanup(func() {
		ch.closeRuntimes()
		_ = d.Close()
		_ = os.RemoveAll(dir)
		// The namespace's cgroup parents, empty once its containers are gone.
		ds, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", ch.ns))
		for _, p := range append(ds, filepath.Join("/sys/fs/cgroup", ch.ns)) {
			_ = os.Remove(p)
		}
	})
	files, err := containerd.BaseImageFiles("")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, containerd.File{Path: "/etc/os-release", Mode: 0o644, Data: []byte(e2eOSRelease)})
	var img bytes.Buffer
	if err := containerd.WriteImage(&img, e2eImage, files, containerd.ImageConfig{}); err != nil {
		t.Fatal(err)
	}
	tarball := filepath.Join(dir, "e2e.tar")
	if err := os.WriteFile(tarball, img.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := containerd.ImportImageFileTo(t.Context(), d.Socket(), ch.ns, "", tarball); err != nil {
		t.Fatal(err)
	}
	return ch
}

// containersMissing says why this machine cannot run containers, or "".
func containersMissing() string {
	if os.Geteuid() != 0 {
		return "containers need root"
	}
	// The programs, found as .ci/tools.sh checks for them: by name in
	// PATH (where containerd finds its shim and runc too), and busybox
	// statically linked at the path the base image is made from.
	for _, tool := range []struct{ name, pkg string }{
		{"containerd", "containerd"}, {"containerd-shim-runc-v2", "containerd"}, {"runc", "runc"}, {"tini-static", "tini"},
	} {
		if _, err := exec.LookPath(tool.name); err != nil {
			return fmt.Sprintf("%s is not in PATH (Debian package %s; .ci/tools.sh installs it)", tool.name, tool.pkg)
		}
	}
	if _, err := containerd.BaseImageFiles(""); err != nil {
		return err.Error() + "; .ci/tools.sh installs it"
	}
	// The hosts' fabric and the instances' networks.
	if why := network.Missing(); why != "" {
		return why + "; .ci/tools.sh installs it"
	}
	return ""
}

// runtimeOf makes a host's containerd runtime: its own directories, the
// simulated host's fake device nodes, a host label of its own (hosts share
// the daemon and namespace, as under gpucloud up, and so do the clusters
// of one test), no pulls (the images are imported), and the base image as
// the default. The runtimes are closed when the test that started the
// daemon ends, after its clusters have stopped their workloads.
func (ch *containerHost) runtimeOf(t *testing.T, h *sim.Host, dir string) hostRuntime {
	t.Helper()
	// The host's instance network: tables, interfaces and a subnet of its
	// own, so that hosts and clusters sharing this machine stay apart. The
	// subnets are e2e's range, 10.100-139: see agent/network's freeSubnet.
	seq := nsSeq.Add(1)
	net, err := network.New(t.Context(), network.Config{
		Subnet:   netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(100 + seq%40), 0, 0}), 16),
		Table:    fmt.Sprintf("gce%d", seq%1000),
		IfPrefix: fmt.Sprintf("e%d", seq%1000),
	})
	if err != nil {
		t.Fatalf("instance network: %v", err)
	}
	ch.mu.Lock()
	ch.nets = append(ch.nets, net)
	ch.mu.Unlock()
	// Instances on private networks (every new one) get the overlay, in a
	// host namespace of the host's own on a one-host fabric: the
	// identity, and so every name, is this host's.
	cloud := fmt.Sprintf("e%05d", (os.Getpid()*31+int(seq))%100000)
	fab, err := fabric.New(t.Context(), fabric.Config{Cloud: cloud, Hosts: 1})
	if err != nil {
		t.Fatalf("fabric: %v", err)
	}
	ch.mu.Lock()
	ch.fabs = append(ch.fabs, fab)
	ch.mu.Unlock()
	fh := fab.Hosts()[0]
	ov, err := network.NewOverlay(t.Context(), network.OverlayConfig{Cloud: cloud, HostNetns: fh.Netns, Underlay: fh.Underlay, UnderlayMTU: fab.MTU()})
	if err != nil {
		t.Fatalf("overlay: %v", err)
	}
	ch.mu.Lock()
	ch.ovs = append(ch.ovs, ov)
	ch.mu.Unlock()
	tc := ch.containerRuntime(t, h, dir, &network.Hook{Driver: ov, Legacy: net})
	ch.mu.Lock()
	ch.rts = append(ch.rts, tc)
	ch.mu.Unlock()
	return tc
}

// containerRuntime makes a host's containerd runtime on the daemon, with
// hook as its instance network: its own directories, the simulated
// host's fake device nodes, a host label of its own, no pulls, and the
// base image as the default, as runtimeOf describes. The caller closes
// it (closeRuntime).
func (ch *containerHost) containerRuntime(t *testing.T, h *sim.Host, dir string, hook containerd.NetworkHook) *trackingContainers {
	t.Helper()
	dev := filepath.Join(dir, "dev")
	if err := h.MakeDeviceNodes(dev); err != nil {
		t.Fatal(err)
	}
	rt, err := containerd.New(t.Context(), containerd.Config{Socket: ch.daemon.Socket(), Namespace: ch.ns, Network: hook,
		BaseDir: filepath.Join(dir, "runtime"), Host: fmt.Sprintf("%s-%d", h.ID(), nsSeq.Add(1)), NoPull: true,
		DevDir: dev, MIGMinors: filepath.Join(dev, sim.MIGMinorsFile)})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.EnsureBaseImage(t.Context(), ""); err != nil {
		_ = rt.Close()
		t.Fatal(err)
	}
	return &trackingContainers{Runtime: rt}
}

// closeRuntimes stops and removes every container the runtimes started
// and closes them.
func (ch *containerHost) closeRuntimes() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ch.mu.Lock()
	defer ch.mu.Unlock()
	for _, tc := range ch.rts {
		closeRuntime(ctx, tc)
	}
	ch.rts = nil
	for _, n := range ch.nets {
		_ = n.Destroy(ctx)
	}
	ch.nets = nil
	for _, ov := range ch.ovs {
		_ = ov.Destroy(ctx)
	}
	ch.ovs = nil
	for _, f := range ch.fabs {
		_ = f.Close(ctx)
	}
	ch.fabs = nil
}

// closeRuntime stops and removes every container tc started, and closes
// it.
func closeRuntime(ctx context.Context, tc *trackingContainers) {
	_ = tc.StopAll(ctx)
	tc.mu.Lock()
	ids := slices.Clone(tc.started)
	tc.mu.Unlock()
	for _, id := range ids {
		_ = tc.Remove(id)
	}
	_ = tc.Close()
}

// TestInstanceImage runs instances in containers on the containerd
// runtime, each in the image it names: its own image (the marker
// /etc/os-release it carries), the host's default (the busybox base
// image, which has none), or one the host does not have (the instance
// fails, saying so). The output reaches the instance's log through the
// API. On both stores.
func TestInstanceImage(t *testing.T) {
	ch := startContainerHost(t)
	t.Run("sqlite", func(t *testing.T) { testInstanceImage(t, ch, "sqlite://"+filepath.Join(t.TempDir(), "gpucloud.db")) })
	t.Run("postgres", func(t *testing.T) { testInstanceImage(t, ch, pgtest.URL(t)) })
}

func testInstanceImage(t *testing.T, ch *containerHost, db string) {
	spec := sim.Spec{ID: "sim-h100", Zone: "zone-a", GPUs: sim.GPUSpec{Model: "H100", Count: 8}}
	c := startClusterOn(t, db, nil, nil, ch.runtimeOf, spec)
	ctx := t.Context()
	_, alice, _ := c.member("acme", "alice")
	script := "cat /etc/os-release 2>/dev/null || echo 'no os-release'; echo uid=$(id -u); echo cuda=$CUDA_VISIBLE_DEVICES; echo done; exec sleep 600"

	began := time.Now()
	own, err := alice.CreateInstance(ctx, api.CreateInstanceRequest{Name: "own", Offering: "h100.1x", Image: "gpucloud/e2e:1",
		Command: []string{"/bin/sh", "-c", script}}, "image-own")
	if err != nil {
		t.Fatal(err)
	}
	if own.Image != e2eImage {
		t.Errorf("created with image %q, want the canonical %s", own.Image, e2eImage)
	}
	running := c.waitState(alice, own.ID, cloud.Running)
	t.Logf("create to running in a container: %v", time.Since(began).Round(time.Millisecond))
	out := c.waitLogs(alice, own.ID, "done\n")
	ownUID := workloadUID(out)
	if !strings.Contains(out, e2eOSRelease) || ownUID < containerd.DefaultUIDBase {
		t.Errorf("the workload did not run in its image as a user of its own; output:\n%s", out)
	}
	if d := running.Placement.Devices; len(d) != 1 || !strings.Contains(out, "cuda="+d[0].UUID+"\n") {
		t.Errorf("the workload does not see exactly its GPU; output:\n%s", out)
	}

	def, err := alice.CreateInstance(ctx, api.CreateInstanceRequest{Name: "default", Offering: "h100.1x",
		Command: []string{"/bin/sh", "-c", script}}, "image-default")
	if err != nil {
		t.Fatal(err)
	}
	c.waitState(alice, def.ID, cloud.Running)
	if out := c.waitLogs(alice, def.ID, "done\n"); !strings.HasPrefix(out, "no os-release\nuid=") ||
		workloadUID(out) < containerd.DefaultUIDBase || workloadUID(out) == ownUID {
		t.Errorf("an instance without an image: output %q, want the base image's (no os-release), as a user of its own (not %d)", out, ownUID)
	}

	missing, err := alice.CreateInstance(ctx, api.CreateInstanceRequest{Name: "missing", Offering: "h100.1x",
		Image: "registry.invalid/acme/none:1", Command: []string{"true"}}, "image-missing")
	if err != nil {
		t.Fatal(err)
	}
	var in *cloud.Instance
	c.until("the instance whose image the host lacks to fail", func() (bool, string) {
		in = c.get(alice, missing.ID)
		return in.State == cloud.Failed, fmt.Sprintf("%s (%s)", in.State, in.Reason)
	})
	if !strings.Contains(in.Reason, "registry.invalid/acme/none:1") {
		t.Errorf("reason %q does not name the missing image", in.Reason)
	}

	// Stop: nothing of the container is left running.
	if _, err := alice.StopInstance(ctx, own.ID, 0); err != nil {
		t.Fatal(err)
	}
	c.waitState(alice, own.ID, cloud.Stopped)
	if r := c.hosts[spec.ID].rt.running(); len(r) != 1 || r[0] != def.ID {
		t.Errorf("running after the stop: %v, want only %s", r, def.ID)
	}
}

// waitLogs waits until an instance's output, read through the API, holds
// s, and returns it.
func (c *cluster) waitLogs(cl *client.Client, id, s string) string {
	c.t.Helper()
	var out string
	c.until(fmt.Sprintf("the output of %s to contain %s", id, strconv.Quote(s)), func() (bool, string) {
		var b strings.Builder
		var off int64
		for range 100 {
			page, err := cl.InstanceLogs(c.t.Context(), id, off)
			if err != nil {
				return false, err.Error()
			}
			b.WriteString(page.Data)
			if page.Offset == off || page.Data == "" {
				break
			}
			off = page.Offset
		}
		out = b.String()
		return strings.Contains(out, s), strconv.Quote(out)
	})
	return out
}

// workloadUID reads the "uid=N" line a workload printed (0 if none).
func workloadUID(out string) uint32 {
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(l, "uid="); ok {
			n, _ := strconv.ParseUint(v, 10, 32)
			return uint32(n)
		}
	}
	return 0
}
