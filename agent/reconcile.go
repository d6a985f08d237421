package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/gpucloud/gpucloud/agent/gpu"
	"github.com/gpucloud/gpucloud/agent/metadata"
	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
)

// state is where an instance is in the agent's hands.
type state int

const (
	// statePending: not started yet, or a start failed and is retried.
	statePending state = iota
	// stateRunning: the runtime runs (or ran) the workload.
	stateRunning
	// stateStopping: a stop was sent; the workload has not exited yet.
	stateStopping
	// stateDone: the terminal phase is queued. What is left is cleanup and
	// shipping the last output. The instance is not started again until the
	// server took the terminal report or the assignment went away.
	stateDone
)

// inst is what the agent keeps of one instance.
type inst struct {
	id       string
	a        agentapi.Assignment
	state    state
	attempts int  // failed start attempts that may succeed when retried
	starting bool // the starting phase was queued
	started  bool // the runtime knows the workload and has not been told to forget it
	cleaned  bool // MIG instances and metadata are released
	// scratchMade is set once this run's instance store is made
	// (scratch.go): a retried start keeps it.
	scratchMade bool
	drained     bool // the exited workload's output is all shipped
	// orphan is set once the assignment is gone: the workload is stopped
	// and cleaned up without reports.
	orphan bool
	// final is set once the server took the terminal report. The server
	// then releases the instance, so a later listing of it is a new run.
	final bool
	// gonePasses counts the passes since the assignment went, to bound how
	// long the agent tries to ship the last output.
	gonePasses int
	reports    []agentapi.StatusReport
	stopSince  time.Time
	// paused is whether the workload is paused (runtime.Pauser), known
	// once pauseKnown is set; pauseRefused once the runtime said it
	// cannot pause (logged once).
	paused, pauseKnown, pauseRefused bool
}

// Bounds of the retries of a pass.
const (
	// maxStartAttempts is how many passes a start failing with a transient
	// error (a busy GPU, a driver failure or timeout) is tried before the
	// instance is reported failed. A vanished driver does not count.
	maxStartAttempts = 5
	// maxDrainPasses is how many passes the agent keeps trying to ship the
	// last output of an instance whose assignment is gone.
	maxDrainPasses = 10
	// maxStopWait bounds how long the pass that stops a workload waits for
	// it to exit; a longer grace period goes on across passes.
	maxStopWait = 100 * time.Millisecond
)

// pass is what one reconcile pass knows of all the assignments.
type pass struct {
	listed map[string]bool
	// migOwner maps a MIG slot (GPU index, start) to the listed instance
	// whose placement holds it.
	migOwner map[[2]int]string
	// gpuUsers maps a GPU index to the listed instances placed on it.
	gpuUsers map[int][]string
	// fetched is the wall clock when the assignments were asked for.
	fetched time.Time
}

func newPass(as []agentapi.Assignment) *pass {
	p := &pass{listed: map[string]bool{}, migOwner: map[[2]int]string{}, gpuUsers: map[int][]string{}}
	for _, a := range as {
		p.listed[a.InstanceID] = true
		if a.Placement == nil {
			continue
		}
		for _, d := range a.Placement.Devices {
			p.gpuUsers[d.GPU] = append(p.gpuUsers[d.GPU], a.InstanceID)
			if d.Kind == fleet.MIGSlice {
				p.migOwner[[2]int{d.GPU, d.MIGStart}] = a.InstanceID
			}
		}
	}
	return p
}

// Step does one reconcile pass: it fetches the assignments, moves every
// instance toward its desired state, stops and cleans up instances whose
// assignment is gone, ships new output and sends the reports due. It
// returns the errors of the pass joined (after doing what it could); a
// failed fetch ends the pass at once, so that a server glitch is never read
// as "no assignments".
func (a *Agent) Step(ctx context.Context) error {
	if err := a.check(); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	list, fetched, err := a.fetch(ctx)
	if err != nil {
		return err
	}
	return a.pass(ctx, list, fetched)
}

