// Package containerd is the agent's container runtime: it runs each
// instance's workload in a container of its own, through a running
// containerd (its Go client), in a containerd namespace of the agent's own
// ("gpucloud"), with runc. It implements runtime.Runtime with the same
// contract as the process runtime, and runtime.UsageReader and
// runtime.ResourceReader from the container's cgroup.
//
// Each workload gets its own PID, mount, IPC, UTS and network namespaces
// (the network has only a loopback interface unless Config.Network gives
// it one); a non-root user (Config.User, 65534:65534 by default) with no
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
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/identifiers"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	"github.com/containerd/platforms"

	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/internal/imageref"
)

var (
	_ runtime.Runtime        = (*Runtime)(nil)
	_ runtime.UsageReader    = (*Runtime)(nil)
	_ runtime.ResourceReader = (*Runtime)(nil)
	_ runtime.MetadataServer = (*Runtime)(nil)
)

// Defaults of Config.
const (
	// DefaultSocket is where a system containerd listens.
	DefaultSocket = "/run/containerd/containerd.sock"
	// DefaultNamespace is the containerd namespace of the agent's
	// containers; other users of the daemon (Kubernetes' k8s.io, docker's
	// moby) do not see them.
	DefaultNamespace = "gpucloud"
	// DefaultUser is the user and group workloads run as: nobody.
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
	// InitPath is where the init is mounted, read-only.
	InitPath = "/dev/init"
)

// NetworkHook gives each container a network namespace of its own. Without
// one, each container gets a new network namespace with only a loopback
// interface. The instance network (agent/network: a veth into a per-tenant
// bridge, NAT, nftables rules) plugs in here.
type NetworkHook interface {
	// Setup prepares the network of an instance of a tenant and returns
	// the path of the network namespace its container joins
	// (/var/run/netns/<name>).
	Setup(ctx context.Context, instanceID, tenantID string) (netnsPath string, err error)
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
	// Snapshotter is the snapshotter of the root filesystems
	// (DefaultSnapshotter).
	Snapshotter string
	// User is the "uid:gid" workloads run as (DefaultUser). "0:0" runs
	// them as root inside the container, with containerd's default
	// capabilities: only for bare-metal hosts rented whole.
	User string
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
	// Log receives the runtime's warnings (slog.Default()).
	Log *slog.Logger
}

