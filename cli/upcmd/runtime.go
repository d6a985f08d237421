package upcmd

import (
	"context"
	"errors"
	"fmt"
	"github.com/gpucloud/gpucloud/internal/imageref"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"sync"
	"time"

	"github.com/gpucloud/gpucloud/agent/gpu"
	"github.com/gpucloud/gpucloud/agent/gpu/sim"
	"github.com/gpucloud/gpucloud/agent/network"
	"github.com/gpucloud/gpucloud/agent/network/fabric"
	"github.com/gpucloud/gpucloud/agent/runtime/containerd"
	"github.com/gpucloud/gpucloud/agent/runtime/process"
	"github.com/gpucloud/gpucloud/cli/agentcmd"
)

// Runtimes `gpucloud up --runtime` chooses from.
const (
	upRuntimeAuto       = "auto"
	upRuntimeContainerd = "containerd"
	upRuntimeProcess    = "process"
)

// upDaemonDir is where, under its data directory, `up` keeps its private
// containerd (root, state, socket, log): short, since a unix socket path
// holds at most 107 bytes.
const upDaemonDir = "ctr"

// upRuntimes runs the workloads of `gpucloud up`'s hosts: containers on a
// private containerd (a runtime per host, each with its own directories
// and device nodes), or plain processes.
type upRuntimes struct {
	// kind is upRuntimeContainerd or upRuntimeProcess; why says, for
	// processes chosen by auto, why containers could not run.
	kind, why string
	daemon    *containerd.Daemon
	log       *slog.Logger
	// limits scales the simulated hosts' container limits to this
	// machine (set before the hosts' runtimes are made; zero: none).
	limits limitScale
	// allow are the registries the hosts pull from although their
	// addresses are internal (--allow-registry, as the server's).
	allow imageref.AllowList

	mu     sync.Mutex
	closed bool
	ctrs   []*containerd.Runtime
	// nets are the simulated hosts' instance networks, one each (own
	// nftables tables, interface prefix and subnet), destroyed at close.
	nets []*network.Network

	// cloud is the cloud's short identity (upCloudID), which the fabric's
	// names derive from; fabricPrefix is --fabric-prefix (unset: the
	// fabric chooses).
	cloud        string
	fabricPrefix netip.Prefix
	// fab is the container hosts' fabric (fabric.go), removed at close
	// after the instance networks.
	fab *fabric.Fabric
	// pubs routes the public addresses the hosts serve to them over the
	// fabric (fabric.go); nil without a fabric.
	pubs *publicRoutes
	// ovs are the container hosts' overlays (private networks), one per
	// host on the fabric, destroyed at close before the fabric; underlays
	// are their hosts' underlay addresses and MTUs, by host directory,
	// which their agents report.
	ovs       []*network.Overlay
	underlays map[string]hostUnderlay
}

// hostUnderlay is a host's place on the fabric, as its agent reports it.
type hostUnderlay struct {
	addr netip.Addr
	mtu  int
}

// underlay is the underlay of the host whose agent keeps its files in dir
// (none without a fabric).
func (u *upRuntimes) underlay(dir string) hostUnderlay {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.underlays[dir]
}

// upNetwork is the instance network of up's i-th host: simulated hosts
// share one machine, so each has its own nftables tables, interface
// names and a /16 of 10.88.0.0/13, and one host's reconcile never touches
// another's instances.
func upNetwork(ctx context.Context, i int, log *slog.Logger) (*network.Network, error) {
	if i >= 8 {
		return nil, fmt.Errorf("up runs at most 8 container hosts with instance networks, not %d", i+1)
	}
	if i > 0 {
		// The hosts share one machine: its warnings (IPv4 forwarding
		// off) are said once, by the first host's network.
		log = slog.New(minLevel{Handler: log.Handler(), min: slog.LevelError})
	}
	return network.New(ctx, network.Config{
		Subnet:   netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(88 + i), 0, 0}), 16),
		Table:    fmt.Sprintf("gcup%d", i),
		IfPrefix: fmt.Sprintf("gu%d", i),
		Log:      log,
	})
}

// minLevel is a log handler that drops records below min.
type minLevel struct {
	slog.Handler
	min slog.Level
}

func (m minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= m.min && m.Handler.Enabled(ctx, l)
}