// fetch asks the server for the host's assignments, and keeps them as the
// latest list known (watch.go).
func (a *Agent) fetch(ctx context.Context) (*agentapi.AssignmentList, time.Time, error) {
	fetched, gen := time.Now(), a.reports.Load()
	list, err := a.srv.Assignments(ctx)
	if err != nil {
		return nil, fetched, fmt.Errorf("fetch assignments: %w", err)
	}
	if list == nil {
		return nil, fetched, errors.New("fetch assignments: no answer")
	}
	a.latest.offer(list, fetched, gen, a.reports.Load(), false)
	return list, fetched, nil
}

// pass is the pass of Step over a list of assignments fetched (asked for)
// at fetched. The caller holds mu.
func (a *Agent) pass(ctx context.Context, list *agentapi.AssignmentList, fetched time.Time) error {
	a.setAssigned(list.Assignments)
	p := newPass(list.Assignments)
	p.fetched = fetched
	var errs []error
	seen := map[string]bool{}
	for _, as := range list.Assignments {
		if as.InstanceID == "" || seen[as.InstanceID] {
			a.log.Warn("agent: assignment without instance ID or duplicate ignored", "instance", as.InstanceID)
			continue
		}
		seen[as.InstanceID] = true
		if err := a.reconcile(ctx, p, as); err != nil {
			errs = append(errs, fmt.Errorf("instance %s: %w", as.InstanceID, err))
		}
	}
	ids := slices.Sorted(maps.Keys(a.insts))
	for _, id := range ids {
		if s := a.insts[id]; !p.listed[id] {
			if err := a.orphan(ctx, p, s); err != nil {
				errs = append(errs, fmt.Errorf("instance %s (withdrawn): %w", id, err))
			}
		}
	}
	for _, id := range ids {
		s := a.insts[id]
		for _, err := range []error{a.shipLogs(ctx, s), a.sendReports(ctx, s), a.settle(p, s)} {
			if err != nil {
				errs = append(errs, fmt.Errorf("instance %s: %w", id, err))
			}
		}
	}
	// Storage: unmount the volumes no instance uses, delete what is gone.
	// Instance stores of what is not running are wiped at once.
	errs = append(errs, a.releaseVolumes(), a.wipeUnusedScratches(), a.sweepStorage(ctx))
	return errors.Join(errs...)
}

// reconcile moves one listed instance toward its desired state.
func (a *Agent) reconcile(ctx context.Context, p *pass, as agentapi.Assignment) error {
	s := a.insts[as.InstanceID]
	if s != nil && s.state == stateDone && (s.final || s.orphan) {
		// The server released the instance (it took the terminal report,
		// or the assignment went) and assigns it again: a new run.
		a.retire(s)
		s = nil
	}
	if s != nil && s.orphan {
		// The previous run is still being stopped; the new one waits.
		return a.orphan(ctx, p, s)
	}
	if s == nil {
		s = &inst{id: as.InstanceID}
		a.insts[s.id] = s
	}
	s.a = as
	if as.Desired != agentapi.DesiredRun && as.Desired != agentapi.DesiredStop {
		return fmt.Errorf("unknown desired state %q", as.Desired)
	}
	a.notice(as, p.fetched)
	if !s.cleaned {
		// Every pass: a peer's address appears once its agent reports it.
		a.showStack(as)
	}
	switch s.state {
	case statePending:
		if as.Desired == agentapi.DesiredStop {
			if _, err := a.cfg.Runtime.Status(s.id); err == nil {
				// Started before this agent knew it (the agent restarted,
				// the runtime did not): stop it.
				a.adopt(s)
				return a.stop(ctx, p, s)
			}
			// Never started: nothing runs, but the server waits for the
			// stop, and a partial partition may be left to undo.
			return a.finish(ctx, p, s, &agentapi.StatusReport{Phase: agentapi.PhaseStopped})
		}
		return a.start(ctx, p, s)
	case stateRunning:
		if as.Desired == agentapi.DesiredStop {
			return a.stop(ctx, p, s)
		}
		return a.watch(ctx, p, s)
	case stateStopping:
		return a.stop(ctx, p, s)
	default:
		return a.cleanup(ctx, p, s)
	}
}

