//go:build cgo

package nvml

import (
	"context"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpucloud/gpucloud/agent/gpu"
)

// Telemetry implements gpu.Driver with nvmlDeviceGetUtilizationRates,
// GetMemoryInfo, GetClockInfo(CLOCK_SM), GetPowerUsage (milliwatts) and
// GetTemperature(TEMPERATURE_GPU), one call each per GPU. A call that
// fails, ERROR_NOT_SUPPORTED or otherwise, leaves its field nil: the
// exporter then serves no value rather than a wrong one, and a scrape never
// fails over one counter. A GPU whose handle or UUID cannot be read is left
// out.
//
// XIDErrors are the counts of the XID events seen since WatchXIDs started
// (Open starts it), by code: NVML reports XIDs only as events; nil for a
// GPU that is not watched.
//
// Limitations: a GPU in MIG mode has no utilization, and NVML
// has no per-MIG-instance counter (see Utilization), so its instances are
// listed without EngineActive; DCGM's profiling module or NVML's GPM
// metrics (Hopper and later) would be needed.
func (d *Driver) Telemetry(ctx context.Context) ([]gpu.Telemetry, error) {
	if err := ctxErr(ctx); err != nil {
		return nil, err
	}
	n, ret := d.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, nvmlError("count GPUs", ret)
	}
	out := make([]gpu.Telemetry, 0, n)
	for i := range n {
		if err := ctxErr(ctx); err != nil {
			return nil, err
		}
		dev, ret := d.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue
		}
		uuid, ret := dev.GetUUID()
		if ret != nvml.SUCCESS {
			continue
		}
		t := gpu.Telemetry{Index: i, UUID: uuid, XIDErrors: d.xidsOf(uuid)}
		id, err := d.identify(i, dev)
		if err == nil {
			t.Model = id.modelName()
		}
		if util, ret := dev.GetUtilizationRates(); ret == nvml.SUCCESS {
			t.Utilization = ptr(float64(min(util.Gpu, 100)) / 100)
		}
		if mem, ret := dev.GetMemoryInfo(); ret == nvml.SUCCESS {
			t.MemoryUsedBytes, t.MemoryFreeBytes = ptr(mem.Used), ptr(mem.Free)
		}
		if mhz, ret := dev.GetClockInfo(nvml.CLOCK_SM); ret == nvml.SUCCESS {
			t.SMClockMHz = ptr(float64(mhz))
		}
		if mw, ret := dev.GetPowerUsage(); ret == nvml.SUCCESS {
			t.PowerWatts = ptr(float64(mw) / 1000)
		}
		if c, ret := dev.GetTemperature(nvml.TEMPERATURE_GPU); ret == nvml.SUCCESS {
			t.TemperatureC = ptr(float64(c))
		}
		if on, err := migEnabled(i, dev); err == nil && on {
			t.MIG = true
			t.Instances = migTelemetry(i, dev, id)
		}
		out = append(out, t)
	}
	return out, nil
}

// migTelemetry lists a MIG GPU's instances with their IDs, profiles and
// device UUIDs; an instance list NVML cannot read is left empty.
func migTelemetry(i int, dev nvml.Device, id identity) []gpu.MIGTelemetry {
	list, err := listInstances(i, dev)
	if err != nil {
		return nil
	}
	out := make([]gpu.MIGTelemetry, 0, len(list))
	for _, mi := range list {
		mt := gpu.MIGTelemetry{ID: int(mi.info.Id), ProfileID: int(mi.profile.Id), Start: mi.start()}
		if id.model != nil {
			if p := id.model.ProfileByID(mt.ProfileID); p != nil {
				mt.Profile = p.Name
			}
		}
		if u, err := migDeviceUUID(i, dev, mi); err == nil {
			mt.UUID = u
		}
		out = append(out, mt)
	}
	return out
}

func ptr[T any](v T) *T { return &v }
