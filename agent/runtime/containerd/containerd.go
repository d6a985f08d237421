// Package containerd is the agent's container runtime: it runs each
// instance's workload in a container of its own, through a running
// containerd (its Go client), in a containerd namespace of the agent's own
// ("gpucloud"), with runc. It implements runtime.Runtime with the same
// contract as the process runtime (runtimetest checks both), and
// runtime.UsageReader and runtime.ResourceReader from the container's
// cgroup.
//
// Each workload gets its own PID, mount, IPC, UTS and network namespaces
// (the network has only a loopback interface unless Config.Network gives
// it one); a non-root user of its own (uids.go; or Config.User) with no
// capabilities and no way to gain privileges; the memory, CPU and pids
// limits of its Spec; its working directory and volumes as bind mounts
// (/work and /volumes/<name>) and nothing else of the host's files; a
// device cgroup that denies every device but the standard ones
// (/dev/null, /dev/zero...), its own GPUs' nodes, the NVIDIA control nodes
// and, for MIG slices, their nvidia-caps nodes; runtime.Environ's
// environment; and a small init (tini, Config.Init) as PID 1 that passes
// SIGTERM to the workload's process group and reaps orphans. The
// container's stdout and stderr are appended to Spec.LogPath on the host
// by containerd's shim, so output survives an agent restart.
//
// Stop sends SIGTERM, then SIGKILL to every process of the container after
// the grace period; the container's PID namespace ends with its init, so
// no process survives its instance, whatever session or group it made.
// docs/RUNTIME.md says what a workload can and cannot do.
package containerd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/platforms"

	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/internal/imageref"
)

var (
	_ runtime.Runtime        = (*Runtime)(nil)
	_ runtime.UsageReader    = (*Runtime)(nil)
	_ runtime.ResourceReader = (*Runtime)(nil)
	_ runtime.MetadataServer = (*Runtime)(nil)
	_ runtime.DNSServing     = (*Runtime)(nil)
)

// Defaults of Config.
const (
	// DefaultSocket is where a system containerd listens.
	DefaultSocket = "/run/containerd/containerd.sock"
	// DefaultNamespace is the containerd namespace of the agent's
	// containers; other users of the daemon (Kubernetes' k8s.io, docker's
	// moby) do not see them.
	DefaultNamespace = "gpucloud"
	// DefaultUser is the user and group of the workloads that share a
	// GPU through its MPS daemon, which serves one user only: nobody.
	// Every other workload runs as a user of its own (uids.go) unless
	// Config.User names one for all.
	DefaultUser = "65534:65534"
	// DefaultPidsLimit is the most processes and threads of a workload
	// whose Spec sets none.
	DefaultPidsLimit = 4096
	// DefaultSnapshotter is the snapshotter of the containers' root
	// filesystems.
	DefaultSnapshotter = "overlayfs"
	// DefaultDevDir is the host's device directory.
	DefaultDevDir = "/dev"
	// DefaultMIGMinors is the NVIDIA driver's table of MIG capability
	// minors.
	DefaultMIGMinors = "/proc/driver/nvidia-caps/mig-minors"
	// MaxLogChunk caps the bytes one Logs call returns.
	MaxLogChunk = runtime.MaxLogChunk
)

// DefaultInits are the static inits the runtime looks for when Config.Init
// is empty: Debian's tini package installs tini-static.
var DefaultInits = []string{"/usr/bin/tini-static", "/usr/local/bin/tini-static", "/usr/bin/docker-init"}

// Paths inside the container.
const (
	// WorkDir is where the instance's working directory is mounted (its
	// HOME), unless the working directory is one of its volumes.
	WorkDir = "/work"
	// VolumesDir holds the instance's volumes, each at VolumesDir/<name>
	// where name is the last element of the volume's host directory (the
	// volume ID, for the agent's volumes).
	VolumesDir = "/volumes"
	// ScratchDir is where the instance store is mounted, for an instance
	// with one (Spec.Scratch).
	ScratchDir = "/scratch"
	// InitPath is where the init is mounted, read-only.
	InitPath = "/dev/init"
)