// notice shows the server's notices on the instance's metadata endpoint:
// the instance-action of a spot reclaim or of a group's scale-in (any
// interruption with an action, whatever the instance's market), or a
// rebalance recommendation. A notice the server withdrew disappears. It
// also shows the completion lock the server holds for the instance.
func (a *Agent) notice(as agentapi.Assignment, fetched time.Time) {
	md := a.cfg.Metadata
	if md == nil {
		return
	}
	var lock *cloud.ScaleLock
	if as.ScaleIn != nil {
		lock = as.ScaleIn.Lock
	}
	md.SyncLock(as.InstanceID, lock, fetched)
	in := as.Interruption
	var act *metadata.Action
	rebalance := time.Time{}
	switch {
	case in == nil:
	case in.Action != "":
		act = &metadata.Action{Action: in.Action, Time: in.Deadline, Reason: in.Reason}
		rebalance = in.NoticedAt
	case in.Reason == cloud.ReclaimRebalance:
		rebalance = in.NoticedAt
	}
	if err := md.SetAction(as.InstanceID, act); err != nil {
		a.log.Warn("agent: bad instance action from the server", "instance", as.InstanceID, "err", err)
	}
	md.SetRebalance(as.InstanceID, rebalance)
}

// showStack shows the instance its place in its stack's job on its
// metadata endpoint (GET /v1/stack), as the server computed it, or
// withdraws it when the assignment has none.
func (a *Agent) showStack(as agentapi.Assignment) {
	if md := a.cfg.Metadata; md != nil {
		md.SetStack(as.InstanceID, metadataStack(as.Stack))
	}
}

// metadataStack is a stack job as the metadata endpoint shows it; nil for
// none.
func metadataStack(st *agentapi.StackInfo) *metadata.Stack {
	if st == nil {
		return nil
	}
	out := &metadata.Stack{Stack: st.Name, Resource: st.Resource, Rank: st.Rank, WorldSize: st.WorldSize,
		Peers: make([]metadata.Peer, 0, len(st.Peers)), Env: maps.Clone(st.Env)}
	for _, p := range st.Peers {
		out.Peers = append(out.Peers, metadata.Peer{Rank: p.Rank, InstanceID: p.InstanceID, Address: p.Address})
	}
	return out
}

// addStackEnv adds the launchers' environment of the instance's stack job
// (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK, NODE_RANK, NNODES) to env;
// a variable the tenant's own environment sets keeps the tenant's value.
// MASTER_ADDR is there once the job's master reported its address: a
// workload started before (rank 0 itself, which starts first) reads GET
// /v1/stack on its metadata endpoint, which shows the address as soon as
// the server has it, or is given it by its template
// (${head.private_address}).
func addStackEnv(env map[string]string, st *agentapi.StackInfo) {
	if st == nil {
		return
	}
	for k, v := range st.Env {
		if _, ok := env[k]; !ok {
			env[k] = v
		}
	}
}

// address is the running workload's private address as the runtime knows
// it (runtime.Addresser), for the running report; "" when it does not.
func (a *Agent) address(id string) string {
	if ad, ok := a.cfg.Runtime.(runtime.Addresser); ok {
		if ip, ok := ad.Address(id); ok {
			return ip.String()
		}
	}
	return ""
}

// orphan handles an instance whose assignment is gone: the server
// terminated it behind the agent's back. It is stopped and cleaned up
// without reports.
func (a *Agent) orphan(ctx context.Context, p *pass, s *inst) error {
	if !s.orphan {
		s.orphan, s.reports = true, nil
		if s.state != stateDone {
			a.log.Info("agent: assignment withdrawn, stopping the instance", "instance", s.id)
		}
	}
	switch s.state {
	case statePending:
		return a.finish(ctx, p, s, nil)
	case stateRunning, stateStopping:
		return a.stop(ctx, p, s)
	default:
		return a.cleanup(ctx, p, s)
	}
}

// finish queues the terminal report (none for an orphan) and cleans up.
func (a *Agent) finish(ctx context.Context, p *pass, s *inst, r *agentapi.StatusReport) error {
	s.state = stateDone
	a.untrack(s.id)
	if r != nil && !s.orphan {
		s.reports = append(s.reports, *r)
		a.log.Info("agent: instance finished", "instance", s.id, "phase", r.Phase, "message", r.Message)
	}
	return a.cleanup(ctx, p, s)
}

