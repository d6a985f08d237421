package containerd

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpucloud/gpucloud/agent/runtime"
)

// The instance's DNS server inside the container.
//
// As with the metadata endpoint, the runtime serves each instance's DNS
// (Spec.DNS) inside the container's own network namespace, at DNSAddr on
// UDP and TCP: an address it adds to the namespace's loopback interface,
// so that the workload's queries never leave its namespace and no other
// namespace reaches the server. The container's /etc/resolv.conf is a
// file the runtime writes, owned by root and read-only to the workload
// (prepareDNS says where), naming
// DNSAddr as its nameserver and, for an instance on a private network,
// the network's domain as its search list. A new agent serves the DNS of
// an adopted container again when the agent starts the instance again.

// DNSAddr is where a workload reaches its DNS server: the link-local
// address next to the metadata endpoint's, on port 53.
var DNSAddr = netip.AddrPortFrom(netip.AddrFrom4([4]byte{169, 254, 169, 253}), 53)

// ResolvConfPath is where the container's resolv.conf is mounted.
const ResolvConfPath = "/etc/resolv.conf"

// resolvConf is the resolv.conf of a workload whose DNS the runtime
// serves: DNSAddr, and NETWORK.internal as the search list when the
// instance is on a network whose name is a DNS label; ndots:1, so that a
// name with a dot is asked as it is first.
func resolvConf(s runtime.Spec) []byte {
	var b strings.Builder
	b.WriteString("# Written by gpucloud: the instance's DNS server, served by its host's agent.\n")
	b.WriteString("nameserver " + DNSAddr.Addr().String() + "\n")
	if s.Network != nil && isDNSLabel(s.Network.Name) {
		b.WriteString("search " + strings.ToLower(s.Network.Name) + ".internal\n")
	}
	b.WriteString("options ndots:1\n")
	return []byte(b.String())
}

// isDNSLabel reports whether s is a DNS label: 1 to 63 letters, digits
// and hyphens, neither first nor last a hyphen.
func isDNSLabel(s string) bool {
	if len(s) == 0 || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// prepareDNS readies the resolv.conf of a spec with a DNS server; a spec
// without one keeps the image's. On the overlayfs snapshotter the file is
// written into the container's own writable layer once its snapshot
// exists (writeLayerResolvConf), so that the workload's /etc/resolv.conf
// is a file of its root filesystem, and its /proc/self/mountinfo names no
// host path for it. On another snapshotter it is a host file
// (BaseDir/<id>/resolv.conf), placed in lay to be bind-mounted read-only.
func (r *Runtime) prepareDNS(s runtime.Spec, lay *mounts) error {
	if s.DNS == nil {
		return nil
	}
	if r.cfg.Snapshotter == DefaultSnapshotter {
		lay.layerResolvConf = true
		return nil
	}
	dir := filepath.Join(r.cfg.BaseDir, s.InstanceID)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	path := filepath.Join(dir, "resolv.conf")
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, resolvConf(s), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	lay.resolvConf = path
	return nil
}

// writeLayerResolvConf writes the resolv.conf of s, owned by root and
// read-only to others, into the writable layer (the overlay's upper
// directory) of container s's new snapshot, where it hides the image's.
// The layer is new and empty; the writes go through an os.Root of it all
// the same, so that nothing in it can lead them elsewhere on the host.
func (r *Runtime) writeLayerResolvConf(ctx context.Context, s runtime.Spec) error {
	ms, err := r.client.SnapshotService(r.cfg.Snapshotter).Mounts(ctx, s.InstanceID)
	if err != nil {
		return fmt.Errorf("resolv.conf: %w", err)
	}
	dir, err := snapshotDir(ms)
	if err != nil {
		return fmt.Errorf("resolv.conf: %w", err)
	}
	root, err := os.OpenRoot(filepath.Join(dir, "fs"))
	if err != nil {
		return fmt.Errorf("resolv.conf: %w", err)
	}
	defer root.Close()
	if err := root.MkdirAll("etc", 0o755); err != nil {
		return fmt.Errorf("resolv.conf: %w", err)
	}
	if err := root.Chmod("etc", 0o755); err != nil {
		return fmt.Errorf("resolv.conf: %w", err)
	}
	_ = root.Remove("etc/resolv.conf")
	if err := root.WriteFile("etc/resolv.conf", resolvConf(s), 0o644); err != nil {
		return fmt.Errorf("resolv.conf: %w", err)
	}
	return root.Chmod("etc/resolv.conf", 0o644)
}

// resolvConfMount mounts the resolv.conf at path over the image's,
// read-only.
func resolvConfMount(path string) specs.Mount {
	return specs.Mount{Destination: ResolvConfPath, Type: "bind", Source: path,
		Options: []string{"bind", "ro", "nosuid", "nodev", "noexec"}}
}

// dnsServer runs srv inside the network namespace of process pid (the
// container's init), on a UDP socket and a TCP listener at DNSAddr, until
// the returned closer is closed.
func (r *Runtime) dnsServer(id string, srv runtime.DNSServer, pid uint32) (*dnsCloser, error) {
	var pc net.PacketConn
	var ln net.Listener
	err := inNetns("/proc/"+strconv.FormatUint(uint64(pid), 10)+"/ns/net", DNSAddr.Addr(), func() error {
		var err error
		if pc, err = net.ListenPacket("udp4", DNSAddr.String()); err != nil {
			return err
		}
		if ln, err = net.Listen("tcp4", DNSAddr.String()); err != nil {
			pc.Close()
			return err
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Serve closes both sockets when it returns.
		if err := srv.Serve(ctx, pc, ln); err != nil {
			r.cfg.Log.Warn("containerd runtime: DNS server", "instance", id, "err", err)
		}
	}()
	return &dnsCloser{cancel: cancel, done: done}, nil
}

// dnsCloser stops a DNS server.
type dnsCloser struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// Close stops the server and waits for it.
func (c *dnsCloser) Close() error {
	c.cancel()
	<-c.done
	return nil
}

// serveDNS serves an adopted instance's DNS in its network namespace,
// unless something does already or the workload exited.
func (r *Runtime) serveDNS(in *inst, srv runtime.DNSServer) error {
	r.mu.Lock()
	if in.dns != nil || in.metaOff || in.task == nil || in.status.State != runtime.StateRunning {
		r.mu.Unlock()
		return nil
	}
	pid := in.task.Pid()
	r.mu.Unlock()
	d, err := r.dnsServer(in.id, srv, pid)
	if err != nil {
		return fmt.Errorf("instance %s: DNS server: %w", in.id, err)
	}
	r.mu.Lock()
	keep := in.dns == nil && !in.metaOff
	if keep {
		in.dns = d
	}
	r.mu.Unlock()
	if !keep {
		d.Close()
	}
	return nil
}

// stopDNS stops the instance's DNS server, if it has one.
func (r *Runtime) stopDNS(in *inst) {
	r.mu.Lock()
	d := in.dns
	in.dns = nil
	r.mu.Unlock()
	if d != nil {
		d.Close()
	}
}

// ServesDNS implements runtime.DNSServing: the runtime serves Spec.DNS
// inside each container's network namespace, which needs Linux.
func (r *Runtime) ServesDNS() bool { return goruntime.GOOS == "linux" }
