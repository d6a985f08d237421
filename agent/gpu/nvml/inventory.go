//go:build cgo

package nvml

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/fleet"
)

// Inventory reads the host's GPUs. A GPU that NVML can read only in part is
// still reported, with what could be read, so that indexes stay dense and
// the operator sees why: it is unhealthy when its identity, UUID or MIG state
// cannot be read or NVML says it is lost, and healthy with a note in Reason
// for lesser gaps (an unknown model, an unreadable counter). Inventory fails
// only when NVML cannot list the GPUs at all.
func (d *Driver) Inventory(ctx context.Context) (*agentapi.Inventory, error) {
	if err := ctxErr(ctx); err != nil {
		return nil, err
	}
	inv := &agentapi.Inventory{Host: fleet.Host{ID: d.HostID}}
	version, ret := d.lib.SystemGetDriverVersion()
	switch {
	case ret == nvml.SUCCESS:
		inv.Driver = version
	case !noAnswer(ret):
		return nil, nvmlError("read driver version", ret)
	}
	cuda, err := d.cudaVersion()
	if err != nil {
		return nil, err
	}
	inv.CUDA = cuda

	n, ret := d.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, nvmlError("count GPUs", ret)
	}
	reports := make([]*gpuReport, n)
	for i := range reports {
		if err := ctxErr(ctx); err != nil {
			return nil, err
		}
		reports[i] = d.readGPU(i)
	}
	assignIslands(reports)

	inv.Host.GPUs = make([]fleet.GPU, n)
	inv.Health = make([]agentapi.GPUHealth, n)
	for i, r := range reports {
		inv.Host.GPUs[i] = r.gpu
		inv.Health[i] = r.health
	}
	return inv, nil
}

// cudaVersion is the highest CUDA version the driver supports, "12.4". The
// _v2 call asks the kernel driver rather than libcuda; older drivers lack it.
func (d *Driver) cudaVersion() (string, error) {
	v, ret := d.lib.SystemGetCudaDriverVersion_v2()
	if noAnswer(ret) {
		v, ret = d.lib.SystemGetCudaDriverVersion()
	}
	switch {
	case ret == nvml.SUCCESS:
		return fmt.Sprintf("%d.%d", v/1000, v%1000/10), nil
	case noAnswer(ret):
		return "", nil
	}
	return "", nvmlError("read CUDA version", ret)
}

// gpuReport gathers what Inventory learns about one GPU.
type gpuReport struct {
	gpu    fleet.GPU
	health agentapi.GPUHealth
	notes  []string
	// dev is nil when NVML gave no handle.
	dev nvml.Device
	// addr is the GPU's PCI address, which NVLink peers name it by.
	addr  pciAddr
	links []nvlinkPeer
}

func (r *gpuReport) note(msg string) {
	r.notes = append(r.notes, msg)
	r.health.Reason = strings.Join(r.notes, "; ")
}

func (r *gpuReport) fault(msg string) {
	r.health.Healthy = false
	r.note(msg)
}

// must reports whether an NVML call the GPU's description depends on
// succeeded. No answer is silence; any other failure makes the GPU unhealthy.
func (r *gpuReport) must(what string, ret nvml.Return) bool {
	if ret == nvml.SUCCESS {
		return true
	}
	if !noAnswer(ret) {
		r.fault(fmt.Sprintf("%s: %v", what, ret))
	}
	return false
}

// may reports whether an NVML call for a counter or for topology succeeded.
// No answer is silence, a lost GPU is a fault, and other failures are noted
// without making the GPU unhealthy: it can still be rented.
func (r *gpuReport) may(what string, ret nvml.Return) bool {
	switch {
	case ret == nvml.SUCCESS:
		return true
	case ret == nvml.ERROR_GPU_IS_LOST:
		r.fault(fmt.Sprintf("%s: %v", what, ret))
	case !noAnswer(ret):
		r.note(fmt.Sprintf("%s: %v", what, ret))
	}
	return false
}

