// Package agent is the host agent: it joins the control plane, heartbeats
// the host's inventory, and reconciles the host's workloads with the
// assignments the server hands out (docs/CONTROL_PLANE.md, "Agent protocol").
// Alongside, it samples its instances' GPU and CPU utilization every
// MetricsInterval for the control plane's autoscaling (SampleMetrics), and
// records the completion locks workloads take on their metadata endpoint.
//
// One reconcile pass (Step) fetches the assignments and, per instance,
// applies the GPU partition (MIG mode and instances), starts the workload in
// the runtime with exactly its devices, watches it, stops it, and cleans up
// after it; it ships new log output and reports phase changes. Every pass is
// idempotent: the driver's and the runtime's calls are, and the agent keeps
// in memory what it already did and reported, so a pass that is interrupted
// is simply repeated. Server and driver errors are logged and retried on the
// next pass, with backoff; they never end the loop.
package agent

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpucloud/gpucloud/agent/dns"
	"github.com/gpucloud/gpucloud/agent/gpu"
	"github.com/gpucloud/gpucloud/agent/metadata"
	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
)

// ControlPlane is the control plane as the agent sees it. agentapi.Client
// implements it.
type ControlPlane interface {
	Join(ctx context.Context, req agentapi.JoinRequest) (*agentapi.JoinResponse, error)
	Heartbeat(ctx context.Context, req agentapi.HeartbeatRequest) (*agentapi.HeartbeatResponse, error)
	Assignments(ctx context.Context) (*agentapi.AssignmentList, error)
	ReportStatus(ctx context.Context, instanceID string, r agentapi.StatusReport) error
	AppendLogs(ctx context.Context, instanceID string, chunk []byte) error
	ReportMetrics(ctx context.Context, rep agentapi.MetricsReport) error
	SetScaleInLock(ctx context.Context, instanceID string, req agentapi.LockRequest) (*cloud.ScaleIn, error)
	// Networks returns the host's view of its private networks; with a
	// version and a wait it answers once the view changes, or after wait
	// (agentapi.Client.Networks).
	Networks(ctx context.Context, version string, wait time.Duration) (*agentapi.NetworkView, error)
}

// NetworkSyncer is a runtime that carries private networks across hosts
// (the containerd runtime with the overlay): the agent hands it each new
// view of the host's networks, which it applies to the running instances
// without restarting them.
type NetworkSyncer interface {
	SyncNetworks(ctx context.Context, view *agentapi.NetworkView) error
}

// Defaults of Config.
const (
	DefaultInterval      = 2 * time.Second
	DefaultDriverTimeout = 30 * time.Second
)

// EnvVolumes lists a workload's volume directories, colon-separated.
const EnvVolumes = runtime.EnvVolumes

