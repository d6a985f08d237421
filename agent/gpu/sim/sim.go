// Package sim is a simulated GPU host that implements gpu.Driver. It lets
// `gpucloud up` run a whole cloud on a laptop and lets agent tests exercise
// MIG layouts, busy GPUs and broken drivers without hardware.
//
// The simulation is faithful where the agent's decisions depend on it: MIG
// requests are checked against the catalog's profile table (start slots,
// memory slots, compute slices, one "+me" per GPU) exactly as on real GPUs,
// MIG mode cannot change under processes or instances, and UUIDs are stable
// across restarts because they derive from the host ID. Tests can make the
// host fail, hang or vanish (see Fail, Hang, Vanish, Recover).
//
// A simulated GPU runs no kernels, so its utilization is what its workloads
// say it is: the agent passes the load a workload sets on its metadata
// endpoint (PUT /v1/load) to SetLoad, and Utilization reports it (0 until
// set). A MIG instance has a load of its own; the GPU's load is that of the
// workloads using it whole or shared.
package sim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/gpucloud/gpucloud/agent/gpu"
	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/fleet"
)

var (
	_ gpu.Driver        = (*Host)(nil)
	_ gpu.LoadSimulator = (*Host)(nil)
)

// Host is a simulated GPU host. It is safe for concurrent use.
type Host struct {
	// spec and model are fixed at New and read without the lock.
	spec  Spec
	model *catalog.Model // nil on a CPU-only host

	mu     sync.Mutex
	gpus   []simGPU
	faults faults
}

type simGPU struct {
	uuid string
	mig  bool
	// parts is the number of devices of an AMD GPU in its operator's mode
	// (8 in CPX, its VFs when it has any); 1 otherwise. Each has a UUID of
	// its own (PartUUID) when there is more than one, and a render node.
	parts int
	// partLoad is the load of each device of a split GPU.
	partLoad []float64
	// load is the utilization (0..1) Utilization reports for the whole
	// GPU, as its workloads declared it (SetLoad).
	load float64
	// procs counts processes using the whole GPU (not a MIG instance).
	procs int
	// instances are kept sorted by start slot.
	instances []instance
	health    agentapi.GPUHealth
	// xids counts the XID errors injected with InjectXID, by code.
	xids map[int]uint64
}

type instance struct {
	fleet.MIGInstance
	uuid  string
	procs int
	load  float64
}

// Option configures New.
type Option func(*options)

type options struct {
	cat *catalog.Catalog
}

// WithCatalog resolves GPU models and MIG profiles in cat instead of the
// built-in catalog, for operators whose catalog file adds models.
func WithCatalog(cat *catalog.Catalog) Option {
	return func(o *options) { o.cat = cat }
}

// New builds a simulated host from spec. All GPUs start idle and healthy,
// in MIG mode when the spec says so, without MIG instances. An invalid spec
// (unknown model, islands that do not add up) is an error naming the host.
func New(spec Spec, opts ...Option) (*Host, error) {
	o := options{}
	for _, opt := range opts {
		opt(&o)
	}
	if o.cat == nil {
		o.cat = catalog.Default()
	}
	s, err := spec.Resolve(o.cat)
	if err != nil {
		return nil, err
	}
	h := &Host{spec: s}
	h.faults = faults{
		fail: map[string]*failure{}, hang: map[string]bool{},
		release: make(chan struct{}), calls: map[string]int{},
	}
	if s.GPUs.Count > 0 {
		if h.model, err = o.cat.Model(s.GPUs.Model); err != nil {
			return nil, err // Resolve already checked; kept for safety
		}
	}
	h.gpus = make([]simGPU, s.GPUs.Count)
	parts := 1
	if h.model != nil && h.model.SupportsPartitions() {
		mode, cp, err := h.model.ResolveMode(catalog.GPUMode{Partition: s.GPUs.Partition, MemoryPartition: s.GPUs.MemoryPartition, VFs: s.GPUs.VFs})
		if err != nil {
			return nil, err // Resolve already checked; kept for safety
		}
		parts = mode.Slots(cp)
	}
	for i := range h.gpus {
		u := GPUUUID(s.ID, i)
		h.gpus[i] = simGPU{uuid: u, mig: s.GPUs.MIG, parts: parts, health: agentapi.GPUHealth{Index: i, UUID: u, Healthy: true}}
		if h.split() {
			h.gpus[i].partLoad = make([]float64, parts)
		}
	}
	return h, nil
}

// ID returns the host's ID.
func (h *Host) ID() string { return h.spec.ID }

