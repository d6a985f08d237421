package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/gpucloud/gpucloud/agent/gpu"
	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
)

// DefaultMetricsInterval is the sampling period when
// Config.MetricsInterval is zero.
const DefaultMetricsInterval = 15 * time.Second

// maxReportRetries bounds how often one SampleMetrics call sends its report
// again without a sample the server refused (an instance that just left
// the host).
const maxReportRetries = 3

// target is what the sampler keeps of one instance whose workload runs.
type target struct {
	placement *fleet.Placement
	// devices are the instance's GPU or MIG UUIDs; nil until known (an
	// adopted workload's are looked up by the sampler).
	devices []string
	// cpuSec and cpuAt are the workload's CPU time at the last sample, for
	// the next one's rate; cpuOK says whether there is one.
	cpuSec float64
	cpuAt  time.Time
	cpuOK  bool
}

// vcpus is the instance's share of the host's CPUs: what its offering
// allocated.
func (t *target) vcpus() float64 {
	if t.placement == nil {
		return 0
	}
	return float64(t.placement.CPUMilli) / 1000
}

// track starts sampling an instance whose workload runs. devices may be
// nil when unknown.
func (a *Agent) track(id string, p *fleet.Placement, devices []string) {
	a.smu.Lock()
	defer a.smu.Unlock()
	if t := a.targets[id]; t != nil {
		if devices != nil {
			t.devices = slices.Clone(devices)
		}
		return
	}
	a.targets[id] = &target{placement: p, devices: slices.Clone(devices)}
}

// untrack stops sampling an instance. On a simulated host its devices'
// load goes back to zero until another workload declares one.
func (a *Agent) untrack(id string) {
	a.smu.Lock()
	t := a.targets[id]
	delete(a.targets, id)
	a.smu.Unlock()
	if t == nil {
		return
	}
	if ls, ok := a.cfg.Driver.(gpu.LoadSimulator); ok {
		for _, u := range t.devices {
			_ = ls.SetLoad(u, 0) // a device that went away has no load to reset
		}
	}
}