// ContainerdMissing says why this machine cannot run `up`'s workloads in
// containers, or "" when it has all it takes: Linux, root, and Debian's
// containerd, runc, tini and busybox-static.
func ContainerdMissing() string {
	if goruntime.GOOS != "linux" {
		return "containers need Linux"
	}
	if os.Geteuid() != 0 {
		return "not running as root (containers need root)"
	}
	// Found in PATH, as containerd finds its shim and runc.
	look := func(name string) bool {
		_, err := exec.LookPath(name)
		return err == nil
	}
	switch {
	case !look("containerd"):
		return "containerd is not installed (or not in PATH)"
	case !look("containerd-shim-runc-v2"):
		return "containerd-shim-runc-v2 is not installed (Debian package containerd)"
	case !look("runc"):
		return "runc is not installed (or not in PATH)"
	}
	if why := network.Missing(); why != "" {
		return why + "; the instance network needs it"
	}
	init := false
	for _, p := range containerd.DefaultInits {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			init = true
		}
	}
	if !init {
		return "tini-static is not installed (Debian package tini)"
	}
	if _, err := os.Stat(containerd.DefaultBusybox); err != nil {
		return "busybox-static is not installed (the default image is made from it)"
	}
	return ""
}

// startUpRuntimes chooses how `up` runs workloads. auto runs containers
// when ContainerdMissing finds nothing missing, the private containerd
// starts (under dataDir/ctr) and has the default image (built from
// busybox-static when missing), and plain processes otherwise, with why;
// containerd insists (an error says what is missing); process never
// tries. The daemon is not tied to ctx: close stops it, after the
// containers are stopped.
func startUpRuntimes(ctx context.Context, mode, dataDir string, log *slog.Logger) (*upRuntimes, error) {
	u := &upRuntimes{kind: upRuntimeProcess, log: log}
	switch mode {
	case upRuntimeProcess:
		return u, nil
	case upRuntimeAuto, upRuntimeContainerd:
	default:
		return nil, fmt.Errorf("--runtime %q: want auto, containerd or process", mode)
	}
	why := ContainerdMissing()
	if why == "" {
		// The daemon outlives a Ctrl-C until the containers are stopped:
		// its context is not the command's.
		d, err := containerd.StartDaemon(context.WithoutCancel(ctx), filepath.Join(dataDir, upDaemonDir))
		if err == nil {
			if err = baseImage(ctx, d, dataDir); err == nil {
				u.kind, u.daemon = upRuntimeContainerd, d
				return u, nil
			}
			_ = d.Close()
		}
		why = err.Error()
	}
	if mode == upRuntimeContainerd {
		return nil, fmt.Errorf("--runtime containerd: %s (Debian: %s; or --runtime process)", why, containerHint())
	}
	u.why = why
	return u, nil
}

// forHost returns the runtime of the host whose agent keeps its files in
// dir. A containerd runtime keeps its instances' directories under
// dir/runtime, labels its containers with the host (dir's name) so that
// the runtimes of other hosts on the daemon leave them alone, and for a
// simulated host sees the fake device nodes made in dir/dev, and starts
// workloads with their limits scaled by u.limits.
func (u *upRuntimes) forHost(ctx context.Context, dir string, drv gpu.Driver) (agentcmd.Runtime, error) {
	if u.kind == upRuntimeProcess {
		return process.New(filepath.Join(dir, "runtime")).SetLog(u.log), nil
	}
	u.mu.Lock()
	i := len(u.nets)
	u.mu.Unlock()
	net, err := upNetwork(ctx, i, u.log)
	if err != nil {
		return nil, fmt.Errorf("the instance network: %w", err)
	}
	u.mu.Lock()
	u.nets = append(u.nets, net)
	u.mu.Unlock()
	// Instances on private networks get the overlay of the host's
	// namespace on the fabric; the others the per-tenant network.
	hook := &network.Hook{Legacy: net}
	if ns, addr := u.hostNetwork(i); addr.IsValid() {
		ovCfg := network.OverlayConfig{Cloud: u.cloud, HostNetns: ns, Underlay: addr, UnderlayMTU: u.fabricMTU(), Log: u.log}
		u.mu.Lock()
		if u.pubs != nil {
			ovCfg.OnPublic = u.pubs.onPublic(i)
		}
		u.mu.Unlock()
		ov, err := network.NewOverlay(ctx, ovCfg)
		if err != nil {
			return nil, fmt.Errorf("the private networks' overlay: %w", err)
		}
		u.mu.Lock()
		u.ovs = append(u.ovs, ov)
		if u.underlays == nil {
			u.underlays = map[string]hostUnderlay{}
		}
		u.underlays[dir] = hostUnderlay{addr: addr, mtu: ov.MTU() + network.OverlayOverhead}
		u.mu.Unlock()
		hook.Driver = ov
	}
	cfg := containerd.Config{Socket: u.daemon.Socket(), BaseDir: filepath.Join(dir, "runtime"), Host: filepath.Base(dir), Log: u.log,
		Network: hook, AllowRegistries: u.allow}
	if h, ok := drv.(*sim.Host); ok {
		cfg.DevDir = filepath.Join(dir, "dev")
		cfg.MIGMinors = filepath.Join(cfg.DevDir, sim.MIGMinorsFile)
		if err := h.MakeDeviceNodes(cfg.DevDir); err != nil {
			return nil, fmt.Errorf("the simulated host's device nodes: %w", err)
		}
	}
	rt, err := containerd.New(ctx, cfg)
	if err != nil {
		return nil, err
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		_ = rt.Close()
		return nil, errors.New("up is shutting down")
	}
	u.ctrs = append(u.ctrs, rt)
	if _, simulated := drv.(*sim.Host); simulated && u.limits.scales() {
		return scaledRuntime{containerRuntime: rt, limits: u.limits}, nil
	}
	return rt, nil
}