// Spec returns the host's resolved spec (defaults filled in).
func (h *Host) Spec() Spec {
	s := h.spec
	s.Labels = maps.Clone(s.Labels)
	s.GPUs.NVLinkIslands = slices.Clone(s.GPUs.NVLinkIslands)
	s.HCAs = slices.Clone(s.HCAs)
	return s
}

// GPUUUID is the deterministic UUID of GPU index of a simulated host:
// "GPU-" and a UUID-shaped hash of the two, stable across restarts.
func GPUUUID(hostID string, index int) string {
	return "GPU-" + uuidLike(fmt.Sprintf("gpucloud-sim/gpu/%s/%d", hostID, index))
}

// MIGUUID is the deterministic MIG device UUID of the instance of profileID
// at start on GPU index of a simulated host.
func MIGUUID(hostID string, index, profileID, start int) string {
	return "MIG-" + uuidLike(fmt.Sprintf("gpucloud-sim/mig/%s/%d/%d/%d", hostID, index, profileID, start))
}

// uuidLike formats the first 16 bytes of a SHA-256 as a version 4 style
// UUID, so that tools that parse UUIDs accept it.
func uuidLike(s string) string {
	sum := sha256.Sum256([]byte(s))
	b := sum[:16]
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	x := hex.EncodeToString(b)
	return x[0:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:32]
}

// Inventory implements gpu.Driver.
func (h *Host) Inventory(ctx context.Context) (*agentapi.Inventory, error) {
	if err := h.enter(ctx, OpInventory); err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	s := &h.spec
	inv := &agentapi.Inventory{
		Host: fleet.Host{
			ID: s.ID, Zone: s.Zone, Rack: s.Rack, Labels: maps.Clone(s.Labels),
			CPUMilli: s.CPUMilli, MemoryMiB: s.MemoryMiB,
		},
		Driver: s.Driver, CUDA: s.CUDA,
	}
	inv.Host.HCAs = h.hcas()
	islands := islandOf(s.GPUs.NVLinkIslands, len(h.gpus))
	for i := range h.gpus {
		g := &h.gpus[i]
		fg := fleet.GPU{
			Index: i, UUID: g.uuid, Model: h.model.Name, MemoryMiB: h.model.MemoryMiB,
			Island: islands[i], MIG: g.mig,
			Partition: s.GPUs.Partition, MemoryPartition: s.GPUs.MemoryPartition, VFs: s.GPUs.VFs,
		}
		for _, in := range g.instances {
			fg.Instances = append(fg.Instances, in.MIGInstance)
		}
		inv.Host.GPUs = append(inv.Host.GPUs, fg)
		inv.Health = append(inv.Health, g.health)
	}
	return inv, nil
}

// islandOf maps each GPU to its island, or -1 for PCIe only.
func islandOf(sizes []int, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = -1
	}
	i := 0
	for isl, size := range sizes {
		for j := 0; j < size && i < n; j++ {
			out[i] = isl
			i++
		}
	}
	return out
}

// gpuLocked returns GPU index or an ErrNotFound error; h.mu must be held.
func (h *Host) gpuLocked(index int) (*simGPU, error) {
	if index < 0 || index >= len(h.gpus) {
		return nil, fmt.Errorf("sim host %s has no gpu %d (it has %d): %w", h.spec.ID, index, len(h.gpus), gpu.ErrNotFound)
	}
	return &h.gpus[index], nil
}

// SetMIGMode implements gpu.Driver.
func (h *Host) SetMIGMode(ctx context.Context, index int, on bool) error {
	if err := h.enter(ctx, OpSetMIGMode); err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	g, err := h.gpuLocked(index)
	if err != nil {
		return err
	}
	if g.mig == on {
		return nil
	}
	if on && !h.model.SupportsMIG() {
		return fmt.Errorf("sim host %s gpu %d: model %s has no MIG: %w", h.spec.ID, index, h.model.Name, gpu.ErrNotSupported)
	}
	if n := len(g.instances); n > 0 {
		return fmt.Errorf("sim host %s gpu %d: %d MIG instance(s) must be destroyed before MIG mode goes off: %w", h.spec.ID, index, n, gpu.ErrBusy)
	}
	if g.procs > 0 {
		return fmt.Errorf("sim host %s gpu %d: %d process(es) running, MIG mode needs an idle GPU: %w", h.spec.ID, index, g.procs, gpu.ErrBusy)
	}
	g.mig = on
	return nil
}