// Runtime runs workloads as containers. It is safe for concurrent use.
type Runtime struct {
	cfg      Config
	client   *client.Client
	platform platforms.MatchComparer
	uid, gid uint32
	init     string // host path of the init; empty for none
	// mps runs the shared GPUs' MPS control daemons; nil when the host
	// runs none (simulated GPUs, MPSOff).
	mps *mpsManager
	// cdi holds the CDI specifications when Config.CDI is set.
	cdi *cdiRegistry
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
	// mpsGPU is the GPU whose MPS daemon the instance is a client of;
	// empty when none, or once released.
	mpsGPU string
	// meta serves the instance's metadata in its network namespace;
	// metaOff is set once the workload exited (guarded by Runtime.mu).
	meta    io.Closer
	metaOff bool
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
		return nil, fmt.Errorf("containerd runtime: default image: %w", err)
	}
	if cfg.Snapshotter == "" {
		cfg.Snapshotter = DefaultSnapshotter
	}
	if cfg.User == "" {
		cfg.User = DefaultUser
	}
	if cfg.DevDir == "" {
		cfg.DevDir = DefaultDevDir
	}
	if cfg.MIGMinors == "" {
		cfg.MIGMinors = DefaultMIGMinors
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
	if cfg.BaseDir == "" {
		return nil, errors.New("containerd runtime: no base directory")
	}
	uid, gid, err := parseUser(cfg.User)
	if err != nil {
		return nil, err
	}
	init, err := findInit(cfg.Init)
	if err != nil {
		return nil, err
	}
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
	var cdiReg *cdiRegistry
	if cfg.CDI {
		if cdiReg, err = newCDIRegistry(cfg.CDISpecDirs); err != nil {
			return nil, err
		}
	}
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
	bg, bgCancel := context.WithCancel(namespaces.WithNamespace(context.Background(), cfg.Namespace))
	r := &Runtime{
		cfg: cfg, client: c, platform: platforms.Default(), uid: uid, gid: gid, init: init, mps: mps, cdi: cdiReg,
		bg: bg, cancel: bgCancel,
		insts: map[string]*inst{}, starting: map[string]chan struct{}{},
	}
	if err := r.adopt(ctx); err != nil {
		_ = r.Close()
		return nil, err
	}
	if r.mps != nil {
		// The daemons of the adopted share workloads keep running; those
		// nobody uses any more (their workloads exited while no agent
		// ran) are quit.
		if err := r.mps.reconcile(); err != nil {
			r.cfg.Log.Warn("containerd runtime: MPS daemons of exited workloads", "err", err)
		}
	}
	if rec, ok := cfg.Network.(NetworkReconciler); ok {
		if err := rec.Reconcile(ctx, r.running()); err != nil {
			_ = r.Close()
			return nil, fmt.Errorf("containerd runtime: instance network: %w", err)
		}
	}
	return r, nil
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

// Start implements runtime.Runtime. The container is started with the
// image of the Spec (Config.DefaultImage when empty), which the runtime
// pulls if it does not have it and may. A program that is in neither the
// image nor the instance's mounts is ErrInvalid, and leaves nothing
// behind. The container is not tied to ctx: ctx only bounds the start.
//
// The runtime serves Spec.Metadata inside the container's network
// namespace (MetadataURL); a Spec with a MetadataURL of its own is
// ErrInvalid, since no address of the host is reachable from the
// container. Starting a running instance again serves its metadata if
// nothing does (a new agent's runtime, which adopted the container).
func (r *Runtime) Start(ctx context.Context, s runtime.Spec) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.Validate(); err != nil {
		return err
	}
	if err := identifiers.Validate(s.InstanceID); err != nil {
		return fmt.Errorf("instance id %q: containerd takes letters and digits separated by single '.', '_' or '-', at most 76: %w", s.InstanceID, runtime.ErrInvalid)
	}
	if s.MetadataURL != "" && s.Metadata == nil {
		return fmt.Errorf("instance %s: the containerd runtime serves the metadata endpoint itself (Spec.Metadata), at %s; "+
			"the host's %s is out of the container's reach: %w", s.InstanceID, r.MetadataURL(), s.MetadataURL, runtime.ErrInvalid)
	}
	release, known, err := r.claim(ctx, s.InstanceID)
	if err != nil {
		return err
	}
	if known {
		if s.Metadata != nil {
			if in, err := r.lookup(s.InstanceID); err == nil {
				// The workload runs either way: an endpoint that cannot be
				// served (the workload exiting meanwhile) fails no start.
				if err := r.serveMetadata(in, s.Metadata); err != nil {
					r.cfg.Log.Warn("containerd runtime: metadata endpoint of an adopted container", "instance", in.id, "err", err)
				}
			}
		}
		return nil
	}
	defer release()
	in, err := r.create(r.nsCtx(ctx), s)
	if err != nil {
		return fmt.Errorf("start %s: %w", s.InstanceID, err)
	}
	r.mu.Lock()
	r.insts[s.InstanceID] = in
	r.mu.Unlock()
	return nil
}

// claim makes concurrent Starts of one instance start it once: the first
// gets release, the others wait for it and then find the instance known.
func (r *Runtime) claim(ctx context.Context, id string) (release func(), known bool, err error) {
	for {
		r.mu.Lock()
		if r.insts[id] != nil {
			r.mu.Unlock()
			return nil, true, nil
		}
		ch := r.starting[id]
		if ch == nil {
			ch = make(chan struct{})
			r.starting[id] = ch
			r.mu.Unlock()
			return func() {
				r.mu.Lock()
				delete(r.starting, id)
				r.mu.Unlock()
				close(ch)
			}, false, nil
		}
		r.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
	}
}