// Config is what an agent works with.
type Config struct {
	Driver   gpu.Driver
	Runtime  runtime.Runtime
	Metadata *metadata.Endpoints // optional: without it workloads get no metadata URL
	// DataDir holds volumes (DataDir/volumes/<id>, unless VolumeDir is
	// set), per-instance work directories (DataDir/instances/<id>) and
	// output logs (DataDir/logs).
	DataDir string
	// VolumeDir, when set, holds the volumes instead (VolumeDir/<id>): a
	// filesystem every host mounts (NFS, a cluster filesystem) lets a
	// volume follow its instance from host to host, as a spot request's
	// relaunches need to find their checkpoints.
	VolumeDir string
	// SharedVolumeDir, when set, holds the shared volumes
	// (SharedVolumeDir/<id>, sharedvol.go): a filesystem the operator
	// mounts at this same path on every host (NFS, CephFS, Lustre), so
	// that instances on many hosts mount one volume at once. The host
	// reports the label shared-volumes, which instances with a shared
	// volume are placed by.
	SharedVolumeDir string
	// VolumeImages keeps each volume in a filesystem of its size: an ext4
	// image (VolumeDir/<id>.img, or DataDir/volumes/<id>.img) loop-mounted
	// at the volume's directory while an instance of the host uses it, so
	// that a volume never holds more than its size (volumes.go). It needs
	// root; the containerd runtime's agent sets it. Without it volumes are
	// plain directories.
	VolumeImages bool
	// WorkSize is, with VolumeImages, the size of the filesystem of the
	// working directory of an instance without volumes
	// (DefaultWorkSize when zero; negative: a plain directory).
	WorkSize int64
	// RetainTerminated is how long a terminated instance's working
	// directory and log stay on the host (DefaultRetainTerminated when
	// zero; negative: removed at once), and StorageSweep how often the
	// agent looks for what to delete (DefaultStorageSweep when zero;
	// negative: never). A deleted volume's files go at the first sweep
	// after the server says so (storage.go).
	RetainTerminated time.Duration
	StorageSweep     time.Duration
	// Interval is the poll and heartbeat period (DefaultInterval when zero).
	Interval time.Duration
	// ManageMIG lets the agent change the MIG layout: switch MIG mode and
	// create and destroy MIG instances. It is always on for the sim driver
	// and opt-in for NVML; without it a MIG placement needs its instance to
	// exist already, and the agent leaves the layout as it found it.
	ManageMIG bool
	// DriverTimeout bounds each driver call (DefaultDriverTimeout when
	// zero), so that a call stuck in the kernel cannot stall the agent.
	DriverTimeout time.Duration
	// MetricsInterval is how often the agent samples the GPU and CPU
	// utilization of its instances and reports it (DefaultMetricsInterval
	// when zero; negative: never).
	MetricsInterval time.Duration
	// Underlay is the host's address on the fabric between hosts, where
	// its overlay endpoint listens, and UnderlayMTU the fabric's MTU: the
	// agent reports them in its inventory (fleet.Host.Underlay and MTU)
	// unless the driver does. Zero: none (the host carries no private
	// network of another host).
	Underlay    netip.Addr
	UnderlayMTU int
	// DirectAddr is where clients reach the agent's direct-copy listener
	// (files.Direct; gpucloud agent --direct-listen), host:port, and
	// DirectFingerprint its certificate's fingerprint: the inventory
	// reports them (fleet.Host.DirectAddr), and the server hands them out
	// with grants. Empty: the agent takes no direct copies.
	DirectAddr        string
	DirectFingerprint string
	// Tunnels serves the direct sessions that come through the server
	// (agentapi.SessionTunnel): files.Direct, which the agent has
	// whenever it holds the cloud's CA, with or without a listener. Nil:
	// none (the server then keeps to its relay).
	Tunnels TunnelServer
	// DNSUpstreams are the resolvers the instances' DNS forwards the
	// names outside their networks to; the nameservers of the host's
	// /etc/resolv.conf when empty. Used only with a runtime that serves
	// DNS (runtime.DNSServing).
	DNSUpstreams []netip.AddrPort
	// HCAs finds the host's RDMA adapters, which the inventory then
	// reports instead of the driver's (nil: the driver's, which a
	// simulated host fills). A real host's agent runs rdma.Discover over
	// /sys and /dev. An error is logged, once per distinct message, and
	// the adapters returned with it are kept (rdma.SkipError comes with
	// the adapters that can be used).
	HCAs func() ([]fleet.HCA, error)
	// Sessions serves the session kinds other than exec and forward,
	// keyed by kind (agentapi.SessionSSH, agentapi.SessionFiles); a kind
	// with no handler is refused with a message to the client.
	Sessions map[string]SessionHandler
	Now      func() time.Time
	Log      *slog.Logger
}