// start applies the partition and starts the workload. A failure that
// retrying cannot fix, or a transient one repeated maxStartAttempts times,
// reports the instance failed.
func (a *Agent) start(ctx context.Context, p *pass, s *inst) error {
	if st, err := a.cfg.Runtime.Status(s.id); err == nil {
		// The runtime already knows the workload: it outlived the agent.
		// Adopt it rather than run the job twice; an exited one is
		// reported.
		a.adopt(s)
		if st.State == runtime.StateRunning {
			s.reports = append(s.reports, agentapi.StatusReport{Phase: agentapi.PhaseRunning, PrivateAddress: a.address(s.id)})
			return nil
		}
		return a.watch(ctx, p, s)
	}
	err := a.launch(ctx, s)
	if err == nil || ctx.Err() != nil {
		return err
	}
	if !errors.Is(err, gpu.ErrUnavailable) {
		s.attempts++
	}
	if definitive(err) || s.attempts >= maxStartAttempts {
		return a.finish(ctx, p, s, &agentapi.StatusReport{Phase: agentapi.PhaseFailed, Message: err.Error()})
	}
	return fmt.Errorf("start (attempt %d of %d): %w", s.attempts, maxStartAttempts, err)
}

// adopt takes over a workload the runtime runs (or ran) though this agent
// did not start it. Its output so far is taken as shipped: an earlier agent
// did, or it is lost, but it is not sent twice.
func (a *Agent) adopt(s *inst) {
	s.state, s.started = stateRunning, true
	a.track(s.id, s.a.Placement, nil)
	if _, ok := a.logOff[s.id]; !ok {
		if _, end, err := a.cfg.Runtime.Logs(s.id, 1<<62); err == nil {
			a.logOff[s.id] = end
		}
	}
}

// launch does the work of a start; every step is idempotent.
func (a *Agent) launch(ctx context.Context, s *inst) error {
	if err := runtime.ValidateID(s.id); err != nil {
		return err
	}
	pl := s.a.Placement
	if pl == nil {
		return &startError{"the assignment has no placement"}
	}
	if err := a.applyPartition(ctx, pl); err != nil {
		return err
	}
	dctx, cancel := a.driverCtx(ctx)
	devices, err := a.cfg.Driver.Devices(dctx, pl)
	cancel()
	if err != nil {
		return fmt.Errorf("find the devices of the placement: %w", err)
	}
	spec, err := a.runSpec(ctx, s, devices)
	if err != nil {
		return err
	}
	if _, ok := a.logOff[s.id]; !ok {
		// Output already in the file was shipped by an earlier run (or by
		// an earlier agent); only what this run writes is new.
		// The log may be rotated: its end counts all it ever held.
		a.logOff[s.id], _ = runtime.LogEnd(spec.LogPath)
	}
	if err := a.serveMetadata(ctx, s, devices, &spec); err != nil {
		return err
	}
	a.serveDNS(s, &spec)
	if !s.starting {
		s.starting = true
		s.reports = append(s.reports, agentapi.StatusReport{Phase: agentapi.PhaseStarting})
	}
	startedAt := time.Now()
	if err := a.cfg.Runtime.Start(ctx, spec); err != nil {
		// A runtime that cannot run the instance's image refuses it (the
		// process runtime after a restart from containers); the failure
		// names this host, which the runtime does not know.
		var ie *runtime.ImageError
		if errors.As(err, &ie) && ie.Host == "" {
			ie.Host, _ = a.hostInfo(ctx)
		}
		return err
	}
	s.state, s.started = stateRunning, true
	rep := agentapi.StatusReport{Phase: agentapi.PhaseRunning, Devices: devices, PrivateAddress: a.address(s.id),
		StartMillis: max(time.Since(startedAt).Milliseconds(), 1)}
	if it, ok := a.cfg.Runtime.(runtime.ImageTimer); ok {
		if d, ok := it.ImageTime(s.id); ok {
			rep.ImageMillis = max(d.Milliseconds(), 1)
		}
	}
	s.reports = append(s.reports, rep)
	a.track(s.id, pl, devices)
	a.log.Info("agent: instance running", "instance", s.id, "devices", devices)
	return nil
}

