//go:build cgo

package nvml

import (
	"context"
	"fmt"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpucloud/gpucloud/agent/gpu"
)

// Utilization implements gpu.Driver with nvmlDeviceGetUtilizationRates,
// the percentage of NVML's last sample period (1/6 s to 1 s, by product)
// during which a kernel ran on the GPU. It finds each UUID among the GPUs
// and, on GPUs in MIG mode, their MIG devices.
//
// Limitation: NVML has no utilization counter for a MIG device, and a GPU
// in MIG mode answers ERROR_NOT_SUPPORTED for its own, so a MIG device
// falls back to its parent GPU's value, which NVML does not give either:
// such a device has no value and is left out of the mean, and an instance
// of MIG devices only fails with gpu.ErrNotSupported (the agent then
// reports no GPU utilization for it). NVML's GPM metrics (Hopper and
// later: nvmlGpmMigSampleGet) could measure a MIG device, from two samples
// taken apart; they are not used yet. A shared GPU reports the whole GPU's
// value, which includes its other tenants' work.
func (d *Driver) Utilization(ctx context.Context, uuids []string) (float64, error) {
	if err := ctxErr(ctx); err != nil {
		return 0, err
	}
	if len(uuids) == 0 {
		return 0, fmt.Errorf("utilization of no device: %w", gpu.ErrInvalid)
	}
	want := map[string]bool{}
	for _, u := range uuids {
		want[u] = true
	}
	// parent maps each wanted UUID found to its GPU, whose counter it reads.
	parent := map[string]nvml.Device{}
	n, ret := d.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return 0, nvmlError("count GPUs", ret)
	}
	migWanted := false
	for u := range want {
		migWanted = migWanted || strings.HasPrefix(u, "MIG-")
	}
	for i := 0; i < n && len(parent) < len(want); i++ {
		if err := ctxErr(ctx); err != nil {
			return 0, err
		}
		dev, ret := d.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return 0, nvmlError(fmt.Sprintf("gpu %d: get handle", i), ret)
		}
		uuid, ret := dev.GetUUID()
		if ret != nvml.SUCCESS {
			return 0, nvmlError(fmt.Sprintf("gpu %d: read UUID", i), ret)
		}
		if want[uuid] {
			parent[uuid] = dev
		}
		if !migWanted {
			continue
		}
		on, err := migEnabled(i, dev)
		if err != nil {
			return 0, err
		}
		if on {
			if err := migDevicesOf(i, dev, want, parent); err != nil {
				return 0, err
			}
		}
	}
	for _, u := range uuids {
		if parent[u] == nil {
			return 0, fmt.Errorf("no GPU or MIG device %s on this host: %w", u, gpu.ErrNotFound)
		}
	}
	sum, read := 0.0, 0
	for _, u := range uuids {
		util, ret := parent[u].GetUtilizationRates()
		switch {
		case ret == nvml.SUCCESS:
			sum += float64(min(util.Gpu, 100)) / 100
			read++
		case noAnswer(ret):
		default:
			return 0, nvmlError("read the utilization of "+u, ret)
		}
	}
	if read == 0 {
		return 0, fmt.Errorf("NVML reads no utilization of %s (MIG devices have none): %w", strings.Join(uuids, ", "), gpu.ErrNotSupported)
	}
	return sum / float64(read), nil
}

// migDevicesOf records in parent the wanted MIG devices of GPU i.
func migDevicesOf(i int, dev nvml.Device, want map[string]bool, parent map[string]nvml.Device) error {
	count, ret := dev.GetMaxMigDeviceCount()
	if noAnswer(ret) {
		return nil
	}
	if ret != nvml.SUCCESS {
		return nvmlError(fmt.Sprintf("gpu %d: count MIG devices", i), ret)
	}
	for k := range count {
		mig, ret := dev.GetMigDeviceHandleByIndex(k)
		if ret == nvml.ERROR_NOT_FOUND || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue // An unused index.
		}
		if ret != nvml.SUCCESS {
			return nvmlError(fmt.Sprintf("gpu %d: get MIG device %d", i, k), ret)
		}
		uuid, ret := mig.GetUUID()
		if ret != nvml.SUCCESS {
			return nvmlError(fmt.Sprintf("gpu %d: read MIG device %d's UUID", i, k), ret)
		}
		if want[uuid] {
			parent[uuid] = dev
		}
	}
	return nil
}