// NetworkHook gives each container a network namespace of its own. Without
// one, each container gets a new network namespace with only a loopback
// interface. The instance network plugs in here (agent/network.Hook: the
// instance's private network, Spec.Network, on the kernel overlay; or,
// for an instance without one, a veth into a per-tenant bridge, NAT,
// nftables rules).
type NetworkHook interface {
	// Setup prepares the network of an instance of a tenant and returns
	// the path of the network namespace its container joins
	// (/var/run/netns/<name>). net is the instance's private network
	// (Spec.Network), nil for an instance made before networks existed.
	Setup(ctx context.Context, instanceID, tenantID string, net *runtime.Network) (netnsPath string, err error)
	// Teardown releases it once the container has exited. It is called
	// once per successful Setup, and must be idempotent.
	Teardown(ctx context.Context, instanceID string) error
}

// NetworkReconciler is a NetworkHook that can drop what it holds for
// instances that are gone: New calls it once it has adopted the
// containers of an earlier runtime, with those that still run, so that
// an agent that restarts leaks no instance network.
type NetworkReconciler interface {
	Reconcile(ctx context.Context, running []string) error
}

// NetworkSyncer is a NetworkHook that carries private networks across
// hosts: SyncNetworks applies the control plane's view of the host's
// networks (the other hosts' endpoints, the security groups) to the
// running instances without restarting them. The runtime forwards the
// agent's views to it (Runtime.SyncNetworks).
type NetworkSyncer interface {
	SyncNetworks(ctx context.Context, view *agentapi.NetworkView) error
}

// SyncNetworks hands the control plane's view of the host's networks to
// the network hook, when it is a NetworkSyncer; otherwise it does nothing.
func (r *Runtime) SyncNetworks(ctx context.Context, view *agentapi.NetworkView) error {
	if s, ok := r.cfg.Network.(NetworkSyncer); ok {
		return s.SyncNetworks(ctx, view)
	}
	return nil
}

// Config configures the runtime. The zero value of every field takes its
// default.
type Config struct {
	// Socket is containerd's gRPC socket (DefaultSocket).
	Socket string
	// Namespace is the containerd namespace of the containers
	// (DefaultNamespace).
	Namespace string
	// BaseDir holds the working directory (BaseDir/<id>/work) and log
	// (BaseDir/<id>/output.log) of a Spec that names none.
	BaseDir string
	// DefaultImage is the image of a Spec without one (BaseImage).
	DefaultImage string
	// NoPull keeps the runtime from pulling images it does not have:
	// they must be imported first (air-gapped hosts).
	NoPull bool
	// AllowRegistries are the registries the runtime pulls from although
	// their addresses are ones hosts do not reach (loopback, link-local,
	// private: imageref.AddrRule); empty allows none (pull.go).
	AllowRegistries imageref.AllowList
	// MaxImageBytes caps the total compressed size of a pulled image's
	// layers (DefaultMaxImageBytes).
	MaxImageBytes int64
	// Snapshotter is the snapshotter of the root filesystems
	// (DefaultSnapshotter).
	Snapshotter string
	// User is the "uid:gid" every workload runs as; empty (the default)
	// gives each workload a uid and gid of its own from UIDBase and
	// UIDCount, claimed in UIDDir (uids.go), and MPS clients DefaultUser.
	// "0:0" runs them as root inside the container, with containerd's
	// default capabilities: only for bare-metal hosts rented whole.
	User string
	// UIDBase and UIDCount are the range of the workloads' own uids
	// (DefaultUIDBase, DefaultUIDCount); UIDDir holds the machine's
	// claims of them (DefaultUIDDir).
	UIDBase, UIDCount uint32
	UIDDir            string
	// Init is the host path of a statically linked init run as each
	// container's PID 1 (the first of DefaultInits that exists when
	// empty); "none" runs the workload as PID 1, which then gets SIGTERM
	// only if it handles it and must reap its own orphans.
	Init string
	// Runc is the runc binary the shim runs ("runc" in containerd's PATH
	// when empty).
	Runc string
	// DevDir is the host directory of the GPU device nodes
	// (DefaultDevDir); a simulated host has its fake nodes elsewhere.
	DevDir string
	// MIGMinors is the NVIDIA driver's MIG capability minors table
	// (DefaultMIGMinors).
	MIGMinors string
	// CDI requests GPUs as CDI devices from the specifications the NVIDIA
	// Container Toolkit generates (nvidia-ctk cdi generate), which also
	// bring the driver's libraries into the container, instead of
	// exposing DevDir's nodes directly. Devices are named as the
	// toolkit's default (index) names them: nvidia.com/gpu=<index> for a
	// whole or shared GPU, nvidia.com/gpu=<gpu>:<MIG device index> for a
	// MIG slice (cdi.go).
	CDI bool
	// CDISpecDirs are the directories of the CDI specifications
	// (/etc/cdi and /var/run/cdi when empty).
	CDISpecDirs []string
	// MPS says whether GPU shares get a CUDA MPS control daemon per GPU
	// (MPSAuto: on real GPUs, not on a simulated host).
	MPS MPSMode
	// MPSControl is the MPS control program (DefaultMPSControl, looked up
	// in PATH, when empty). A share that cannot have its daemon fails to
	// start with ErrMPSUnavailable, naming the package.
	MPSControl string
	// MPSDir holds the daemons' pipe and log directories
	// (DefaultMPSDir). The MPS server runs as the workloads' user: the
	// directories above it must let that user through.
	MPSDir string
	// PidsLimit is the pids limit of a Spec that sets none
	// (DefaultPidsLimit).
	PidsLimit int64
	// Network is the instance network; nil gives loopback only.
	Network NetworkHook
	// Host names the host whose workloads the runtime runs, when several
	// share one containerd and namespace (gpucloud up runs a runtime per
	// simulated host on one private daemon): the runtime labels its
	// containers with it and adopts only the containers labelled with its
	// own (none, when empty: the one agent of a real host).
	Host string
	// RootSize is the most, in bytes, a container writes to its root
	// filesystem (DefaultRootSize when zero; negative: no limit):
	// storage.go.
	RootSize int64
	// LogSize is the most one file of a workload's log holds, in bytes
	// (DefaultLogSize when zero; negative: one file, unlimited, appended
	// by the shim), and LogFiles how many files the log is kept in, the
	// one written and the rotated ones (DefaultLogFiles when zero):
	// logwriter.go.
	LogSize  int64
	LogFiles int
	// LogWriter is the program the shim runs to write each workload's
	// log: a binary that links this package, which then serves as the
	// log writer (the running executable when empty).
	LogWriter string
	// Log receives the runtime's warnings (slog.Default()).
	Log *slog.Logger
}