// runSpec describes the run of s on devices for the runtime: command,
// limits, device nodes (the host's RDMA adapters' too, for an instance
// given them: addRDMA), sharing, environment, and its work, log and
// volume directories and instance store, which it creates.
func (a *Agent) runSpec(ctx context.Context, s *inst, devices []string) (runtime.Spec, error) {
	as, pl := s.a, s.a.Placement
	spec := runtime.Spec{
		InstanceID: s.id, Image: as.Image, Command: as.Command, Devices: devices,
		Grace:   time.Duration(as.GraceSeconds) * time.Second,
		WorkDir: filepath.Join(a.cfg.DataDir, "instances", s.id),
		LogPath: filepath.Join(a.cfg.DataDir, "logs", s.id+".log"),
		Env:     maps.Clone(as.Env),
	}
	spec.TenantID = as.TenantID // the instance network puts a tenant's instances together
	if as.Network != nil {
		n, err := instanceNetwork(as.Network)
		if err != nil {
			return spec, fmt.Errorf("instance %s: network: %w (%w)", s.id, err, runtime.ErrInvalid)
		}
		spec.Network = n
	}
	if err := share(pl, &spec); err != nil {
		return spec, err
	}
	// The limits and device nodes a container runtime enforces.
	spec.CPUMilli, spec.MemoryMiB = pl.CPUMilli, pl.MemoryMiB
	if err := a.deviceNodes(ctx, pl, &spec); err != nil {
		return spec, err
	}
	if err := os.MkdirAll(filepath.Dir(spec.LogPath), 0o750); err != nil {
		return spec, err
	}
	vols, err := a.volumeDirs(as)
	if err != nil {
		return spec, err
	}
	if len(vols) == 0 {
		if spec.WorkDir, err = a.workDir(s.id); err != nil {
			return spec, err
		}
	} else if err := os.MkdirAll(spec.WorkDir, 0o750); err != nil {
		// Unused (the workload works in its first volume), as before.
		return spec, err
	}
	if spec.Env == nil {
		spec.Env = map[string]string{}
	}
	addStackEnv(spec.Env, as.Stack)
	a.addRDMA(ctx, &as, &spec)
	if len(vols) > 0 {
		spec.Volumes = vols
		spec.WorkDir = vols[0]
	}
	if spec.Scratch, err = a.scratch(s); err != nil {
		return spec, err
	}
	return spec, nil
}

// serveMetadata publishes the metadata document of s, when the agent
// serves metadata, and tells spec where the workload finds it: a handler
// the runtime serves in the workload's network namespace, or an address
// on the host.
func (a *Agent) serveMetadata(ctx context.Context, s *inst, devices []string, spec *runtime.Spec) error {
	md := a.cfg.Metadata
	if md == nil {
		return nil
	}
	as, pl := s.a, s.a.Placement
	host, zone := a.hostInfo(ctx)
	if pl.HostID != "" {
		host = pl.HostID
	}
	md.Set(s.id, metadata.Document{Offering: as.Offering, GPUs: devices, Tags: as.Tags, Zone: zone, Host: host,
		Market: string(as.Market), SpotRequestID: as.SpotRequestID})
	if _, ok := a.cfg.Runtime.(runtime.MetadataServer); ok {
		// Served in the workload's own network namespace: nothing listens
		// on the host.
		spec.Metadata = md.Handler(s.id)
		return nil
	}
	addr, err := md.Listen(s.id)
	if err != nil {
		return err
	}
	spec.MetadataURL = "http://" + addr
	return nil
}

// MIGNamer is implemented by GPU drivers that can name a MIG slice as
// the driver's device nodes do (its GPU and compute instance IDs), which a
// container runtime needs to give a workload its slice's nvidia-caps
// nodes. The sim and NVML drivers implement it; a driver without it gets
// MIG workloads with their parent GPU's node only.
type MIGNamer interface {
	MIGIDs(ctx context.Context, gpu, start int) (gi, ci int, err error)
}