// CreateMIG implements gpu.Driver.
func (h *Host) CreateMIG(ctx context.Context, index, profileID, start int) (gpu.MIGInstance, error) {
	if err := h.enter(ctx, OpCreateMIG); err != nil {
		return gpu.MIGInstance{}, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	g, err := h.gpuLocked(index)
	if err != nil {
		return gpu.MIGInstance{}, err
	}
	for _, in := range g.instances {
		if in.Start == start && in.ProfileID == profileID {
			return gpu.MIGInstance{GPU: index, ProfileID: profileID, Start: start, UUID: in.uuid}, nil
		}
	}
	if h.model.SupportsMIG() && !g.mig {
		return gpu.MIGInstance{}, fmt.Errorf("sim host %s gpu %d is not in MIG mode: %w", h.spec.ID, index, gpu.ErrInvalid)
	}
	existing := make([]fleet.MIGInstance, len(g.instances))
	for i, in := range g.instances {
		existing[i] = in.MIGInstance
	}
	p, err := fleet.CheckMIG(h.model, existing, profileID, start)
	if err != nil {
		return gpu.MIGInstance{}, fmt.Errorf("sim host %s gpu %d: %w", h.spec.ID, index, err)
	}
	in := instance{
		MIGInstance: fleet.MIGInstance{ProfileID: p.ID, Start: start, Slots: p.MemorySlots, Slices: p.ComputeSlices, Media: p.MediaExtensions},
		uuid:        MIGUUID(h.spec.ID, index, p.ID, start),
	}
	g.instances = append(g.instances, in)
	slices.SortFunc(g.instances, func(a, b instance) int { return a.Start - b.Start })
	return gpu.MIGInstance{GPU: index, ProfileID: p.ID, Start: start, UUID: in.uuid}, nil
}

// DestroyMIG implements gpu.Driver.
func (h *Host) DestroyMIG(ctx context.Context, index, start int) error {
	if err := h.enter(ctx, OpDestroyMIG); err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	g, err := h.gpuLocked(index)
	if err != nil {
		return err
	}
	for i, in := range g.instances {
		if in.Start != start {
			continue
		}
		if in.procs > 0 {
			return fmt.Errorf("sim host %s gpu %d: MIG instance %s at slot %d runs %d process(es): %w",
				h.spec.ID, index, fleet.MIGProfileLabel(h.model, in.ProfileID), start, in.procs, gpu.ErrBusy)
		}
		g.instances = slices.Delete(g.instances, i, i+1)
		return nil
	}
	return fmt.Errorf("sim host %s gpu %d: no MIG instance starts at slot %d: %w", h.spec.ID, index, start, gpu.ErrNotFound)
}

// Devices implements gpu.Driver.
func (h *Host) Devices(ctx context.Context, p *fleet.Placement) ([]string, error) {
	if err := h.enter(ctx, OpDevices); err != nil {
		return nil, err
	}
	if p == nil {
		return nil, fmt.Errorf("sim host %s: no placement: %w", h.spec.ID, gpu.ErrInvalid)
	}
	if p.HostID != "" && p.HostID != h.spec.ID {
		return nil, fmt.Errorf("sim host %s: placement %s is for host %s: %w", h.spec.ID, p.ID, p.HostID, gpu.ErrInvalid)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]string, 0, len(p.Devices))
	for _, d := range p.Devices {
		g, err := h.gpuLocked(d.GPU)
		if err != nil {
			return nil, fmt.Errorf("placement %s: %w", p.ID, err)
		}
		if d.UUID != "" && d.UUID != g.uuid {
			return nil, fmt.Errorf("sim host %s gpu %d is %s, placement %s expects %s: %w",
				h.spec.ID, d.GPU, g.uuid, p.ID, d.UUID, gpu.ErrNotFound)
		}
		switch d.Kind {
		case fleet.Whole, fleet.Share:
			if g.mig {
				return nil, fmt.Errorf("sim host %s gpu %d is in MIG mode and cannot be used %s: %w",
					h.spec.ID, d.GPU, d.Kind, gpu.ErrInvalid)
			}
			if h.split() {
				return nil, fmt.Errorf("sim host %s gpu %d is in %s and cannot be used %s: %w",
					h.spec.ID, d.GPU, h.modeString(), d.Kind, gpu.ErrInvalid)
			}
			out = append(out, g.uuid)
		case fleet.Partition, fleet.VF:
			if err := h.checkPart(d); err != nil {
				return nil, fmt.Errorf("placement %s: %w", p.ID, err)
			}
			out = append(out, PartUUID(h.spec.ID, d.GPU, d.Part))
		case fleet.MIGSlice:
			u := ""
			for _, in := range g.instances {
				if in.Start == d.MIGStart && in.ProfileID == d.MIGProfileID {
					u = in.uuid
				}
			}
			if u == "" {
				return nil, fmt.Errorf("sim host %s gpu %d has no MIG instance of %s at slot %d: %w",
					h.spec.ID, d.GPU, fleet.MIGProfileLabel(h.model, d.MIGProfileID), d.MIGStart, gpu.ErrNotFound)
			}
			out = append(out, u)
		default:
			return nil, fmt.Errorf("placement %s: gpu %d: unknown device kind %q: %w", p.ID, d.GPU, d.Kind, gpu.ErrInvalid)
		}
	}
	return out, nil
}