// Runtime runs workloads as containers. It is safe for concurrent use.
type Runtime struct {
	cfg      Config
	client   *client.Client
	platform platforms.MatchComparer
	// uid and gid are Config.User's, or DefaultUser's when uids gives
	// each workload its own (nil: Config.User for all).
	uid, gid uint32
	uids     *uidPool
	init     string // host path of the init; empty for none
	// mps runs the shared GPUs' MPS control daemons; nil when the host
	// runs none (simulated GPUs, MPSOff).
	mps *mpsManager
	// cdi holds the CDI specifications when Config.CDI is set.
	cdi *cdiRegistry
	// lookupHost resolves registry names when pulling (the system resolver
	// when nil); tests set a fake one.
	lookupHost lookupFunc
	// bg is the context of what outlives a call: waits, escalations,
	// cleanups.
	bg     context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	insts    map[string]*inst
	starting map[string]chan struct{}
}

// inst is one container the runtime knows.
type inst struct {
	id      string
	ctr     client.Container
	task    client.Task // nil once deleted
	logPath string
	grace   time.Duration
	cgroup  string
	// netns is set when Config.Network set the instance's network up.
	netns bool
	// uid and gid are the workload's; ownUID says the runtime's uid pool
	// claimed them for it.
	uid, gid uint32
	ownUID   bool
	// imageTook is how long the image took on this start (0: adopted).
	imageTook time.Duration
	// mpsGPU is the GPU whose MPS daemon the instance is a client of;
	// empty when none, or once released.
	mpsGPU string
	// meta serves the instance's metadata in its network namespace;
	// metaOff is set once the workload exited (guarded by Runtime.mu).
	meta    io.Closer
	metaOff bool
	// dns serves the instance's DNS in its network namespace (guarded by
	// Runtime.mu); it too is not served again once metaOff is set.
	dns *dnsCloser
	// done is closed once the workload has exited, its processes are gone
	// and its status is set.
	done chan struct{}
	stop sync.Once
	// status is guarded by Runtime.mu.
	status runtime.Status
}

// Container labels the runtime keeps its own state in, so that a new
// agent finds its instances again.
const (
	labelInstance = "gpucloud.instance"
	labelHost     = "gpucloud.host"
	labelLog      = "gpucloud.log"
	labelGrace    = "gpucloud.grace"
	labelStarted  = "gpucloud.started"
	labelExit     = "gpucloud.exit"
	labelExited   = "gpucloud.exited"
	labelMPS      = "gpucloud.mps"
	labelUID      = "gpucloud.uid"
)