// RenderNamer is implemented by GPU drivers of AMD hosts: the DRM render
// minors (/dev/dri/renderD<minor>) of a placement's GPUs, compute
// partitions or VFs, which a container runtime allows the workload with
// /dev/kfd. It returns nil on a host of another vendor. The sim driver
// implements it.
type RenderNamer interface {
	RenderMinors(ctx context.Context, p *fleet.Placement) ([]int, error)
}

// deviceNodes fills the GPU indexes and MIG slices of a placement into
// the spec (for AMD GPUs their render nodes): the device nodes a container
// runtime lets the workload open.
func (a *Agent) deviceNodes(ctx context.Context, pl *fleet.Placement, spec *runtime.Spec) error {
	if rn, ok := a.cfg.Driver.(RenderNamer); ok && len(pl.Devices) > 0 {
		dctx, cancel := a.driverCtx(ctx)
		minors, err := rn.RenderMinors(dctx, pl)
		cancel()
		if err != nil {
			return fmt.Errorf("name the render nodes of the AMD GPUs: %w", err)
		}
		if len(minors) > 0 {
			spec.RenderMinors = minors
			return nil
		}
	}
	namer, _ := a.cfg.Driver.(MIGNamer)
	for _, d := range pl.Devices {
		switch d.Kind {
		case fleet.Whole, fleet.Share:
			spec.GPUIndexes = append(spec.GPUIndexes, d.GPU)
		case fleet.MIGSlice:
			if namer == nil {
				continue
			}
			dctx, cancel := a.driverCtx(ctx)
			gi, ci, err := namer.MIGIDs(dctx, d.GPU, d.MIGStart)
			cancel()
			if err != nil {
				return fmt.Errorf("name the MIG instance at slot %d of gpu %d: %w", d.MIGStart, d.GPU, err)
			}
			spec.MIG = append(spec.MIG, runtime.MIGDevice{GPU: d.GPU, GI: gi, CI: ci})
		}
	}
	return nil
}

// watch reports a running workload that exited.
func (a *Agent) watch(ctx context.Context, p *pass, s *inst) error {
	st, err := a.cfg.Runtime.Status(s.id)
	if errors.Is(err, runtime.ErrNotFound) {
		s.started = false
		return a.finish(ctx, p, s, &agentapi.StatusReport{Phase: agentapi.PhaseFailed, Message: "the runtime lost track of the workload"})
	}
	if err != nil {
		return err
	}
	if st.State != runtime.StateExited {
		return a.syncPause(ctx, s)
	}
	return a.finish(ctx, p, s, exitReport(agentapi.PhaseExited, st))
}

// stop stops the workload: SIGTERM, then SIGKILL after the grace period the
// runtime got at start. The first pass waits a little for the exit; the
// grace period goes on in the runtime, and later passes only look whether
// the workload is gone, so that many stopping workloads do not slow a pass.
func (a *Agent) stop(ctx context.Context, p *pass, s *inst) error {
	var wait time.Duration
	if s.state != stateStopping {
		s.state, s.stopSince = stateStopping, a.cfg.Now()
		wait = min(a.cfg.Interval, maxStopWait)
	}
	// Stop is idempotent and goes on escalating after its context ends, so
	// calling it again with no time to wait just makes sure it was sent.
	wctx, cancel := context.WithTimeout(ctx, wait)
	err := a.cfg.Runtime.Stop(wctx, s.id)
	cancel()
	var r *agentapi.StatusReport
	switch {
	case errors.Is(err, runtime.ErrNotFound):
		s.started = false
		r = &agentapi.StatusReport{Phase: agentapi.PhaseStopped}
	case err != nil && (ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded)):
		return err
	default:
		st, err := a.cfg.Runtime.Status(s.id)
		if err != nil {
			return err
		}
		if st.State != runtime.StateExited {
			return nil // still within its grace period
		}
		r = exitReport(agentapi.PhaseStopped, st)
	}
	a.log.Info("agent: instance stopped", "instance", s.id, "after", a.cfg.Now().Sub(s.stopSince))
	if s.orphan {
		r = nil
	}
	return a.finish(ctx, p, s, r)
}

