//go:build cgo

package nvml

import (
	"context"
	"errors"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpucloud/gpucloud/agent/gpu"
)

func TestTelemetry(t *testing.T) {
	a := h100(t)
	a.util, a.smMHz, a.powerMW, a.tempC = 42, 1755, 312500, 61
	b := l40s(t)
	// The L40S answers neither power nor temperature, and fails its clock.
	b.fail = map[string]nvml.Return{
		"GetPowerUsage": nvml.ERROR_NOT_SUPPORTED, "GetTemperature": nvml.ERROR_NOT_SUPPORTED,
		"GetClockInfo": nvml.ERROR_UNKNOWN,
	}
	m := migH100(t).withInstance(9, 0).withInstance(19, 6)
	m.smMHz, m.powerMW, m.tempC = 1980, 100000, 40
	lost := h100(t)
	lost.fail = map[string]nvml.Return{"GetUUID": nvml.ERROR_GPU_IS_LOST}
	d := New(newFakeLib(a, b, m, lost), nil)
	ctx := context.Background()

	got, err := d.Telemetry(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("%d GPUs, want 3 (the lost one left out): %+v", len(got), got)
	}
	ta := got[0]
	if ta.Index != 0 || ta.UUID != a.uuid || ta.Model != "H100-80GB-SXM" || ta.MIG {
		t.Errorf("gpu 0 identity: %+v", ta)
	}
	if ta.Utilization == nil || *ta.Utilization != 0.42 {
		t.Errorf("gpu 0 utilization %v, want 0.42", ta.Utilization)
	}
	if ta.MemoryUsedBytes == nil || *ta.MemoryUsedBytes != 1024<<20 ||
		ta.MemoryFreeBytes == nil || *ta.MemoryFreeBytes != (81559-1024)<<20 {
		t.Errorf("gpu 0 memory: used %v free %v", ta.MemoryUsedBytes, ta.MemoryFreeBytes)
	}
	if ta.SMClockMHz == nil || *ta.SMClockMHz != 1755 || ta.PowerWatts == nil || *ta.PowerWatts != 312.5 ||
		ta.TemperatureC == nil || *ta.TemperatureC != 61 {
		t.Errorf("gpu 0 clock %v power %v temperature %v", ta.SMClockMHz, ta.PowerWatts, ta.TemperatureC)
	}
	if ta.XIDErrors != nil {
		t.Errorf("XIDs counted without WatchXIDs: %v", ta.XIDErrors)
	}
	tb := got[1]
	if tb.Model != "L40S" || tb.Utilization == nil || tb.SMClockMHz != nil || tb.PowerWatts != nil || tb.TemperatureC != nil {
		t.Errorf("gpu 1 should have utilization only of the counters: %+v", tb)
	}
	tm := got[2]
	if !tm.MIG || tm.Utilization != nil {
		t.Errorf("MIG GPU: mig %v utilization %v, want MIG without utilization", tm.MIG, tm.Utilization)
	}
	if tm.PowerWatts == nil || *tm.PowerWatts != 100 {
		t.Errorf("MIG GPU power %v", tm.PowerWatts)
	}
	if len(tm.Instances) != 2 {
		t.Fatalf("MIG instances: %+v", tm.Instances)
	}
	for k, want := range []struct {
		profile string
		id      int
		start   int
	}{{"3g.40gb", 9, 0}, {"1g.10gb", 19, 6}} {
		in := tm.Instances[k]
		gi := m.instanceAt(want.start)
		if in.Profile != want.profile || in.ProfileID != want.id || in.Start != want.start ||
			in.ID != int(gi.id) || in.UUID != gi.uuid() || in.EngineActive != nil {
			t.Errorf("instance %d: %+v, want %s (id %d) at %d, GI %d, %s", k, in, want.profile, want.id, want.start, gi.id, gi.uuid())
		}
	}

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := d.Telemetry(cancelled); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
	gone := newFakeLib(h100(t))
	gone.countRet = nvml.ERROR_DRIVER_NOT_LOADED
	if _, err := New(gone, nil).Telemetry(ctx); !errors.Is(err, gpu.ErrUnavailable) {
		t.Errorf("driver gone: %v", err)
	}
}
