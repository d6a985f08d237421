// Package exporter serves a host's GPU metrics for Prometheus: `gpucloud
// agent --metrics-listen ADDR` exposes /metrics. Its Collector reads the
// driver at scrape time (gpu.Driver.Telemetry), so every scrape sees the
// GPUs as they are, and labels each GPU as NVIDIA's DCGM exporter does
// (gpu, UUID, modelName, Hostname; GPU_I_PROFILE and GPU_I_ID for a MIG
// instance), plus instance_id and tenant when the GPU or MIG instance is
// allocated to an instance on the host. It serves each reading twice: under
// DCGM's names, units and labels, so that existing Grafana dashboards work,
// and under Prometheus-conventional names in base units with snake-case
// labels (gpucloud_gpu_*; uuid, model_name, hostname, mig_profile,
// mig_instance). XID errors are a counter per GPU and XID code. With the
// agent's runtime (Config.Workloads) it also serves each running
// instance's CPU time and memory. docs/METRICS.md lists them.
//
// A reading the driver does not give (a counter the product lacks) is left
// out, never served as 0.
package exporter

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpucloud/gpucloud/agent/gpu"
	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/fleet"
)

// DefaultTimeout bounds one scrape's driver call when Config.Timeout is
// zero.
const DefaultTimeout = 10 * time.Second

// Label names. A DCGM_* series carries the DCGM exporter's spelling
// (LabelGPU to LabelGIID), a gpucloud_* series Prometheus's snake case
// (LabelGPU, LabelUUIDSnake and on). Both carry LabelInstanceID and
// LabelTenant when the GPU or MIG instance is allocated.
const (
	LabelGPU        = "gpu"
	LabelUUID       = "UUID"
	LabelModel      = "modelName"
	LabelHostname   = "Hostname"
	LabelGIProfile  = "GPU_I_PROFILE"
	LabelGIID       = "GPU_I_ID"
	LabelInstanceID = "instance_id"
	LabelTenant     = "tenant"

	LabelUUIDSnake     = "uuid"
	LabelModelSnake    = "model_name"
	LabelHostnameSnake = "hostname"
	LabelMIGProfile    = "mig_profile"
	LabelMIGInstance   = "mig_instance"
	LabelXID           = "xid"
)

// dcgmNames and snakeNames name the GPU labels (gpu, UUID, model, host,
// then a MIG instance's profile and ID) of the two families of metrics.
var (
	dcgmNames  = [...]string{LabelGPU, LabelUUID, LabelModel, LabelHostname, LabelGIProfile, LabelGIID}
	snakeNames = [...]string{LabelGPU, LabelUUIDSnake, LabelModelSnake, LabelHostnameSnake, LabelMIGProfile, LabelMIGInstance}
)

// Config is what a Collector reads from.
type Config struct {
	// Driver is the host's GPU driver; required.
	Driver gpu.Driver
	// Hostname is the Hostname label of every GPU series.
	Hostname string
	// Assignments returns the host's current assignments (agent.Agent's
	// Assignments); nil means no instance_id or tenant labels.
	Assignments func() []agentapi.Assignment
	// Workloads reads the CPU time and memory of the host's instances
	// (the agent's runtime, when it is a runtime.ResourceReader); nil
	// means no gpucloud_instance_* series. Only the instances of
	// Assignments are read.
	Workloads runtime.ResourceReader
	// Timeout bounds the driver call of one scrape (DefaultTimeout when
	// zero).
	Timeout time.Duration
	Log     *slog.Logger
}

// Collector is a prometheus.Collector of a host's GPUs. It is unchecked
// (Describe sends nothing): a MIG instance's series carry more labels than
// a GPU's, and an allocated GPU's more than a free one's.
type Collector struct {
	cfg Config
}

var _ prometheus.Collector = (*Collector)(nil)

// New returns a Collector over cfg.
func New(cfg Config) *Collector {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &Collector{cfg: cfg}
}

// metric is one metric family: its name, help and type.
type metric struct {
	name, help string
	typ        prometheus.ValueType
}