// Agent runs one host. Its methods are safe for concurrent use; Step calls
// are serialized.
type Agent struct {
	srv ControlPlane
	cfg Config
	log *slog.Logger

	// mu serializes reconcile passes and guards what they keep.
	mu    sync.Mutex
	insts map[string]*inst
	// logOff is the next log offset to ship per instance ID. It outlives the
	// instance's state when output is left unshipped, so that a later run of
	// the same instance (whose log is appended to) ships it.
	logOff map[string]int64
	// migAuto marks GPUs whose MIG mode a placement asked the agent to turn
	// on; the agent turns it off again when their last instance goes, as the
	// server's model does (fleet.GPU.MIGAuto). It is kept in the data
	// directory across restarts (setMIGAuto, mig-auto.json).
	migAuto map[int]bool

	// hbMu serializes heartbeats and guards lastInv, lastBeat and
	// beatEvery.
	hbMu sync.Mutex
	// lastBeat is when the last heartbeat the server took was sent, and
	// beatEvery how often the server asked for one in its answer (0: at
	// the agent's interval).
	lastBeat  time.Time
	beatEvery time.Duration
	// lastInv is the JSON of the inventory the last successful heartbeat
	// carried.
	lastInv []byte

	// smu guards targets, what the metrics sampler keeps of the running
	// instances; it is never held across a call out, so sampling and
	// reconciling do not wait for each other. sampleMu serializes samples.
	smu      sync.Mutex
	targets  map[string]*target
	sampleMu sync.Mutex

	// reports counts the status reports sent (tried), and latest is the
	// newest assignment list known, from the watch or a fetch (watch.go).
	reports atomic.Uint64
	latest  latestList
	// kick asks the reconcile loop for a pass now (the watch answered
	// with a new list).
	kick chan struct{}

	// asgMu guards assigned, the assignments the last pass fetched, which
	// Assignments hands out without waiting for a pass.
	asgMu    sync.Mutex
	assigned []agentapi.Assignment

	// hostMu guards what the agent learnt from the last inventory.
	hostMu sync.Mutex
	hostID string
	zone   string
	// hcas are the host's RDMA adapters, and hcaErr the last error
	// finding them ("" for none), logged when it changes.
	hcas   []fleet.HCA
	hcaErr string

	// dns is the instances' resolver, nil when the runtime serves no DNS.
	dns *dns.Resolver

	// lastSweep is when the last storage sweep ran (guarded by mu).
	lastSweep time.Time
	// scratchUnit is the bytes of a GiB of instance store: 1 GiB but in
	// tests (export_test.go), which fill stores of a few MiB.
	scratchUnit int64
}