// readGPU reads one GPU. It never fails: what cannot be read is recorded in
// the report's health.
func (d *Driver) readGPU(i int) *gpuReport {
	r := &gpuReport{
		gpu:    fleet.GPU{Index: i, Island: -1},
		health: agentapi.GPUHealth{Index: i, Healthy: true},
	}
	dev, ret := d.lib.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		r.fault(fmt.Sprintf("get handle: %v", ret))
		return r
	}
	r.dev = dev
	if uuid, ret := dev.GetUUID(); r.must("read UUID", ret) {
		r.gpu.UUID, r.health.UUID = uuid, uuid
	}
	id, err := d.identify(i, dev)
	if err != nil {
		r.fault(err.Error())
	} else {
		r.gpu.Model = id.modelName()
		r.addr = addrOf(id.pci)
		if id.model == nil {
			r.note(id.unknownNote())
		}
	}

	// A known model reports the catalog's nominal memory, which placement
	// and pricing use (as the simulator does); NVML's total is a little less
	// (81559 MiB on an H100 80GB) and only checks the model match.
	if id.model != nil {
		r.gpu.MemoryMiB = id.model.MemoryMiB
	}
	if mem, ret := dev.GetMemoryInfo(); r.may("read memory", ret) {
		total := int64(mem.Total >> 20)
		r.health.MemoryUsedMiB = int64(mem.Used >> 20)
		switch {
		case id.model == nil:
			r.gpu.MemoryMiB = total
		case total*10 < id.model.MemoryMiB*9 || total*10 > id.model.MemoryMiB*11:
			r.note(fmt.Sprintf("NVML reports %d MiB of memory, more than 10%% off the %d MiB of %s", total, id.model.MemoryMiB, id.model.Name))
		}
	}
	// Utilization is ERROR_NOT_SUPPORTED on a GPU in MIG mode, among others.
	if util, ret := dev.GetUtilizationRates(); r.may("read utilization", ret) {
		r.health.UtilizationPct = int(util.Gpu)
	}

	current, pending, ret := dev.GetMigMode()
	if r.must("read MIG mode", ret) {
		r.gpu.MIG = current == nvml.DEVICE_MIG_ENABLE
		if pending != current {
			r.note(fmt.Sprintf("MIG mode %s is pending until the GPU is reset", onOff(pending == nvml.DEVICE_MIG_ENABLE)))
		}
	}
	if r.gpu.MIG {
		d.readInstances(r, id.model, dev)
	}
	r.readLinks(dev)
	return r
}

// readInstances adds the GPU instances that exist on the hardware, with the
// slots and compute slices of the catalog's table.
func (d *Driver) readInstances(r *gpuReport, model *catalog.Model, dev nvml.Device) {
	list, err := listInstances(r.gpu.Index, dev)
	if err != nil {
		r.fault(err.Error())
		return
	}
	for _, mi := range list {
		in, note := fleetInstance(model, mi)
		if note != "" {
			r.note(note)
		}
		r.gpu.Instances = append(r.gpu.Instances, in)
	}
}

// migInstance is one GPU instance NVML reports.
type migInstance struct {
	gi      nvml.GpuInstance
	info    nvml.GpuInstanceInfo
	profile nvml.GpuInstanceProfileInfo
}

func (mi migInstance) start() int { return int(mi.info.Placement.Start) }

// listInstances lists the GPU instances of a GPU in MIG mode, ordered by
// start slot. NVML lists instances per profile, and a profile is reached
// through its index, so it walks every index the GPU answers for.
func listInstances(i int, dev nvml.Device) ([]migInstance, error) {
	var out []migInstance
	seen := map[uint32]bool{}
	for p := range nvml.GPU_INSTANCE_PROFILE_COUNT {
		info, ret := dev.GetGpuInstanceProfileInfo(p)
		if ret == nvml.ERROR_INVALID_ARGUMENT || noAnswer(ret) {
			continue
		}
		if ret != nvml.SUCCESS {
			return nil, nvmlError(fmt.Sprintf("gpu %d: read MIG profile index %d", i, p), ret)
		}
		if info.InstanceCount == 0 {
			continue
		}
		gis, ret := dev.GetGpuInstances(&info)
		if ret == nvml.ERROR_NOT_FOUND || noAnswer(ret) {
			continue
		}
		if ret != nvml.SUCCESS {
			return nil, nvmlError(fmt.Sprintf("gpu %d: list MIG instances of profile id %d", i, info.Id), ret)
		}
		for _, gi := range gis {
			gii, ret := gi.GetInfo()
			if ret != nvml.SUCCESS {
				return nil, nvmlError(fmt.Sprintf("gpu %d: read MIG instance of profile id %d", i, info.Id), ret)
			}
			// Two profile indexes may share an ID, and list one instance
			// twice.
			if seen[gii.Id] {
				continue
			}
			seen[gii.Id] = true
			out = append(out, migInstance{gi: gi, info: gii, profile: info})
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].start() < out[b].start() })
	return out, nil
}

// fleetInstance converts an instance to the fleet's form. Its slots, compute
// slices and media engines come from the catalog's row for its profile ID;
// only for a profile the catalog lacks are NVML's sizes used, with a note.
func fleetInstance(model *catalog.Model, mi migInstance) (fleet.MIGInstance, string) {
	in := fleet.MIGInstance{ProfileID: int(mi.profile.Id), Start: mi.start()}
	if model != nil {
		if p := model.ProfileByID(in.ProfileID); p != nil {
			in.Slots, in.Slices, in.Media = p.MemorySlots, p.ComputeSlices, p.MediaExtensions
			return in, ""
		}
	}
	in.Slots, in.Slices = int(mi.info.Placement.Size), int(mi.profile.SliceCount)
	return in, fmt.Sprintf("MIG instance of profile id %d at slot %d is not in the catalog's profile table; its size is NVML's", in.ProfileID, in.Start)
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}
