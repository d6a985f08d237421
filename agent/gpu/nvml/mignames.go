//go:build cgo

package nvml

import (
	"context"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// MIGIDs returns the GPU instance ID and compute instance ID (nvidia-smi's
// GI and CI IDs) of the MIG device of the GPU instance that starts at slot
// start of GPU i: the IDs that select the slice's nvidia-caps device nodes
// (/proc/driver/nvidia-caps/mig-minors: gpu<i>/gi<GI>/ci<CI>/access), which
// a container runtime gives the workload. It implements agent.MIGNamer. The
// IDs are read from the MIG device's own handle (GetGpuInstanceId,
// GetComputeInstanceId). A GPU not in MIG mode, no instance at the slot, or
// an instance without a compute instance is gpu.ErrNotFound.
func (d *Driver) MIGIDs(ctx context.Context, i, start int) (gi, ci int, err error) {
	if err := ctxErr(ctx); err != nil {
		return 0, 0, err
	}
	// MIG state changes are serialized by mu: an instance destroyed and
	// made again between the lookup and the reads would name another one.
	d.mu.Lock()
	defer d.mu.Unlock()
	dev, err := d.device(i)
	if err != nil {
		return 0, 0, err
	}
	mi, err := instanceAt(i, dev, start)
	if err != nil {
		return 0, 0, err
	}
	mig, k, err := migDevice(i, dev, mi)
	if err != nil {
		return 0, 0, err
	}
	gi, ret := mig.GetGpuInstanceId()
	if ret != nvml.SUCCESS {
		return 0, 0, nvmlError(fmt.Sprintf("gpu %d: read MIG device %d's GPU instance ID", i, k), ret)
	}
	ci, ret = mig.GetComputeInstanceId()
	if ret != nvml.SUCCESS {
		return 0, 0, nvmlError(fmt.Sprintf("gpu %d: read MIG device %d's compute instance ID", i, k), ret)
	}
	return gi, ci, nil
}