// New returns an agent that talks to srv. Zero Config fields take their
// defaults; Run and Step fail if the driver, runtime or data directory is
// missing.
func New(srv ControlPlane, cfg Config) *Agent {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.DriverTimeout <= 0 {
		cfg.DriverTimeout = DefaultDriverTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.MetricsInterval == 0 {
		cfg.MetricsInterval = DefaultMetricsInterval
	}
	a := &Agent{
		srv: srv, cfg: cfg, log: cfg.Log,
		insts: map[string]*inst{}, logOff: map[string]int64{}, migAuto: loadMIGAuto(cfg.DataDir, cfg.Log),
		targets: map[string]*target{}, kick: make(chan struct{}, 1),
	}
	a.dns = newResolver(cfg)
	if md := cfg.Metadata; md != nil {
		_, simulated := cfg.Driver.(gpu.LoadSimulator)
		md.SetSimulated(simulated)
		if srv != nil {
			// A workload's lock changes reach the server at most once
			// per interval per instance, as its other reports do.
			md.SetLockInterval(cfg.Interval)
			md.SetLockHook(a.recordLock)
		}
	}
	return a
}

func (a *Agent) check() error {
	switch {
	case a.srv == nil:
		return errors.New("agent: no server")
	case a.cfg.Driver == nil:
		return errors.New("agent: no GPU driver")
	case a.cfg.Runtime == nil:
		return errors.New("agent: no workload runtime")
	case a.cfg.DataDir == "":
		return errors.New("agent: no data directory")
	}
	return nil
}

// DataDirMode is the mode of an agent's data directory: it holds the
// host's credential, its TLS key and every instance's work directory and
// log, so only the host's root may enter it.
const DataDirMode os.FileMode = 0o700

// MakeDataDir makes dir (and any missing parent) with DataDirMode, and
// gives an existing dir that mode too, so that a directory made looser
// before (by another program, or an earlier version) is closed at start.
func MakeDataDir(dir string) error {
	if err := os.MkdirAll(dir, DataDirMode); err != nil {
		return err
	}
	return os.Chmod(dir, DataDirMode)
}

// WriteSecret writes a file of the data directory 0600 through a
// temporary file and a rename, so that it is never seen half written or
// with a wider mode: the credential, the TLS keys and certificates.
func WriteSecret(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after a successful rename, there is nothing to remove
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// Joined is what a join gives the agent: the server's answer (host ID,
// credential, and the TLS client certificate from a server that serves
// TLS) and the client key the certificate is for, which the agent made for
// the join and which never left the host.
type Joined struct {
	agentapi.JoinResponse
	// KeyPEM is the agent's TLS client key (PEM).
	KeyPEM []byte
}

// TLSCertificate is the client certificate the join issued, with its
// key, for the agent's HTTP client from then on; ok is false when the
// server issued none (a plain-HTTP server).
func (j *Joined) TLSCertificate() (cert tls.Certificate, ok bool, err error) {
	if j.Certificate == "" {
		return tls.Certificate{}, false, nil
	}
	cert, err = agentapi.ClientCertificate([]byte(j.Certificate), j.KeyPEM, j.HostID)
	return cert, err == nil, err
}

// Join performs the join with a join token: it reads the host's inventory,
// makes a TLS client key, and sends the inventory with the key's
// certificate request. It returns the host ID, the credential and the
// client certificate with its key, which the caller must persist and
// build its Server client with from then on: over TLS, the server accepts
// the credential only from a connection that presents the certificate.
func Join(ctx context.Context, srv ControlPlane, joinToken string, drv gpu.Driver) (*Joined, error) {
	return Rejoin(ctx, srv, joinToken, "", drv)
}

// Rejoin is Join presenting credential, the host's current credential (""
// for none): the server joins a host that has joined only with it (srv
// must then present the host's client certificate over TLS), or after an
// admin removed the host.
func Rejoin(ctx context.Context, srv ControlPlane, joinToken, credential string, drv gpu.Driver) (*Joined, error) {
	if joinToken == "" {
		return nil, errors.New("join: no join token")
	}
	inv, err := drv.Inventory(ctx)
	if err != nil {
		return nil, fmt.Errorf("join: read inventory: %w", err)
	}
	keyPEM, csrPEM, err := agentapi.NewClientKey()
	if err != nil {
		return nil, fmt.Errorf("join: make the TLS client key: %w", err)
	}
	resp, err := srv.Join(ctx, agentapi.JoinRequest{JoinToken: joinToken, Inventory: inv, CSR: string(csrPEM), Credential: credential})
	if err != nil {
		return nil, fmt.Errorf("join: %w", err)
	}
	if resp == nil || resp.Credential == "" || resp.HostID == "" {
		return nil, errors.New("join: the server answered without a host ID or credential")
	}
	j := &Joined{JoinResponse: *resp, KeyPEM: keyPEM}
	if _, _, err := j.TLSCertificate(); err != nil {
		return nil, fmt.Errorf("join: %w", err)
	}
	return j, nil
}

// Run heartbeats and reconciles, each every Interval, until ctx ends; it
// then returns nil, leaving the workloads running. A failing heartbeat or
// pass is logged and retried with backoff (up to ten intervals). Run first
// makes the data directory the host root's only (MakeDataDir); it returns an
// error only for an agent without driver, runtime or data directory, or one
// whose data directory cannot be made so.
func (a *Agent) Run(ctx context.Context) error {
	if err := a.check(); err != nil {
		return err
	}
	if err := MakeDataDir(a.cfg.DataDir); err != nil {
		return fmt.Errorf("agent: data directory: %w", err)
	}
	// The first heartbeat goes alone, so that the loops' first requests
	// share the connection it opened rather than each dialing (and
	// shaking hands with) the server at once.
	if err := a.beatIfDue(ctx); err != nil {
		a.log.Warn("agent: first heartbeat failed; retrying", "err", err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { a.loop(ctx, "heartbeat", a.beatIfDue, nil) })
	if a.cfg.MetricsInterval > 0 {
		wg.Go(func() { a.sampleLoop(ctx) })
	}
	if ns, ok := a.cfg.Runtime.(NetworkSyncer); ok || a.dns != nil {
		wg.Go(func() { a.networkLoop(ctx, ns) })
	}
	if d, ok := a.srv.(SessionDialer); ok {
		wg.Go(func() { a.sessionLoop(ctx, d) })
	}
	if w, ok := a.srv.(AssignmentWatcher); ok {
		// Passes take the list from the watch while it answers, and
		// poll for it while it does not (watch.go).
		wg.Go(func() { a.watchLoop(ctx, w) })
		a.loop(ctx, "reconcile", a.watchedStep, a.kick)
	} else {
		a.loop(ctx, "reconcile", a.Step, nil)
	}
	wg.Wait()
	return nil
}

// maxBackoff caps the delay after failures, in intervals.
const maxBackoff = 10

// maxRetryAfter caps how long a server's Retry-After may hold the agent
// back, so that a wrong header cannot silence a host for long.
const maxRetryAfter = 5 * time.Minute

// loop calls f every interval, backing off exponentially while it fails;
// a kick (the assignment watch's new list) ends the wait early.
func (a *Agent) loop(ctx context.Context, name string, f func(context.Context) error, kick <-chan struct{}) {
	fails := 0
	for {
		err := f(ctx)
		if ctx.Err() != nil {
			return
		}
		delay := a.cfg.Interval
		if err != nil {
			fails++
			delay = retryDelay(a.cfg.Interval, fails, err)
			a.log.Warn("agent: "+name+" failed", "err", err, "failures", fails, "retry_in", delay)
		} else {
			fails = 0
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-kick:
			t.Stop()
		}
	}
}

// retryDelay is how long the agent waits after the fails-th consecutive
// failure err: the backoff, less a random part of up to half of it
// (jitter), or longer when a rate-limited answer's Retry-After asks for
// more (at most maxRetryAfter).
func retryDelay(interval time.Duration, fails int, err error) time.Duration {
	delay := jitter(backoff(interval, fails))
	if d, ok := agentapi.RetryAfter(err); ok && d > delay {
		delay = min(d, maxRetryAfter)
	}
	return delay
}

// jitter is d less a random part of up to half of it. Agents that failed
// together (a server restart, a network blip, an overloaded server
// dropping connections) would otherwise retry together, every one at the
// same instants, and a server that recovers would meet the whole fleet's
// reconnections, TLS handshakes included, in one burst: at 5,000 agents on
// two cores that burst outlasted the server's handshake timeout, and the
// failures fed themselves (docs/BENCHMARKS.md, "Fleet scale").
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d - rand.N(d/2)
}

// backoff is the delay after the given number of consecutive failures:
// the interval, doubled per failure after the first, at most maxBackoff
// intervals.
func backoff(interval time.Duration, fails int) time.Duration {
	d := interval
	for i := 1; i < fails && d < maxBackoff*interval; i++ {
		d *= 2
	}
	return min(d, maxBackoff*interval)
}

// Heartbeat sends one heartbeat. It carries the inventory when the
// inventory changed since the last successful heartbeat that carried one
// (compared as JSON), and none otherwise. When the driver cannot read the
// host (it vanished, hangs, fails) no heartbeat is sent: a host the agent
// cannot describe is not healthy, and the server marks it unhealthy once
// the heartbeats stop.
func (a *Agent) Heartbeat(ctx context.Context) error {
	return a.heartbeat(ctx, true)
}

// beatIfDue is the heartbeat loop's step, every interval: it reads the
// inventory, and sends a heartbeat when the inventory changed, when none
// was taken yet, or when the server's heartbeat interval (its answer's
// agentapi.HeartbeatResponse; never less than the agent's own interval)
// has about passed since the last one. A host whose server wants a
// heartbeat every 5 s thus costs it one request per 5 s while nothing
// changes, and a change still reaches it within an interval.
func (a *Agent) beatIfDue(ctx context.Context) error {
	return a.heartbeat(ctx, false)
}

// heartbeatDue reports whether a heartbeat must go without a change of
// the inventory. The caller holds hbMu.
func (a *Agent) heartbeatDue(now time.Time) bool {
	if a.lastBeat.IsZero() || a.beatEvery <= a.cfg.Interval {
		return true
	}
	// The loop wakes every interval after its last step ended: half an
	// interval of slack keeps a 5 s wish at 5 s, not 6.
	return now.Sub(a.lastBeat) >= a.beatEvery-a.cfg.Interval/2
}

// heartbeat sends a heartbeat when always is set, the inventory changed,
// or one is due (heartbeatDue).
func (a *Agent) heartbeat(ctx context.Context, always bool) error {
	if err := a.check(); err != nil {
		return err
	}
	a.hbMu.Lock()
	defer a.hbMu.Unlock()
	inv, err := a.inventory(ctx)
	if err != nil {
		return fmt.Errorf("no heartbeat sent, the inventory cannot be read: %w", err)
	}
	b, err := json.Marshal(inv)
	if err != nil {
		return fmt.Errorf("encode inventory: %w", err)
	}
	var req agentapi.HeartbeatRequest
	if !bytes.Equal(b, a.lastInv) {
		req.Inventory = inv
	}
	sent := time.Now()
	if !always && req.Inventory == nil && !a.heartbeatDue(sent) {
		return nil
	}
	resp, err := a.srv.Heartbeat(ctx, req)
	if err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	if req.Inventory != nil {
		a.lastInv = b
	}
	a.lastBeat, a.beatEvery = sent, resp.Interval()
	return nil
}

// driverCtx bounds one driver call.
func (a *Agent) driverCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, a.cfg.DriverTimeout)
}