// runcRuntime is the containerd runtime (shim) of the containers.
const runcRuntime = "io.containerd.runc.v2"

// New connects to containerd and returns the runtime. It fails with a
// message naming the socket when containerd cannot be reached, and when
// the configuration is wrong (a bad user, an init that is not there). It
// adopts the containers of an earlier runtime in its namespace: a running
// one is running, an exited one exited, so that an agent that restarts
// neither loses nor reruns its workloads.
func New(ctx context.Context, cfg Config) (*Runtime, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	fixed := cfg.User
	if fixed == "" {
		fixed = DefaultUser // MPS clients'
	}
	uid, gid, err := parseUser(fixed)
	if err != nil {
		return nil, err
	}
	var uids *uidPool
	if cfg.User == "" {
		if uids, err = newUIDPool(cfg); err != nil {
			return nil, err
		}
	}
	init, err := findInit(cfg.Init)
	if err != nil {
		return nil, err
	}
	mps, err := cfg.mpsManager(uid, gid)
	if err != nil {
		return nil, err
	}
	var cdiReg *cdiRegistry
	if cfg.CDI {
		if cdiReg, err = newCDIRegistry(cfg.CDISpecDirs); err != nil {
			return nil, err
		}
	}
	c, err := dial(ctx, cfg)
	if err != nil {
		return nil, err
	}
	bg, bgCancel := context.WithCancel(namespaces.WithNamespace(context.Background(), cfg.Namespace))
	r := &Runtime{
		cfg: cfg, client: c, platform: platforms.Default(), uid: uid, gid: gid, uids: uids, init: init, mps: mps, cdi: cdiReg,
		bg: bg, cancel: bgCancel,
		insts: map[string]*inst{}, starting: map[string]chan struct{}{},
	}
	if err := r.takeOver(ctx); err != nil {
		_ = r.Close()
		return nil, err
	}
	return r, nil
}

// withDefaults fills the fields cfg leaves empty and normalizes its
// default image; a configuration without a base directory is an error.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.Socket == "" {
		cfg.Socket = DefaultSocket
	}
	if cfg.Namespace == "" {
		cfg.Namespace = DefaultNamespace
	}
	if cfg.DefaultImage == "" {
		cfg.DefaultImage = BaseImage
	}
	var err error
	if cfg.DefaultImage, err = imageref.Normalize(cfg.DefaultImage); err != nil {
		return cfg, fmt.Errorf("containerd runtime: default image: %w", err)
	}
	if cfg.Snapshotter == "" {
		cfg.Snapshotter = DefaultSnapshotter
	}
	if cfg.UIDBase == 0 {
		cfg.UIDBase = DefaultUIDBase
	}
	if cfg.UIDCount == 0 {
		cfg.UIDCount = DefaultUIDCount
	}
	if cfg.UIDDir == "" {
		cfg.UIDDir = DefaultUIDDir
	}
	if cfg.DevDir == "" {
		cfg.DevDir = DefaultDevDir
	}
	if cfg.MIGMinors == "" {
		cfg.MIGMinors = DefaultMIGMinors
	}
	if cfg.MaxImageBytes <= 0 {
		cfg.MaxImageBytes = DefaultMaxImageBytes
	}
	if cfg.PidsLimit <= 0 {
		cfg.PidsLimit = DefaultPidsLimit
	}
	if cfg.MPSDir == "" {
		cfg.MPSDir = DefaultMPSDir
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.RootSize == 0 {
		cfg.RootSize = DefaultRootSize
	}
	if cfg.LogSize == 0 {
		cfg.LogSize = DefaultLogSize
	}
	if cfg.LogFiles == 0 {
		cfg.LogFiles = DefaultLogFiles
	}
	if cfg.LogFiles < 2 {
		return cfg, fmt.Errorf("containerd runtime: a log in %d files: want at least 2, the one written and a rotated one", cfg.LogFiles)
	}
	if cfg.BaseDir == "" {
		return cfg, errors.New("containerd runtime: no base directory")
	}
	return cfg, nil
}

