package sim

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/gpucloud/gpucloud/agent/gpu"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/fleet"
)

// Simulated AMD Instinct GPUs.
//
// An AMD GPU is opened through two nodes: /dev/kfd, the compute driver's
// one node that every GPU shares, and the GPU's DRM render node,
// /dev/dri/renderD<N>, which the device cgroup allows per GPU. A GPU in a
// compute partition mode shows the host one render node per logical GPU
// (eight in CPX), and so does a GPU exposed as VFs per VF: the workload of
// one partition gets exactly its render node. MakeDeviceNodes creates them
// with the DRM numbers (character major 226, render minors from 128, in
// GPU order then device order) and a /dev/kfd of a major no driver of this
// host registered. The workload's environment names its devices in
// ROCR_VISIBLE_DEVICES and HIP_VISIBLE_DEVICES (agent/runtime).
const (
	// DRMMajor is the character major of the DRM nodes.
	DRMMajor = 226
	// RenderMinorBase is the minor of renderD128, the first render node.
	RenderMinorBase = 128
)

// PartUUID is the deterministic UUID of device part (a compute partition's
// logical GPU or a VF) of GPU index of a simulated AMD host, as amd-smi
// lists one UUID per logical GPU.
func PartUUID(hostID string, index, part int) string {
	return "GPU-" + uuidLike(fmt.Sprintf("gpucloud-sim/part/%s/%d/%d", hostID, index, part))
}

// amd reports whether the host's GPUs are AMD's.
func (h *Host) amd() bool { return h.model != nil && h.model.VendorOf() == catalog.VendorAMD }

// split reports whether the host's GPUs are split into devices (a compute
// partition mode of more than one logical GPU, or VFs).
func (h *Host) split() bool { return h.spec.GPUs.VFs > 0 || len(h.gpus) > 0 && h.gpus[0].parts > 1 }

func (h *Host) modeString() string {
	s := h.spec.GPUs.Partition + "/" + h.spec.GPUs.MemoryPartition
	if h.spec.GPUs.VFs > 0 {
		s += fmt.Sprintf(", %d VFs", h.spec.GPUs.VFs)
	}
	return s
}

// checkPart checks that a partition or VF device of a placement is one the
// host has, in the mode it is in.
func (h *Host) checkPart(d fleet.Device) error {
	g := &h.gpus[d.GPU]
	switch {
	case !h.split():
		return fmt.Errorf("sim host %s gpu %d is not split into devices: %w", h.spec.ID, d.GPU, gpu.ErrInvalid)
	case d.Kind == fleet.Partition && (h.spec.GPUs.VFs > 0 || d.Partition != h.spec.GPUs.Partition):
		return fmt.Errorf("sim host %s gpu %d is in %s, not in compute partition mode %s: %w", h.spec.ID, d.GPU, h.modeString(), d.Partition, gpu.ErrInvalid)
	case d.Kind == fleet.VF && h.spec.GPUs.VFs != d.Parts:
		return fmt.Errorf("sim host %s gpu %d is in %s, not exposed as %d VFs: %w", h.spec.ID, d.GPU, h.modeString(), d.Parts, gpu.ErrInvalid)
	case d.Part < 0 || d.Part >= g.parts:
		return fmt.Errorf("sim host %s gpu %d has no device %d (it has %d): %w", h.spec.ID, d.GPU, d.Part, g.parts, gpu.ErrNotFound)
	}
	return nil
}

// renderIndex is the position of device part of GPU index among the
// host's render nodes.
func (h *Host) renderIndex(index, part int) int {
	n := 0
	for i := 0; i < index; i++ {
		n += h.gpus[i].parts
	}
	return n + part
}

// RenderMinors implements the agent's RenderNamer: the DRM render minors
// (renderD<minor>) of a placement's devices on an AMD host, in the order of
// p.Devices; nil on a host of another vendor. Errors: gpu.ErrNotFound for
// an unknown GPU or device, gpu.ErrInvalid for a device the GPU's mode
// does not have.
func (h *Host) RenderMinors(ctx context.Context, p *fleet.Placement) ([]int, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if !h.amd() {
		return nil, nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []int
	for _, d := range p.Devices {
		if _, err := h.gpuLocked(d.GPU); err != nil {
			return nil, err
		}
		part := 0
		switch d.Kind {
		case fleet.Partition, fleet.VF:
			if err := h.checkPart(d); err != nil {
				return nil, err
			}
			part = d.Part
		default:
			if h.split() {
				return nil, fmt.Errorf("sim host %s gpu %d is in %s and cannot be used %s: %w", h.spec.ID, d.GPU, h.modeString(), d.Kind, gpu.ErrInvalid)
			}
		}
		out = append(out, RenderMinorBase+h.renderIndex(d.GPU, part))
	}
	return out, nil
}

// makeAMDNodes creates an AMD host's nodes under dir: kfd (a free major)
// and dri/renderD<128+k> for each of its devices.
func (h *Host) makeAMDNodes(dir string, kfdMajor uint32) error {
	if m, _, ok := nodeNumbers(filepath.Join(dir, "kfd")); ok {
		kfdMajor = m // keep an earlier run's, so running containers' rules stay true
	}
	if err := mknod(filepath.Join(dir, "kfd"), kfdMajor, 0); err != nil {
		return err
	}
	dri := filepath.Join(dir, "dri")
	if err := os.MkdirAll(dri, 0o755); err != nil {
		return err
	}
	n := 0
	for i := range h.gpus {
		n += h.gpus[i].parts
	}
	for k := range n {
		if err := mknod(filepath.Join(dri, "renderD"+strconv.Itoa(RenderMinorBase+k)), DRMMajor, uint32(RenderMinorBase+k)); err != nil {
			return err
		}
	}
	return nil
}