// exitReport is the report of an exited workload.
func exitReport(phase string, st runtime.Status) *agentapi.StatusReport {
	code := st.ExitCode
	r := &agentapi.StatusReport{Phase: phase, ExitCode: &code}
	if st.Signal != "" {
		r.Message = "killed by " + st.Signal
	}
	return r
}

// cleanup releases what the instance held besides its runtime entry: its
// metadata and its MIG instances. It is retried every pass until it works.
func (a *Agent) cleanup(ctx context.Context, p *pass, s *inst) error {
	if s.cleaned {
		return nil
	}
	if md := a.cfg.Metadata; md != nil {
		md.Delete(s.id)
	}
	if err := a.releasePartition(ctx, p, s); err != nil {
		return fmt.Errorf("clean up: %w", err)
	}
	s.cleaned = true
	return nil
}

// settle runs at the end of a pass: it tells the runtime to forget a
// finished workload once its output is shipped, and forgets an instance
// whose assignment is gone once nothing is left to do for it.
func (a *Agent) settle(p *pass, s *inst) error {
	if s.state != stateDone {
		return nil
	}
	listed := p.listed[s.id]
	if !listed {
		s.gonePasses++
	}
	if s.started && (s.drained || s.gonePasses > maxDrainPasses) {
		if err := a.cfg.Runtime.Remove(s.id); err != nil && !errors.Is(err, runtime.ErrNotFound) {
			return fmt.Errorf("remove from runtime: %w", err)
		}
		s.started = false
	}
	if !listed && !s.started && s.cleaned {
		a.forget(s)
	}
	return nil
}

// retire forgets a finished instance before a new run of it starts.
func (a *Agent) retire(s *inst) {
	if s.started {
		if err := a.cfg.Runtime.Remove(s.id); err != nil && !errors.Is(err, runtime.ErrNotFound) {
			a.log.Warn("agent: remove finished workload", "instance", s.id, "err", err)
		}
	}
	a.forget(s)
}

func (a *Agent) forget(s *inst) {
	a.untrack(s.id)
	delete(a.insts, s.id)
	if s.drained {
		delete(a.logOff, s.id)
	}
}

// startError is a start failure that retrying cannot fix.
type startError struct{ msg string }

func (e *startError) Error() string { return e.msg }

// definitive reports whether a start error is final: a bad request or a
// placement that does not fit the host, as opposed to a busy GPU, a driver
// failure or a timeout.
func definitive(err error) bool {
	var se *startError
	return errors.As(err, &se) ||
		errors.Is(err, gpu.ErrNotSupported) || errors.Is(err, gpu.ErrInvalid) || errors.Is(err, gpu.ErrNotFound) ||
		errors.Is(err, runtime.ErrInvalid) || errors.Is(err, errors.ErrUnsupported)
}

// instanceNetwork converts the server's InstanceNetwork into the
// runtime's Network; an address, prefix or MAC it cannot read is an
// error, an empty one stays zero (the runtime's network checks that it
// has what it needs).
func instanceNetwork(in *agentapi.InstanceNetwork) (*runtime.Network, error) {
	n := &runtime.Network{
		ID: in.NetworkID, Name: in.NetworkName, VNI: in.VNI, MAC: in.MAC,
		SecurityGroups: slices.Clone(in.SecurityGroups), DNSNames: slices.Clone(in.DNSNames),
	}
	var errs []error
	prefix := func(what, s string) netip.Prefix {
		if s == "" {
			return netip.Prefix{}
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s %q: %w", what, s, err))
		}
		return p
	}
	addr := func(what, s string) netip.Addr {
		if s == "" {
			return netip.Addr{}
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s %q: %w", what, s, err))
		}
		return a
	}
	n.CIDR, n.Subnet = prefix("CIDR", in.CIDR), prefix("subnet", in.SubnetCIDR)
	n.Gateway, n.Addr = addr("gateway", in.Gateway), addr("address", in.Address)
	n.Public = addr("public address", in.PublicAddress)
	if _, err := net.ParseMAC(in.MAC); err != nil && in.MAC != "" {
		errs = append(errs, fmt.Errorf("MAC %q: %w", in.MAC, err))
	}
	return n, errors.Join(errs...)
}
