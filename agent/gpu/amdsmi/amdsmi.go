// Package amdsmi is the agent's driver for AMD Instinct GPUs. It reads the
// host's GPUs through the amd-smi command's JSON output (`amd-smi static`
// and `amd-smi list`), so it needs no cgo: the AMD SMI library stays in
// its own process. It reports each physical GPU with the compute and
// memory partition modes its operator set (amd-smi shows a GPU in CPX as
// eight logical GPUs, partition IDs 0 to 7, which are grouped back here),
// names a placement's devices by the UUIDs amd-smi lists, and finds their
// DRM render nodes in the KFD topology (sysfs) for the container runtime.
//
// AMD GPUs have no MIG: the MIG methods answer gpu.ErrNotSupported.
// Changing a GPU's partition mode is the operator's (amd-smi set
// --compute-partition, after a drain), never the agent's.
package amdsmi

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gpucloud/gpucloud/agent/gpu"
	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/fleet"
)

// Runner runs amd-smi with args and returns its standard output.
type Runner func(ctx context.Context, args ...string) ([]byte, error)

// Command is the Runner of the amd-smi in PATH.
func Command(ctx context.Context, args ...string) ([]byte, error) {
	out, err := exec.CommandContext(ctx, "amd-smi", args...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && len(ee.Stderr) > 0 {
			return nil, fmt.Errorf("amd-smi %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(ee.Stderr)))
		}
		if errors.Is(err, exec.ErrNotFound) {
			return nil, fmt.Errorf("amd-smi: %w: %w", err, gpu.ErrUnavailable)
		}
		return nil, fmt.Errorf("amd-smi %s: %w", strings.Join(args, " "), err)
	}
	return out, nil
}

// The amd-smi calls the driver makes.
var (
	staticArgs = []string{"static", "--asic", "--bus", "--driver", "--vram", "--partition", "--json"}
	listArgs   = []string{"list", "--json"}
)

// Driver implements gpu.Driver with amd-smi. It keeps no state between
// calls: every call reads the GPUs afresh.
type Driver struct {
	// HostID, when set, is the inventory's host ID, and Devices rejects
	// placements made for another host.
	HostID string
	run    Runner
	cat    *catalog.Catalog
	// sysfs is where the KFD topology is read (/sys).
	sysfs string
}

var _ gpu.Driver = (*Driver)(nil)

// New returns a driver that runs amd-smi with run (Command for the real
// one), matches models in cat (nil: catalog.Default()) and reads the KFD
// topology under sysfs ("": /sys).
func New(run Runner, cat *catalog.Catalog, sysfs string) *Driver {
	if cat == nil {
		cat = catalog.Default()
	}
	if sysfs == "" {
		sysfs = "/sys"
	}
	return &Driver{run: run, cat: cat, sysfs: sysfs}
}

// physical is one physical GPU with its logical GPUs (one unless it is in
// a compute partition mode of several), as amd-smi lists them.
type physical struct {
	static  staticGPU
	logical []listGPU
}

// read runs amd-smi and groups its logical GPUs into physical ones: a
// logical GPU whose partition ID is 0 (or N/A, a GPU without partitions)
// starts a physical GPU, and those after it with IDs 1, 2, ... belong to it.
func (d *Driver) read(ctx context.Context) ([]physical, string, error) {
	sb, err := d.run(ctx, staticArgs...)
	if err != nil {
		return nil, "", fmt.Errorf("read the GPUs: %w", err)
	}
	lb, err := d.run(ctx, listArgs...)
	if err != nil {
		return nil, "", fmt.Errorf("list the GPUs: %w", err)
	}
	statics, err := parseStatic(sb)
	if err != nil {
		return nil, "", err
	}
	list, err := parseList(lb)
	if err != nil {
		return nil, "", err
	}
	byIndex := map[int]staticGPU{}
	version := ""
	for _, s := range statics {
		byIndex[s.GPU] = s
		if version == "" {
			version = s.Driver.Version.str()
		}
	}
	var out []physical
	for _, l := range list {
		id, ok := l.PartitionID.int()
		if !ok || id == 0 || len(out) == 0 {
			s, found := byIndex[l.GPU]
			if !found {
				return nil, "", fmt.Errorf("amd-smi static lists no GPU %d, which amd-smi list has", l.GPU)
			}
			out = append(out, physical{static: s})
		}
		p := &out[len(out)-1]
		if ok && int(id) != len(p.logical) {
			return nil, "", fmt.Errorf("amd-smi list: GPU %d has partition ID %d, want %d after the GPU's others", l.GPU, id, len(p.logical))
		}
		p.logical = append(p.logical, l)
	}
	return out, version, nil
}

// model finds the catalog model of a GPU: by PCI device id among AMD's
// models, else by a model name in the market name ("AMD Instinct
// MI300X"); nil when the catalog knows neither.
func (d *Driver) model(s staticGPU) *catalog.Model {
	id, ok := s.ASIC.DeviceID.int()
	for _, m := range d.cat.Models() {
		if m.VendorOf() == catalog.VendorAMD && ok && m.PCIDeviceID != 0 && int64(m.PCIDeviceID) == id {
			return m
		}
	}
	name := strings.ToUpper(s.ASIC.MarketName.str())
	for _, m := range d.cat.Models() {
		if m.VendorOf() == catalog.VendorAMD && name != "" && strings.Contains(name, strings.ToUpper(m.Name)) {
			return m
		}
	}
	return nil
}

// Inventory implements gpu.Driver: one GPU per physical GPU, with the
// model's nominal memory, the partition modes amd-smi shows and, for a
// model of AMD's 8-GPU Infinity Fabric platforms (xGMI in the catalog),
// all GPUs in island 0. A GPU the catalog does not know is reported under
// its market name and unhealthy, with the reason.
func (d *Driver) Inventory(ctx context.Context) (*agentapi.Inventory, error) {
	ps, version, err := d.read(ctx)
	if err != nil {
		return nil, err
	}
	inv := &agentapi.Inventory{Host: fleet.Host{ID: d.HostID}, Driver: version}
	for i, p := range ps {
		g := fleet.GPU{Index: i, UUID: p.logical[0].UUID.str(), Island: -1}
		h := agentapi.GPUHealth{Index: i, UUID: g.UUID, Healthy: true}
		if m := d.model(p.static); m != nil {
			g.Model, g.MemoryMiB = m.Name, m.MemoryMiB
			if m.XGMIGBps > 0 && len(ps) > 1 {
				g.Island = 0
			}
			if m.SupportsPartitions() {
				g.Partition, g.MemoryPartition = p.static.Partition.Compute.str(), p.static.Partition.Memory.str()
			}
		} else {
			g.Model = p.static.ASIC.MarketName.str()
			h.Healthy, h.Reason = false, fmt.Sprintf("amd-smi shows %q (device id %s), which the catalog does not know",
				p.static.ASIC.MarketName.str(), p.static.ASIC.DeviceID.str())
		}
		inv.Host.GPUs = append(inv.Host.GPUs, g)
		inv.Health = append(inv.Health, h)
	}
	return inv, nil
}

// SetMIGMode implements gpu.Driver: AMD GPUs have no MIG.
func (d *Driver) SetMIGMode(ctx context.Context, index int, on bool) error {
	if !on {
		return nil
	}
	return fmt.Errorf("amd-smi: gpu %d: AMD GPUs have no MIG: %w", index, gpu.ErrNotSupported)
}

// CreateMIG implements gpu.Driver: AMD GPUs have no MIG.
func (d *Driver) CreateMIG(ctx context.Context, index, profileID, start int) (gpu.MIGInstance, error) {
	return gpu.MIGInstance{}, fmt.Errorf("amd-smi: gpu %d: AMD GPUs have no MIG: %w", index, gpu.ErrNotSupported)
}

// DestroyMIG implements gpu.Driver: there is never a MIG instance.
func (d *Driver) DestroyMIG(ctx context.Context, index, start int) error {
	return fmt.Errorf("amd-smi: gpu %d has no MIG instance at slot %d: %w", index, start, gpu.ErrNotFound)
}

// logicalOf returns the logical GPU of device dv of a placement: the
// physical GPU itself for a whole GPU (it must be in no partition mode of
// several), or its partition dv.Part; a VF is not seen from the host's
// amd-smi list (it is the guest's).
func (d *Driver) logicalOf(ps []physical, dv fleet.Device) (listGPU, error) {
	if dv.GPU < 0 || dv.GPU >= len(ps) {
		return listGPU{}, fmt.Errorf("amd-smi shows no gpu %d (it shows %d): %w", dv.GPU, len(ps), gpu.ErrNotFound)
	}
	p := ps[dv.GPU]
	mode := p.static.Partition.Compute.str()
	switch dv.Kind {
	case fleet.Whole:
		if len(p.logical) > 1 {
			return listGPU{}, fmt.Errorf("gpu %d is in %s: it is rented by its partitions, not whole: %w", dv.GPU, mode, gpu.ErrInvalid)
		}
		return p.logical[0], nil
	case fleet.Partition:
		if mode != dv.Partition || len(p.logical) != dv.Parts {
			return listGPU{}, fmt.Errorf("gpu %d is in %s with %d logical GPUs, not in %s: %w", dv.GPU, mode, len(p.logical), dv.Partition, gpu.ErrInvalid)
		}
		if dv.Part < 0 || dv.Part >= len(p.logical) {
			return listGPU{}, fmt.Errorf("gpu %d has no partition %d: %w", dv.GPU, dv.Part, gpu.ErrNotFound)
		}
		return p.logical[dv.Part], nil
	}
	return listGPU{}, fmt.Errorf("gpu %d: a %s device is not served by amd-smi on this host: %w", dv.GPU, dv.Kind, gpu.ErrNotSupported)
}

func (d *Driver) checkHost(p *fleet.Placement) error {
	if p == nil {
		return fmt.Errorf("amd-smi: no placement: %w", gpu.ErrInvalid)
	}
	if d.HostID != "" && p.HostID != "" && p.HostID != d.HostID {
		return fmt.Errorf("amd-smi: placement %s is for host %s, not %s: %w", p.ID, p.HostID, d.HostID, gpu.ErrInvalid)
	}
	return nil
}

// Devices implements gpu.Driver: the UUIDs amd-smi lists for the
// placement's GPUs or partitions, which ROCR_VISIBLE_DEVICES takes.
func (d *Driver) Devices(ctx context.Context, p *fleet.Placement) ([]string, error) {
	if err := d.checkHost(p); err != nil {
		return nil, err
	}
	ps, _, err := d.read(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, dv := range p.Devices {
		l, err := d.logicalOf(ps, dv)
		if err != nil {
			return nil, fmt.Errorf("placement %s: %w", p.ID, err)
		}
		out = append(out, l.UUID.str())
	}
	return out, nil
}

// RenderMinors implements agent.RenderNamer: the DRM render minor of each
// of the placement's GPUs or partitions, read from the KFD topology node
// amd-smi lists it under (drm_render_minor in
// class/kfd/kfd/topology/nodes/<node_id>/properties).
func (d *Driver) RenderMinors(ctx context.Context, p *fleet.Placement) ([]int, error) {
	if err := d.checkHost(p); err != nil {
		return nil, err
	}
	ps, _, err := d.read(ctx)
	if err != nil {
		return nil, err
	}
	var out []int
	for _, dv := range p.Devices {
		l, err := d.logicalOf(ps, dv)
		if err != nil {
			return nil, fmt.Errorf("placement %s: %w", p.ID, err)
		}
		node, ok := l.NodeID.int()
		if !ok {
			return nil, fmt.Errorf("amd-smi lists no KFD node of gpu %d: %w", l.GPU, gpu.ErrNotFound)
		}
		f := filepath.Join(d.sysfs, "class", "kfd", "kfd", "topology", "nodes", strconv.FormatInt(node, 10), "properties")
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("KFD topology of gpu %d: %w", l.GPU, err)
		}
		minor, ok := parseRenderMinor(string(b))
		if !ok {
			return nil, fmt.Errorf("%s has no drm_render_minor: %w", f, gpu.ErrNotFound)
		}
		out = append(out, minor)
	}
	return out, nil
}

// Utilization implements gpu.Driver: not read through amd-smi yet.
func (d *Driver) Utilization(ctx context.Context, uuids []string) (float64, error) {
	if len(uuids) == 0 {
		return 0, fmt.Errorf("amd-smi: utilization of no device: %w", gpu.ErrInvalid)
	}
	return 0, fmt.Errorf("amd-smi: utilization is not read: %w", gpu.ErrNotSupported)
}

// Telemetry implements gpu.Driver: each GPU's identity, no readings yet
// (nil, never a made-up zero).
func (d *Driver) Telemetry(ctx context.Context) ([]gpu.Telemetry, error) {
	inv, err := d.Inventory(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]gpu.Telemetry, len(inv.Host.GPUs))
	for i, g := range inv.Host.GPUs {
		out[i] = gpu.Telemetry{Index: g.Index, UUID: g.UUID, Model: g.Model}
	}
	return out, nil
}