// mpsManager returns the manager of the shared GPUs' MPS daemons that
// cfg.MPS asks for, run as uid:gid; nil when the host runs none (MPSOff,
// or MPSAuto with simulated GPUs).
func (cfg Config) mpsManager(uid, gid uint32) (*mpsManager, error) {
	var mps *mpsManager
	switch cfg.MPS {
	case MPSAuto:
		if filepath.Clean(cfg.DevDir) == DefaultDevDir {
			mps = newMPSManager(cfg.MPSControl, cfg.MPSDir, int(uid), int(gid), cfg.Log)
		}
	case MPSOn:
		mps = newMPSManager(cfg.MPSControl, cfg.MPSDir, int(uid), int(gid), cfg.Log)
	case MPSOff:
	default:
		return nil, fmt.Errorf("containerd runtime: MPS mode %q: want on, off or empty (auto)", cfg.MPS)
	}
	if mps != nil && !filepath.IsAbs(cfg.MPSDir) {
		return nil, fmt.Errorf("containerd runtime: MPS directory %q is not absolute", cfg.MPSDir)
	}
	return mps, nil
}

// dial connects to the containerd at cfg.Socket and checks that it
// answers, with errors that name the socket.
func dial(ctx context.Context, cfg Config) (*client.Client, error) {
	if _, err := os.Stat(cfg.Socket); err != nil {
		return nil, fmt.Errorf("containerd is not reachable at %s (start it, or pass --containerd-socket): %w", cfg.Socket, err)
	}
	c, err := client.New(cfg.Socket, client.WithDefaultNamespace(cfg.Namespace), client.WithTimeout(5*time.Second))
	if err != nil {
		return nil, fmt.Errorf("containerd at %s: %w", cfg.Socket, err)
	}
	vctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := c.Version(vctx); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("containerd is not reachable at %s: %w", cfg.Socket, err)
	}
	return c, nil
}

// takeOver takes over what an earlier runtime in the namespace left: its
// containers (adopt), the MPS daemons their share workloads use, and the
// instance network's state.
func (r *Runtime) takeOver(ctx context.Context) error {
	if err := r.adopt(ctx); err != nil {
		return err
	}
	if r.uids != nil {
		// The claims of containers that went while no runtime ran end.
		held := map[string]bool{}
		for id, in := range r.insts {
			held[id] = in.ownUID
		}
		if err := r.uids.prune(held); err != nil {
			r.cfg.Log.Warn("containerd runtime: workload uid claims", "err", err)
		}
	}
	if r.mps != nil {
		// The daemons of the adopted share workloads keep running; those
		// nobody uses any more (their workloads exited while no agent
		// ran) are quit.
		if err := r.mps.reconcile(); err != nil {
			r.cfg.Log.Warn("containerd runtime: MPS daemons of exited workloads", "err", err)
		}
	}
	if rec, ok := r.cfg.Network.(NetworkReconciler); ok {
		if err := rec.Reconcile(ctx, r.running()); err != nil {
			return fmt.Errorf("containerd runtime: instance network: %w", err)
		}
	}
	return nil
}

// hostLabel labels a new container with Config.Host, when set.
func (r *Runtime) hostLabel() client.NewContainerOpts {
	return func(ctx context.Context, _ *client.Client, c *containers.Container) error {
		if r.cfg.Host != "" {
			if c.Labels == nil {
				c.Labels = map[string]string{}
			}
			c.Labels[labelHost] = r.cfg.Host
		}
		return nil
	}
}

// parseUser reads "uid:gid".
func parseUser(s string) (uint32, uint32, error) {
	u, g, ok := strings.Cut(s, ":")
	uid, err1 := strconv.ParseUint(u, 10, 32)
	gid, err2 := strconv.ParseUint(g, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("containerd runtime: user %q: want uid:gid, numeric", s)
	}
	return uint32(uid), uint32(gid), nil
}

// findInit resolves Config.Init.
func findInit(p string) (string, error) {
	switch p {
	case "none":
		return "", nil
	case "":
		for _, c := range DefaultInits {
			if fi, err := os.Stat(c); err == nil && fi.Mode().IsRegular() {
				return c, nil
			}
		}
		return "", fmt.Errorf("containerd runtime: no init found (tried %s; Debian: apt-get install tini), or set the init to none", strings.Join(DefaultInits, ", "))
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return "", fmt.Errorf("containerd runtime: init: %w", err)
	}
	if !isStaticELF(b) {
		return "", fmt.Errorf("containerd runtime: init %s is not statically linked: it must run in any image", p)
	}
	return p, nil
}

// Close closes the connection to containerd. Containers keep running.
func (r *Runtime) Close() error {
	r.cancel()
	return r.client.Close()
}

// nsCtx puts the runtime's namespace in ctx.
func (r *Runtime) nsCtx(ctx context.Context) context.Context {
	return namespaces.WithNamespace(ctx, r.cfg.Namespace)
}