// create makes and starts the container, or leaves nothing behind.
func (r *Runtime) create(ctx context.Context, s runtime.Spec) (_ *inst, err error) {
	imgName := s.Image
	if imgName == "" {
		imgName = r.cfg.DefaultImage
	}
	// A short name is the image of its canonical one ("python:3.12" is
	// docker.io/library/python:3.12), as the server stores it.
	if imgName, err = imageref.Normalize(imgName); err != nil {
		return nil, fmt.Errorf("image %q %v: %w", s.Image, err, runtime.ErrInvalid)
	}
	img, err := r.image(ctx, imgName)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(r.cfg.BaseDir, s.InstanceID)
	if s.WorkDir == "" {
		s.WorkDir = filepath.Join(dir, "work")
	}
	if s.LogPath == "" {
		s.LogPath = filepath.Join(dir, "output.log")
	}
	if s.LogPath, err = filepath.Abs(s.LogPath); err != nil {
		return nil, err
	}
	for _, d := range []string{s.WorkDir, filepath.Dir(s.LogPath)} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return nil, err
		}
	}
	// The workload's user owns its directories (their tops: what it
	// wrote there under another user is left as it is).
	for _, d := range append([]string{s.WorkDir}, s.Volumes...) {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return nil, err
		}
		if err := os.Lchown(d, int(r.uid), int(r.gid)); err != nil {
			return nil, err
		}
	}
	lay, err := layout(s)
	if err != nil {
		return nil, err
	}
	if err := r.lookPath(ctx, img, s, lay); err != nil {
		return nil, err
	}
	grace := s.Grace
	if grace <= 0 {
		grace = runtime.DefaultGrace
	}
	in := &inst{
		id: s.InstanceID, logPath: s.LogPath, grace: grace,
		cgroup: "/" + r.cfg.Namespace + "/" + s.InstanceID,
		done:   make(chan struct{}),
	}
	if gpu, ok, err := r.mpsGPU(s); err != nil {
		return nil, err
	} else if ok {
		pipe, shm, err := r.mps.acquire(ctx, gpu, s.InstanceID)
		if err != nil {
			return nil, err
		}
		in.mpsGPU = gpu
		defer func() {
			if err != nil {
				r.releaseMPS(in)
			}
		}()
		// The pipe directory at the same path: the sockets the daemon
		// and the server made there, and CUDA_MPS_PIPE_DIRECTORY.
		lay.binds = append(lay.binds, [2]string{pipe, pipe})
		lay.mpsPipe = pipe
		if shm != "" {
			// The daemon's /dev/shm, in place of the container's own.
			lay.binds = append(lay.binds, [2]string{shm, "/dev/shm"})
			lay.mpsShm = shm
		}
	}
	// An earlier container of the same ID that this runtime does not know
	// (a crash between create and record) is in the way: remove it.
	if old, err := r.client.LoadContainer(ctx, s.InstanceID); err == nil {
		r.discard(old)
	}
	netns := ""
	if r.cfg.Network != nil {
		if netns, err = r.cfg.Network.Setup(ctx, s.InstanceID, s.TenantID); err != nil {
			return nil, fmt.Errorf("instance network: %w", err)
		}
		in.netns = true
		defer func() {
			if err != nil {
				r.teardownNetwork(in)
			}
		}()
	}
	specOpts, err := r.specOpts(s, lay, in.cgroup, netns)
	if err != nil {
		return nil, err
	}
	var runcOpts any
	if r.cfg.Runc != "" {
		runcOpts = runcOptions(r.cfg.Runc)
	}
	now := time.Now()
	labels := map[string]string{
		labelInstance: s.InstanceID, labelLog: s.LogPath,
		labelGrace: grace.String(), labelStarted: now.UTC().Format(time.RFC3339Nano),
	}
	if in.mpsGPU != "" {
		labels[labelMPS] = in.mpsGPU
	}
	ctr, err := r.client.NewContainer(ctx, s.InstanceID,
		client.WithImage(img),
		client.WithSnapshotter(r.cfg.Snapshotter),
		client.WithNewSnapshot(s.InstanceID, img),
		client.WithRuntime(runcRuntime, runcOpts),
		client.WithNewSpec(specOpts...),
		client.WithContainerLabels(labels),
		r.hostLabel(),
	)
	if err != nil {
		return nil, fmt.Errorf("create container: %w", err)
	}
	in.ctr = ctr
	defer func() {
		if err != nil {
			r.discard(ctr)
		}
	}()
	task, err := ctr.NewTask(ctx, cio.LogFile(s.LogPath))
	if err != nil {
		return nil, fmt.Errorf("create task: %w", err)
	}
	in.task = task
	exitC, err := task.Wait(r.bg)
	if err != nil {
		return nil, fmt.Errorf("wait for task: %w", err)
	}
	if s.Metadata != nil {
		if in.meta, err = metadataServer(s.Metadata, task.Pid()); err != nil {
			return nil, fmt.Errorf("metadata endpoint: %w", err)
		}
	}
	if err := task.Start(ctx); err != nil {
		if in.meta != nil {
			in.meta.Close()
		}
		return nil, fmt.Errorf("start task: %w", err)
	}
	in.status = runtime.Status{State: runtime.StateRunning, StartedAt: now}
	go r.reap(in, exitC)
	return in, nil
}