// baseImage puts the default image on daemon d, for every host's runtime
// (one containerd namespace holds the images of all).
func baseImage(ctx context.Context, d *containerd.Daemon, dataDir string) error {
	rt, err := containerd.New(ctx, containerd.Config{Socket: d.Socket(), BaseDir: filepath.Join(dataDir, upDaemonDir, "base"),
		Host: "gpucloud-up-image"})
	if err != nil {
		return err
	}
	defer rt.Close()
	if err := rt.EnsureBaseImage(ctx, ""); err != nil {
		return fmt.Errorf("the default image %s: %w", containerd.BaseImage, err)
	}
	return nil
}

// describe is the line `up` prints about its workloads.
func (u *upRuntimes) describe() string {
	switch {
	case u.kind == upRuntimeContainerd:
		s := fmt.Sprintf("workloads: containers on a private containerd (socket %s; default image %s)",
			u.daemon.Socket(), containerd.BaseImage)
		if l := u.limits.describe(); l != "" {
			s += "\n" + l
		}
		if f := u.describeFabric(); f != "" {
			s += "\n" + f
		}
		return s
	case u.why != "":
		return "warning: workloads run as plain processes, NOT isolated from each other or from gpucloud: " + u.why +
			" (for containers: " + containerHint() + ")"
	}
	return "workloads: plain processes (--runtime process), not isolated: a single-tenant development mode"
}

// containerHint says what containers need on Debian: the packages, and
// root only to one who is not.
func containerHint() string {
	h := "apt-get install containerd runc tini busybox-static iproute2 nftables"
	if os.Geteuid() != 0 {
		h += ", and run up as root"
	}
	return h
}

// close closes the containerd runtimes, removes the instance networks and
// the hosts' fabric, and stops the daemon; the containers must have been
// stopped (StopAll) before. It is idempotent.
func (u *upRuntimes) close() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		return
	}
	u.closed = true
	for _, rt := range u.ctrs {
		_ = rt.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, o := range u.ovs {
		if err := o.Destroy(ctx); err != nil {
			u.log.Warn("up: remove a host's private networks", "err", err)
		}
	}
	for _, n := range u.nets {
		if err := n.Destroy(ctx); err != nil {
			u.log.Warn("up: remove an instance network", "err", err)
		}
	}
	u.closeFabric(ctx)
	if u.daemon != nil {
		_ = u.daemon.Close()
	}
}

// isContainers reports whether rt runs containers: each volume is then a
// filesystem of its size (up runs containers as root).
func isContainers(rt agentcmd.Runtime) bool {
	switch rt.(type) {
	case *containerd.Runtime, scaledRuntime:
		// scaledRuntime is the containerd runtime of a simulated host
		// whose limits up scales to the machine: missing it here once
		// made every volume and instance store under up a plain
		// directory, its size not enforced.
		return true
	}
	return false
}