// SampleMetrics takes one utilization sample of every instance whose
// workload runs and sends them in one report (Run calls it every
// MetricsInterval). GPU utilization comes from the driver (on a simulated
// host, the load each workload set on its metadata endpoint); CPU
// utilization is the runtime's CPU time over the interval since the last
// sample, per vCPU of the instance (from the second sample of a workload
// on). A value that cannot be read is left out. A report the server refuses
// because an instance has just left the host is sent again without it; any
// other failure is returned, and the next call samples afresh. It never
// waits for a reconcile pass.
func (a *Agent) SampleMetrics(ctx context.Context) error {
	if err := a.check(); err != nil {
		return err
	}
	a.sampleMu.Lock()
	defer a.sampleMu.Unlock()
	a.smu.Lock()
	ids := slices.Sorted(maps.Keys(a.targets))
	snap := make(map[string]target, len(ids))
	for _, id := range ids {
		snap[id] = *a.targets[id]
	}
	a.smu.Unlock()
	if len(ids) == 0 {
		return nil
	}
	var errs []error
	for _, id := range ids {
		t := snap[id]
		if t.devices != nil || t.placement == nil {
			continue
		}
		dctx, cancel := a.driverCtx(ctx)
		devices, err := a.cfg.Driver.Devices(dctx, t.placement)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("instance %s: find its devices: %w", id, err))
			continue
		}
		if devices == nil {
			devices = []string{}
		}
		t.devices = devices
		snap[id] = t
		a.track(id, t.placement, devices)
	}
	a.simulateLoad(ids, snap)
	mem, err := a.gpuMemory(ctx, snap)
	if err != nil {
		errs = append(errs, err)
	}
	usage, _ := a.cfg.Runtime.(runtime.UsageReader)
	var samples []agentapi.InstanceSample
	for _, id := range ids {
		t := snap[id]
		smp := agentapi.InstanceSample{InstanceID: id, At: a.cfg.Now().UTC()}
		if len(t.devices) > 0 {
			dctx, cancel := a.driverCtx(ctx)
			v, err := a.cfg.Driver.Utilization(dctx, t.devices)
			cancel()
			switch {
			case err == nil:
				v = min(max(v, 0), 1)
				smp.GPUUtilization = &v
			case !errors.Is(err, gpu.ErrNotSupported):
				errs = append(errs, fmt.Errorf("instance %s: read GPU utilization: %w", id, err))
			}
		}
		if usage != nil {
			smp.CPUUtilization = a.cpuUtilization(id, usage, t.vcpus())
		}
		if m, ok := mem[id]; ok {
			smp.GPUMemoryUsedBytes = &m
		}
		if smp.GPUUtilization != nil || smp.CPUUtilization != nil || smp.GPUMemoryUsedBytes != nil {
			samples = append(samples, smp)
		}
	}
	for chunk := range slices.Chunk(samples, agentapi.MaxMetricSamples) {
		if err := a.sendMetrics(ctx, chunk); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// cpuUtilization reads the workload's CPU time and returns its rate since
// the previous reading per vCPU, clamped to [0, 1]; nil for a first
// reading, one that went backwards, or an instance without vCPUs.
func (a *Agent) cpuUtilization(id string, usage runtime.UsageReader, vcpus float64) *float64 {
	sec, ok := usage.Usage(id)
	now := a.cfg.Now()
	a.smu.Lock()
	defer a.smu.Unlock()
	t := a.targets[id]
	if t == nil || !ok {
		return nil
	}
	prevSec, prevAt, prevOK := t.cpuSec, t.cpuAt, t.cpuOK
	t.cpuSec, t.cpuAt, t.cpuOK = sec, now, true
	dt := now.Sub(prevAt).Seconds()
	if !prevOK || dt <= 0 || sec < prevSec || vcpus <= 0 {
		return nil
	}
	v := min((sec-prevSec)/dt/vcpus, 1)
	return &v
}

// simulateLoad passes the loads workloads set on their metadata endpoints
// to a simulated driver: each device gets the sum of its workloads' loads
// (a shared GPU is as busy as its tenants together), at most 1; a
// workload that set none counts 0.
func (a *Agent) simulateLoad(ids []string, snap map[string]target) {
	ls, ok := a.cfg.Driver.(gpu.LoadSimulator)
	md := a.cfg.Metadata
	if !ok || md == nil {
		return
	}
	loads := map[string]float64{}
	for _, id := range ids {
		v, _ := md.Load(id)
		for _, u := range snap[id].devices {
			loads[u] = min(loads[u]+v, 1)
		}
	}
	for u, v := range loads {
		if err := ls.SetLoad(u, v); err != nil {
			a.log.Debug("agent: simulated load not set", "device", u, "err", err)
		}
	}
}

// sendMetrics sends samples; when the server refuses the report for an
// instance that is not on the host (any more), it sends the rest again.
func (a *Agent) sendMetrics(ctx context.Context, samples []agentapi.InstanceSample) error {
	for try := 0; len(samples) > 0; try++ {
		err := a.srv.ReportMetrics(ctx, agentapi.MetricsReport{Samples: samples, SentAt: a.cfg.Now().UTC()})
		if err == nil {
			return nil
		}
		var ce *cloud.Error
		id := ""
		if errors.As(err, &ce) && ce.Code == cloud.NotFound {
			id, _ = ce.Details["id"].(string)
		}
		i := slices.IndexFunc(samples, func(s agentapi.InstanceSample) bool { return s.InstanceID == id })
		if i < 0 || try >= maxReportRetries {
			return fmt.Errorf("report metrics of %d instances: %w", len(samples), err)
		}
		a.log.Info("agent: metrics of an instance no longer on this host dropped", "instance", id)
		samples = slices.DeleteFunc(slices.Clone(samples), func(s agentapi.InstanceSample) bool { return s.InstanceID == id })
	}
	return nil
}

// sampleLoop calls SampleMetrics every MetricsInterval until ctx ends. A
// failure is logged; the next tick samples and sends afresh.
func (a *Agent) sampleLoop(ctx context.Context) {
	t := time.NewTicker(a.cfg.MetricsInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sctx, cancel := context.WithTimeout(ctx, max(a.cfg.MetricsInterval, a.cfg.DriverTimeout))
		err := a.SampleMetrics(sctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			a.log.Warn("agent: metrics failed", "err", err)
		}
	}
}

// recordLock is the metadata endpoints' LockHook: it records a workload's
// completion lock with the control plane, synchronously, so that the
// workload's PUT or DELETE answers only once the lock counts. The
// endpoints call it with the latest lock each instance's workload asked
// for, one call at a time and at most one per interval per instance,
// and only for the changes within the instance's budget (metadata's
// lock.go): whatever a workload sends, it makes its agent spend little of
// the host credential's rate on it.
func (a *Agent) recordLock(ctx context.Context, instanceID string, lock *cloud.ScaleLock) (*cloud.ScaleIn, error) {
	req := agentapi.LockRequest{Locked: lock != nil}
	if lock != nil {
		req.Reason = lock.Reason
	}
	si, err := a.srv.SetScaleInLock(ctx, instanceID, req)
	if err != nil {
		return nil, err
	}
	if si == nil {
		si = &cloud.ScaleIn{}
	}
	return si, nil
}

// gpuMemory reads the framebuffer memory in use on the whole GPUs of each
// instance that holds only whole GPUs, from one Telemetry call: the GPU's
// memory is the instance's alone. MIG slices and shares are left out (the
// drivers report memory per GPU, which a share has neighbours on, and not
// per MIG device). A driver without telemetry gives nothing.
func (a *Agent) gpuMemory(ctx context.Context, snap map[string]target) (map[string]uint64, error) {
	whole := map[string][]string{}
	for id, t := range snap {
		if t.placement == nil || len(t.placement.Devices) == 0 || t.placement.Metal {
			continue
		}
		var uuids []string
		for _, d := range t.placement.Devices {
			if d.Kind != fleet.Whole || d.UUID == "" {
				uuids = nil
				break
			}
			uuids = append(uuids, d.UUID)
		}
		if uuids != nil {
			whole[id] = uuids
		}
	}
	if len(whole) == 0 {
		return nil, nil
	}
	dctx, cancel := a.driverCtx(ctx)
	tel, err := a.cfg.Driver.Telemetry(dctx)
	cancel()
	if errors.Is(err, gpu.ErrNotSupported) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read GPU memory: %w", err)
	}
	used := map[string]uint64{}
	for _, g := range tel {
		if g.MemoryUsedBytes != nil && !g.MIG {
			used[g.UUID] = *g.MemoryUsedBytes
		}
	}
	out := map[string]uint64{}
	for id, uuids := range whole {
		var sum uint64
		ok := true
		for _, u := range uuids {
			v, found := used[u]
			if !found {
				ok = false
				break
			}
			sum += v
		}
		if ok {
			out[id] = sum
		}
	}
	return out, nil
}