// discard removes a container and its task and snapshot, killing what
// runs in it; best effort, for failed starts and strays.
func (r *Runtime) discard(ctr client.Container) {
	ctx, cancel := context.WithTimeout(r.bg, 30*time.Second)
	defer cancel()
	if t, err := ctr.Task(ctx, nil); err == nil {
		_, _ = t.Delete(ctx, client.WithProcessKill)
	}
	if err := ctr.Delete(ctx, client.WithSnapshotCleanup); err != nil && !errdefs.IsNotFound(err) {
		r.cfg.Log.Warn("containerd runtime: remove container", "container", ctr.ID(), "err", err)
	}
}

// reap waits for the container's init to exit, deletes the task (runc's
// container: nothing of it runs after this) and records the exit.
func (r *Runtime) reap(in *inst, exitC <-chan client.ExitStatus) {
	var es client.ExitStatus
	select {
	case es = <-exitC:
	case <-r.bg.Done():
		return // the runtime is closed; a new one adopts the container
	}
	code, exitedAt, err := es.Result()
	if err != nil {
		r.cfg.Log.Warn("containerd runtime: exit status", "instance", in.id, "err", err)
	}
	r.finish(in, int(code), exitedAt)
}

// finish deletes the exited task, releases what the instance held, and
// records its exit.
func (r *Runtime) finish(in *inst, code int, exitedAt time.Time) {
	if exitedAt.IsZero() {
		exitedAt = time.Now()
	}
	if in.task != nil {
		ctx, cancel := context.WithTimeout(r.bg, 30*time.Second)
		// The exit is kept on the container, for a runtime that adopts
		// it after the task is gone.
		if _, err := in.ctr.SetLabels(ctx, map[string]string{
			labelExit: strconv.Itoa(code), labelExited: exitedAt.UTC().Format(time.RFC3339Nano),
		}); err != nil {
			r.cfg.Log.Warn("containerd runtime: record the exit", "instance", in.id, "err", err)
		}
		if _, err := in.task.Delete(ctx, client.WithProcessKill); err != nil && !errdefs.IsNotFound(err) {
			r.cfg.Log.Warn("containerd runtime: delete task", "instance", in.id, "err", err)
		}
		cancel()
	}
	r.mu.Lock()
	meta := in.meta
	in.meta, in.metaOff = nil, true
	r.mu.Unlock()
	if meta != nil {
		meta.Close()
	}
	r.teardownNetwork(in)
	r.releaseMPS(in)
	r.mu.Lock()
	in.status.State = runtime.StateExited
	in.status.ExitCode, in.status.Signal = code, signalOf(code)
	in.status.ExitedAt = exitedAt
	r.mu.Unlock()
	close(in.done)
}