// SetProcesses records that n processes run on the device with the given
// UUID, a whole GPU or a MIG instance: the simulated counterpart of a CUDA
// context. A GPU with processes cannot change MIG mode and an instance with
// processes cannot be destroyed. Unknown UUIDs are gpu.ErrNotFound.
func (h *Host) SetProcesses(uuid string, n int) error {
	if n < 0 {
		return fmt.Errorf("sim host %s: negative process count %d: %w", h.spec.ID, n, gpu.ErrInvalid)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := range h.gpus {
		g := &h.gpus[i]
		if g.uuid == uuid {
			g.procs = n
			return nil
		}
		for j := range g.instances {
			if g.instances[j].uuid == uuid {
				g.instances[j].procs = n
				return nil
			}
		}
	}
	return fmt.Errorf("sim host %s has no device %s: %w", h.spec.ID, uuid, gpu.ErrNotFound)
}

// SetHealth marks a GPU healthy or not, with the reason Inventory reports
// (an XID, "fell off the bus").
func (h *Host) SetHealth(index int, healthy bool, reason string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	g, err := h.gpuLocked(index)
	if err != nil {
		return err
	}
	g.health.Healthy, g.health.Reason = healthy, strings.TrimSpace(reason)
	return nil
}

// SetUsage sets the utilization and used memory Inventory reports for a GPU.
func (h *Host) SetUsage(index, utilizationPct int, memoryUsedMiB int64) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	g, err := h.gpuLocked(index)
	if err != nil {
		return err
	}
	if utilizationPct < 0 || utilizationPct > 100 || memoryUsedMiB < 0 {
		return fmt.Errorf("sim host %s gpu %d: usage %d%% %d MiB out of range: %w", h.spec.ID, index, utilizationPct, memoryUsedMiB, gpu.ErrInvalid)
	}
	g.health.UtilizationPct, g.health.MemoryUsedMiB = utilizationPct, memoryUsedMiB
	return nil
}

// Utilization implements gpu.Driver: the mean of the loads SetLoad gave
// the devices (0 for a device never set).
func (h *Host) Utilization(ctx context.Context, uuids []string) (float64, error) {
	if err := h.enter(ctx, OpUtilization); err != nil {
		return 0, err
	}
	if len(uuids) == 0 {
		return 0, fmt.Errorf("sim host %s: utilization of no device: %w", h.spec.ID, gpu.ErrInvalid)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	sum := 0.0
	for _, u := range uuids {
		p, err := h.loadLocked(u)
		if err != nil {
			return 0, err
		}
		sum += *p
	}
	return sum / float64(len(uuids)), nil
}

// SetLoad implements gpu.LoadSimulator.
func (h *Host) SetLoad(uuid string, utilization float64) error {
	if !(utilization >= 0 && utilization <= 1) {
		return fmt.Errorf("sim host %s: load %v of %s is not in [0, 1]: %w", h.spec.ID, utilization, uuid, gpu.ErrInvalid)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	p, err := h.loadLocked(uuid)
	if err != nil {
		return err
	}
	*p = utilization
	return nil
}

// loadLocked returns where the load of the device with the given UUID, a
// GPU or a MIG instance, is kept; h.mu must be held.
func (h *Host) loadLocked(uuid string) (*float64, error) {
	for i := range h.gpus {
		g := &h.gpus[i]
		if g.uuid == uuid {
			return &g.load, nil
		}
		for j := range g.partLoad {
			if PartUUID(h.spec.ID, i, j) == uuid {
				return &g.partLoad[j], nil
			}
		}
		for j := range g.instances {
			if g.instances[j].uuid == uuid {
				return &g.instances[j].load, nil
			}
		}
	}
	return nil, fmt.Errorf("sim host %s has no device %s: %w", h.spec.ID, uuid, gpu.ErrNotFound)
}