// The metrics. DCGM's names, help and units first, then the conventional
// ones.
var (
	dcgmUtil     = metric{"DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", prometheus.GaugeValue}
	dcgmFBUsed   = metric{"DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", prometheus.GaugeValue}
	dcgmFBFree   = metric{"DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", prometheus.GaugeValue}
	dcgmSMClock  = metric{"DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", prometheus.GaugeValue}
	dcgmPower    = metric{"DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", prometheus.GaugeValue}
	dcgmTemp     = metric{"DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", prometheus.GaugeValue}
	dcgmGRActive = metric{"DCGM_FI_PROF_GR_ENGINE_ACTIVE", "Ratio of time the graphics engine is active.", prometheus.GaugeValue}

	util     = metric{"gpucloud_gpu_utilization_ratio", "Fraction of the last sample period a kernel ran on the GPU.", prometheus.GaugeValue}
	memUsed  = metric{"gpucloud_gpu_memory_used_bytes", "GPU framebuffer memory in use.", prometheus.GaugeValue}
	memFree  = metric{"gpucloud_gpu_memory_free_bytes", "GPU framebuffer memory free.", prometheus.GaugeValue}
	smClock  = metric{"gpucloud_gpu_sm_clock_hertz", "Current SM clock of the GPU.", prometheus.GaugeValue}
	power    = metric{"gpucloud_gpu_power_watts", "Current power draw of the GPU.", prometheus.GaugeValue}
	temp     = metric{"gpucloud_gpu_temperature_celsius", "GPU core temperature.", prometheus.GaugeValue}
	xids     = metric{"gpucloud_gpu_xid_errors_total", "XID errors the GPU driver reported on the GPU since it started (the agent's start on NVML), by XID code.", prometheus.CounterValue}
	migUtil  = metric{"gpucloud_gpu_mig_utilization_ratio", "Fraction of time the graphics engine of a MIG instance was active.", prometheus.GaugeValue}
	upMetric = metric{"gpucloud_gpu_telemetry_up", "Whether the last scrape could read the GPUs (1) or not (0).", prometheus.GaugeValue}

	instCPU = metric{"gpucloud_instance_cpu_seconds_total", "CPU time (user and system) the instance's workload has used since it started.", prometheus.CounterValue}
	instMem = metric{"gpucloud_instance_memory_bytes", "Memory the instance's workload holds: its cgroup's, or the sum of its processes' resident sets.", prometheus.GaugeValue}
)

// Describe implements prometheus.Collector; it sends nothing, which makes
// the collector unchecked.
func (c *Collector) Describe(chan<- *prometheus.Desc) {}

// Collect implements prometheus.Collector: it reads the driver once and
// sends every reading it gave, then the instances' CPU time and memory.
// When the driver fails it sends gpucloud_gpu_telemetry_up 0 and an
// invalid metric carrying the error, so that the scrape reports it (the
// instances' series are still sent).
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	var as []agentapi.Assignment
	if c.cfg.Assignments != nil {
		as = c.cfg.Assignments()
	}
	c.collectInstances(ch, as)
	c.collectGPUs(ch, as)
}

// collectInstances sends the CPU time and memory of every instance of as
// whose workload the runtime can read.
func (c *Collector) collectInstances(ch chan<- prometheus.Metric, as []agentapi.Assignment) {
	if c.cfg.Workloads == nil {
		return
	}
	tenants := map[string]string{}
	for _, a := range as {
		if a.InstanceID != "" {
			tenants[a.InstanceID] = a.TenantID
		}
	}
	for _, id := range slices.Sorted(maps.Keys(tenants)) {
		r, ok := c.cfg.Workloads.Resources(id)
		if !ok {
			continue
		}
		l := labels{{LabelInstanceID, id}, {LabelTenant, tenants[id]}}
		send(ch, instCPU, l, r.CPUSeconds)
		send(ch, instMem, l, float64(r.MemoryBytes))
	}
}