// serveMetadata serves an adopted instance's metadata in its network
// namespace, unless something does already or the workload exited.
func (r *Runtime) serveMetadata(in *inst, h http.Handler) error {
	r.mu.Lock()
	if in.meta != nil || in.metaOff || in.task == nil || in.status.State != runtime.StateRunning {
		r.mu.Unlock()
		return nil
	}
	pid := in.task.Pid()
	r.mu.Unlock()
	m, err := metadataServer(h, pid)
	if err != nil {
		return fmt.Errorf("instance %s: metadata endpoint: %w", in.id, err)
	}
	r.mu.Lock()
	keep := in.meta == nil && !in.metaOff
	if keep {
		in.meta = m
	}
	r.mu.Unlock()
	if !keep {
		m.Close()
	}
	return nil
}

// running returns the IDs of the instances whose workload runs.
func (r *Runtime) running() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ids []string
	for id, in := range r.insts {
		if in.status.State == runtime.StateRunning {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// mpsGPU returns the GPU whose MPS daemon a spec's workload is a client
// of: a share's one GPU, when the runtime runs daemons.
func (r *Runtime) mpsGPU(s runtime.Spec) (string, bool, error) {
	if r.mps == nil || s.ShareMilli <= 0 {
		return "", false, nil
	}
	if len(s.Devices) != 1 {
		return "", false, fmt.Errorf("instance %s: a GPU share names exactly one GPU, not %d: %w", s.InstanceID, len(s.Devices), runtime.ErrInvalid)
	}
	if err := checkGPU(s.Devices[0]); err != nil {
		return "", false, fmt.Errorf("instance %s: %w", s.InstanceID, err)
	}
	return s.Devices[0], true, nil
}

// releaseMPS ends the instance's use of its GPU's MPS daemon, which quits
// with its last client.
func (r *Runtime) releaseMPS(in *inst) {
	r.mu.Lock()
	gpu := in.mpsGPU
	in.mpsGPU = ""
	r.mu.Unlock()
	if gpu == "" || r.mps == nil {
		return
	}
	if err := r.mps.release(gpu, in.id); err != nil {
		r.cfg.Log.Warn("containerd runtime: MPS daemon", "instance", in.id, "gpu", gpu, "err", err)
	}
}

func (r *Runtime) teardownNetwork(in *inst) {
	if !in.netns || r.cfg.Network == nil {
		return
	}
	ctx, cancel := context.WithTimeout(r.bg, 30*time.Second)
	defer cancel()
	if err := r.cfg.Network.Teardown(ctx, in.id); err != nil {
		r.cfg.Log.Warn("containerd runtime: instance network teardown", "instance", in.id, "err", err)
	}
	in.netns = false
}

// signalOf names the signal of an exit code above 128: the shim reports a
// workload killed by signal N as 128+N, as shells do. A workload that
// exits with such a code by itself reads the same.
func signalOf(code int) string {
	if code <= 128 || code > 128+64 {
		return ""
	}
	return signalName(syscall.Signal(code - 128))
}

var signalNames = map[syscall.Signal]string{
	syscall.SIGHUP: "SIGHUP", syscall.SIGINT: "SIGINT", syscall.SIGQUIT: "SIGQUIT",
	syscall.SIGILL: "SIGILL", syscall.SIGTRAP: "SIGTRAP", syscall.SIGABRT: "SIGABRT",
	syscall.SIGBUS: "SIGBUS", syscall.SIGFPE: "SIGFPE", syscall.SIGKILL: "SIGKILL",
	syscall.SIGUSR1: "SIGUSR1", syscall.SIGSEGV: "SIGSEGV", syscall.SIGUSR2: "SIGUSR2",
	syscall.SIGPIPE: "SIGPIPE", syscall.SIGALRM: "SIGALRM", syscall.SIGTERM: "SIGTERM",
	syscall.SIGXCPU: "SIGXCPU", syscall.SIGXFSZ: "SIGXFSZ",
}

func signalName(s syscall.Signal) string {
	if n, ok := signalNames[s]; ok {
		return n
	}
	return "SIG" + strconv.Itoa(int(s))
}

func (r *Runtime) lookup(id string) (*inst, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	in := r.insts[id]
	if in == nil {
		return nil, fmt.Errorf("instance %s: %w", id, runtime.ErrNotFound)
	}
	return in, nil
}

// Stop implements runtime.Runtime: SIGTERM to the container's init, which
// passes it to the workload's process group (to every process of the
// container without an init), then SIGKILL to every process of the
// container after the grace period. It returns once the task is deleted:
// no process of the instance is left.
func (r *Runtime) Stop(ctx context.Context, id string) error {
	in, err := r.lookup(id)
	if err != nil {
		return err
	}
	in.stop.Do(func() { go r.terminate(in) })
	select {
	case <-in.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stop %s: %w", id, ctx.Err())
	}
}

// terminate is the escalation of one Stop.
func (r *Runtime) terminate(in *inst) {
	select {
	case <-in.done:
		return
	default:
	}
	var opts []client.KillOpts
	if r.init == "" {
		opts = append(opts, client.WithKillAll)
	}
	if err := in.task.Kill(r.bg, syscall.SIGTERM, opts...); err != nil && !errdefs.IsNotFound(err) {
		r.cfg.Log.Warn("containerd runtime: SIGTERM", "instance", in.id, "err", err)
	}
	t := time.NewTimer(in.grace)
	defer t.Stop()
	select {
	case <-in.done:
		return
	case <-r.bg.Done():
		return
	case <-t.C:
	}
	// Killing init ends the PID namespace, and with it every process in
	// it; WithKillAll also reaches any that a shared namespace would keep.
	for attempt := 0; attempt < 5; attempt++ {
		err := in.task.Kill(r.bg, syscall.SIGKILL, client.WithKillAll)
		if err == nil || errdefs.IsNotFound(err) {
			return
		}
		r.cfg.Log.Warn("containerd runtime: SIGKILL", "instance", in.id, "err", err)
		select {
		case <-in.done:
			return
		case <-time.After(time.Second):
		}
	}
}

// Status implements runtime.Runtime.
func (r *Runtime) Status(id string) (runtime.Status, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	in := r.insts[id]
	if in == nil {
		return runtime.Status{}, fmt.Errorf("instance %s: %w", id, runtime.ErrNotFound)
	}
	return in.status, nil
}

// Wait implements runtime.Runtime.
func (r *Runtime) Wait(ctx context.Context, id string) (runtime.Status, error) {
	in, err := r.lookup(id)
	if err != nil {
		return runtime.Status{}, err
	}
	select {
	case <-in.done:
		return r.Status(id)
	case <-ctx.Done():
		return runtime.Status{}, fmt.Errorf("wait %s: %w", id, ctx.Err())
	}
}

// Logs implements runtime.Runtime.
func (r *Runtime) Logs(id string, offset int64) ([]byte, int64, error) {
	in, err := r.lookup(id)
	if err != nil {
		return nil, 0, err
	}
	if offset < 0 {
		return nil, 0, fmt.Errorf("logs %s: negative offset %d: %w", id, offset, runtime.ErrInvalid)
	}
	f, err := os.Open(in.logPath)
	if errors.Is(err, os.ErrNotExist) {
		return nil, 0, nil // nothing written yet
	}
	if err != nil {
		return nil, 0, fmt.Errorf("logs %s: %w", id, err)
	}
	defer f.Close()
	data, next, err := runtime.ReadLog(f, offset)
	if err != nil {
		return nil, 0, fmt.Errorf("logs %s: %w", id, err)
	}
	return data, next, nil
}

// Remove implements runtime.Runtime: it deletes the exited container and
// its root filesystem, keeping the log, working directory and volumes.
func (r *Runtime) Remove(id string) error {
	r.mu.Lock()
	in := r.insts[id]
	if in == nil {
		r.mu.Unlock()
		return fmt.Errorf("instance %s: %w", id, runtime.ErrNotFound)
	}
	if in.status.State != runtime.StateExited {
		r.mu.Unlock()
		return fmt.Errorf("remove %s: %w", id, runtime.ErrRunning)
	}
	delete(r.insts, id)
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(r.bg, 30*time.Second)
	defer cancel()
	if err := in.ctr.Delete(ctx, client.WithSnapshotCleanup); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("remove %s: %w", id, err)
	}
	return nil
}

// StopAll stops every workload the runtime knows and waits for them, up
// to ctx; a host process that exits (`gpucloud up` on Ctrl-C) calls it.
func (r *Runtime) StopAll(ctx context.Context) error {
	r.mu.Lock()
	ids := slices.Sorted(maps.Keys(r.insts))
	r.mu.Unlock()
	errs := make(chan error, len(ids))
	for _, id := range ids {
		go func() { errs <- r.Stop(ctx, id) }()
	}
	var all []error
	for range ids {
		if err := <-errs; err != nil && !errors.Is(err, runtime.ErrNotFound) {
			all = append(all, err)
		}
	}
	return errors.Join(all...)
}

// adopt loads the containers an earlier runtime left in the namespace.
func (r *Runtime) adopt(ctx context.Context) error {
	ctx = r.nsCtx(ctx)
	ctrs, err := r.client.Containers(ctx)
	if err != nil {
		return fmt.Errorf("containerd at %s: list containers: %w", r.cfg.Socket, err)
	}
	for _, ctr := range ctrs {
		labels, err := ctr.Labels(ctx)
		if err != nil || labels[labelInstance] != ctr.ID() || labels[labelHost] != r.cfg.Host {
			continue // not one of ours, or another host's
		}
		grace, _ := time.ParseDuration(labels[labelGrace])
		started, _ := time.Parse(time.RFC3339Nano, labels[labelStarted])
		in := &inst{
			id: ctr.ID(), ctr: ctr, logPath: labels[labelLog], grace: max(grace, time.Second),
			cgroup: "/" + r.cfg.Namespace + "/" + ctr.ID(), done: make(chan struct{}),
			status: runtime.Status{State: runtime.StateRunning, StartedAt: started},
			netns:  r.cfg.Network != nil, // the earlier runtime set it up
		}
		if r.mps != nil {
			in.mpsGPU = labels[labelMPS]
		}
		r.insts[in.id] = in
		task, err := ctr.Task(ctx, nil)
		if err != nil {
			// Its task is gone: it exited, and the exit was recorded;
			// or it was created but never started (255: no status).
			code, cerr := strconv.Atoi(labels[labelExit])
			if cerr != nil {
				code = 255
				r.cfg.Log.Warn("containerd runtime: container without a task or exit status", "instance", in.id, "err", err)
			}
			exited, _ := time.Parse(time.RFC3339Nano, labels[labelExited])
			r.finish(in, code, exited)
			continue
		}
		in.task = task
		st, err := task.Status(ctx)
		if err != nil {
			return fmt.Errorf("containerd: status of %s: %w", in.id, err)
		}
		if st.Status == client.Stopped {
			r.finish(in, int(st.ExitStatus), st.ExitTime)
			continue
		}
		exitC, err := task.Wait(r.bg)
		if err != nil {
			return fmt.Errorf("containerd: wait for %s: %w", in.id, err)
		}
		if in.mpsGPU != "" {
			r.mps.adoptClient(in.mpsGPU, in.id)
		}
		go r.reap(in, exitC)
	}
	return nil
}