// inventory reads the host's inventory and remembers its host ID and zone
// for metadata documents.
func (a *Agent) inventory(ctx context.Context) (*agentapi.Inventory, error) {
	dctx, cancel := a.driverCtx(ctx)
	defer cancel()
	inv, err := a.cfg.Driver.Inventory(dctx)
	if err != nil {
		return nil, err
	}
	fillMachine(&inv.Host)
	if k, ok := a.cfg.Runtime.(runtime.Kinder); ok {
		labels := maps.Clone(inv.Host.Labels)
		if labels == nil {
			labels = map[string]string{}
		}
		labels[runtime.LabelRuntime] = k.Kind()
		inv.Host.Labels = labels
	}
	if a.cfg.VolumeDir != "" || a.cfg.SharedVolumeDir != "" {
		labels := maps.Clone(inv.Host.Labels)
		if labels == nil {
			labels = map[string]string{}
		}
		if a.cfg.VolumeDir != "" {
			// Every host with a VolumeDir mounts the same volumes: the
			// server may send a detached volume's copy to any of them.
			labels[agentapi.LabelVolumeDirShared] = "true"
		}
		if a.cfg.SharedVolumeDir != "" {
			// The host can mount shared volumes (kind shared).
			labels[LabelSharedVolumes] = "true"
		}
		inv.Host.Labels = labels
	}
	if inv.Host.Underlay == "" && a.cfg.Underlay.IsValid() {
		inv.Host.Underlay = a.cfg.Underlay.String()
		if inv.Host.MTU == 0 {
			inv.Host.MTU = a.cfg.UnderlayMTU
		}
	}
	if a.cfg.DirectFingerprint != "" {
		inv.Host.DirectAddr, inv.Host.DirectFingerprint = a.cfg.DirectAddr, a.cfg.DirectFingerprint
	}
	var hcaErr string
	if a.cfg.HCAs != nil {
		hcas, err := a.cfg.HCAs()
		inv.Host.HCAs = hcas
		if err != nil {
			hcaErr = err.Error()
		}
	}
	a.hostMu.Lock()
	a.hostID, a.zone = inv.Host.ID, inv.Host.Zone
	a.hcas = slices.Clone(inv.Host.HCAs)
	logHCAErr := hcaErr != "" && hcaErr != a.hcaErr
	a.hcaErr = hcaErr
	a.hostMu.Unlock()
	if logHCAErr {
		a.log.Warn("agent: RDMA adapters", "err", hcaErr, "adapters", len(inv.Host.HCAs))
	}
	return inv, nil
}