// collectGPUs reads the driver once and sends every reading it gave.
func (c *Collector) collectGPUs(ch chan<- prometheus.Metric, as []agentapi.Assignment) {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.Timeout)
	defer cancel()
	tel, err := c.cfg.Driver.Telemetry(ctx)
	// The up series names its host, so that the collectors of several
	// hosts (gpucloud up's simulated fleet) share one registry.
	var up labels
	if c.cfg.Hostname != "" {
		up = labels{{LabelHostnameSnake, c.cfg.Hostname}}
	}
	if err != nil {
		c.cfg.Log.Warn("agent: GPU telemetry not read", "err", err)
		send(ch, upMetric, up, 0)
		ch <- prometheus.NewInvalidMetric(prometheus.NewDesc(upMetric.name, upMetric.help, nil, nil), err)
		return
	}
	send(ch, upMetric, up, 1)
	owners := ownersOf(as, len(tel))
	for _, t := range tel {
		vals := []string{strconv.Itoa(t.Index), t.UUID, t.Model, c.cfg.Hostname}
		h := owners.gpu[t.Index]
		dl, sl := h.label(named(dcgmNames[:4], vals)), h.label(named(snakeNames[:4], vals))
		if v := t.Utilization; v != nil {
			send(ch, dcgmUtil, dl, *v*100)
			send(ch, util, sl, *v)
		}
		if v := t.MemoryUsedBytes; v != nil {
			send(ch, dcgmFBUsed, dl, float64(*v>>20))
			send(ch, memUsed, sl, float64(*v))
		}
		if v := t.MemoryFreeBytes; v != nil {
			send(ch, dcgmFBFree, dl, float64(*v>>20))
			send(ch, memFree, sl, float64(*v))
		}
		if v := t.SMClockMHz; v != nil {
			send(ch, dcgmSMClock, dl, *v)
			send(ch, smClock, sl, *v*1e6)
		}
		if v := t.PowerWatts; v != nil {
			send(ch, dcgmPower, dl, *v)
			send(ch, power, sl, *v)
		}
		if v := t.TemperatureC; v != nil {
			send(ch, dcgmTemp, dl, *v)
			send(ch, temp, sl, *v)
		}
		// One series per XID code seen: a GPU without XIDs has none.
		for _, code := range slices.Sorted(maps.Keys(t.XIDErrors)) {
			send(ch, xids, append(slices.Clone(sl), label{LabelXID, strconv.Itoa(code)}), float64(t.XIDErrors[code]))
		}
		for _, in := range t.Instances {
			if in.EngineActive == nil {
				continue
			}
			profile := in.Profile
			if profile == "" {
				profile = "profile-" + strconv.Itoa(in.ProfileID)
			}
			mvals := append(slices.Clone(vals), profile, strconv.Itoa(in.ID))
			mh := owners.mig[[2]int{t.Index, in.Start}]
			send(ch, dcgmGRActive, mh.label(named(dcgmNames[:], mvals)), *in.EngineActive)
			send(ch, migUtil, mh.label(named(snakeNames[:], mvals)), *in.EngineActive)
		}
	}
}

// named pairs label names with values.
func named(names, values []string) labels {
	l := make(labels, len(names))
	for i := range names {
		l[i] = label{names[i], values[i]}
	}
	return l
}

type label struct{ name, value string }

type labels []label

// send sends one constant metric with the given labels.
func send(ch chan<- prometheus.Metric, m metric, l labels, v float64) {
	names := make([]string, len(l))
	values := make([]string, len(l))
	for i, x := range l {
		names[i], values[i] = x.name, x.value
	}
	ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(m.name, m.help, names, nil), m.typ, v, values...)
}

// holders are the instances a GPU or MIG instance is allocated to,
// instance ID to tenant.
type holders map[string]string

// label adds instance_id and tenant to l when there are holders: the
// instance and its tenant, or for a GPU several instances hold (a shared
// GPU, a MIG GPU's slices) the sorted instance IDs and distinct tenants,
// comma-separated, so that a GPU stays one series.
func (h holders) label(l labels) labels {
	if len(h) == 0 {
		return l
	}
	ids := slices.Sorted(maps.Keys(h))
	tenants := slices.Compact(slices.Sorted(maps.Values(h)))
	return append(slices.Clone(l), label{LabelInstanceID, strings.Join(ids, ",")}, label{LabelTenant, strings.Join(tenants, ",")})
}

// owners maps GPUs (by index) and MIG instances (by GPU index and start
// slot) to what holds them.
type owners struct {
	gpu map[int]holders
	mig map[[2]int]holders
}

// ownersOf reads the assignments' placements. A GPU is held by every
// instance with a device on it, whole, shared or a MIG slice; a MIG
// instance by the instance whose slice it is. A bare-metal placement
// without devices holds all n GPUs.
func ownersOf(as []agentapi.Assignment, n int) owners {
	o := owners{gpu: map[int]holders{}, mig: map[[2]int]holders{}}
	add := func(m map[int]holders, k int, id, tenant string) {
		if m[k] == nil {
			m[k] = holders{}
		}
		m[k][id] = tenant
	}
	for _, a := range as {
		p := a.Placement
		if p == nil || a.InstanceID == "" {
			continue
		}
		if p.Metal && len(p.Devices) == 0 {
			for i := range n {
				add(o.gpu, i, a.InstanceID, a.TenantID)
			}
		}
		for _, d := range p.Devices {
			add(o.gpu, d.GPU, a.InstanceID, a.TenantID)
			if d.Kind == fleet.MIGSlice {
				k := [2]int{d.GPU, d.MIGStart}
				if o.mig[k] == nil {
					o.mig[k] = holders{}
				}
				o.mig[k][a.InstanceID] = a.TenantID
			}
		}
	}
	return o
}