// hostHCAs returns the host's RDMA adapters from the last inventory,
// reading the inventory once if none was read yet; none when it cannot be.
func (a *Agent) hostHCAs(ctx context.Context) []fleet.HCA {
	a.hostMu.Lock()
	read, hcas := a.hostID != "", a.hcas
	a.hostMu.Unlock()
	if !read {
		if inv, err := a.inventory(ctx); err == nil {
			hcas = inv.Host.HCAs
		}
	}
	return hcas
}

// hostInfo returns the host ID and zone, reading the inventory once if no
// heartbeat has yet. A failure leaves them empty: they are informational.
func (a *Agent) hostInfo(ctx context.Context) (id, zone string) {
	a.hostMu.Lock()
	id, zone = a.hostID, a.zone
	a.hostMu.Unlock()
	if id == "" {
		if inv, err := a.inventory(ctx); err == nil {
			id, zone = inv.Host.ID, inv.Host.Zone
		}
	}
	return id, zone
}

// Assignments returns the assignments the last reconcile pass fetched (nil
// before the first): what the host's GPUs are allocated to, for the metrics
// exporter's instance and tenant labels. It never waits for a pass. The
// slice is the caller's; the placements and maps in it are shared and must
// not be changed.
func (a *Agent) Assignments() []agentapi.Assignment {
	a.asgMu.Lock()
	defer a.asgMu.Unlock()
	return slices.Clone(a.assigned)
}

// setAssigned records the assignments a pass fetched.
func (a *Agent) setAssigned(as []agentapi.Assignment) {
	as = slices.Clone(as)
	if as == nil {
		as = []agentapi.Assignment{}
	}
	a.asgMu.Lock()
	a.assigned = as
	a.asgMu.Unlock()
}
