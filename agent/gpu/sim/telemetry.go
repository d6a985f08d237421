package sim

import (
	"context"
	"fmt"

	"github.com/gpucloud/gpucloud/agent/gpu"
	"github.com/gpucloud/gpucloud/catalog"
)

// envelope is what a GPU model draws, clocks and heats to, idle and at full
// load; Telemetry interpolates between them by the simulated load. The
// maxima are the products' board power and boost clock.
type envelope struct {
	idleW, maxW     float64
	idleMHz, maxMHz float64
	idleC, maxC     float64
}

// envelopes are the known models' envelopes; others get defaultEnvelope.
var envelopes = map[string]envelope{
	"A100-40GB-SXM":  {idleW: 50, maxW: 400, idleMHz: 210, maxMHz: 1410, idleC: 30, maxC: 75},
	"A100-40GB-PCIE": {idleW: 35, maxW: 250, idleMHz: 210, maxMHz: 1410, idleC: 30, maxC: 80},
	"A100-80GB-SXM":  {idleW: 60, maxW: 400, idleMHz: 210, maxMHz: 1410, idleC: 30, maxC: 75},
	"A100-80GB-PCIE": {idleW: 40, maxW: 300, idleMHz: 210, maxMHz: 1410, idleC: 30, maxC: 80},
	"H100-80GB-SXM":  {idleW: 70, maxW: 700, idleMHz: 345, maxMHz: 1980, idleC: 30, maxC: 75},
	"H100-80GB-PCIE": {idleW: 45, maxW: 350, idleMHz: 345, maxMHz: 1755, idleC: 30, maxC: 80},
	"H200-141GB":     {idleW: 75, maxW: 700, idleMHz: 345, maxMHz: 1980, idleC: 30, maxC: 75},
	"H200-NVL":       {idleW: 65, maxW: 600, idleMHz: 345, maxMHz: 1785, idleC: 30, maxC: 80},
	"L40S":           {idleW: 35, maxW: 350, idleMHz: 210, maxMHz: 2520, idleC: 30, maxC: 80},
	"L4":             {idleW: 16, maxW: 72, idleMHz: 210, maxMHz: 2040, idleC: 30, maxC: 80},
	"A10":            {idleW: 20, maxW: 150, idleMHz: 210, maxMHz: 1695, idleC: 30, maxC: 80},
	"T4":             {idleW: 10, maxW: 70, idleMHz: 300, maxMHz: 1590, idleC: 30, maxC: 80},
	"V100-16GB":      {idleW: 40, maxW: 300, idleMHz: 135, maxMHz: 1530, idleC: 30, maxC: 80},
	"V100-32GB":      {idleW: 40, maxW: 300, idleMHz: 135, maxMHz: 1530, idleC: 30, maxC: 80},
	"P100-16GB":      {idleW: 30, maxW: 250, idleMHz: 544, maxMHz: 1328, idleC: 30, maxC: 80},
	"RTX-6000-ADA":   {idleW: 25, maxW: 300, idleMHz: 210, maxMHz: 2505, idleC: 30, maxC: 80},
}

var defaultEnvelope = envelope{idleW: 30, maxW: 300, idleMHz: 210, maxMHz: 1500, idleC: 30, maxC: 80}

// Envelope returns the idle and full-load power (W), SM clock (MHz) and
// temperature (C) Telemetry reports for a model between.
func Envelope(model string) (idleW, maxW, idleMHz, maxMHz, idleC, maxC float64) {
	e, ok := envelopes[model]
	if !ok {
		e = defaultEnvelope
	}
	return e.idleW, e.maxW, e.idleMHz, e.maxMHz, e.idleC, e.maxC
}

func lerp(lo, hi, f float64) float64 { return lo + (hi-lo)*f }

// Telemetry implements gpu.Driver from the simulated load (SetLoad). A
// whole GPU's utilization is its load; a GPU in MIG mode has none of its
// own (as on real GPUs) and each MIG instance's engine activity is its
// load instead. The GPU's busy fraction (its load, or the mean of its
// instances' loads weighted by their compute slices out of the GPU's
// seven) sets the memory used (that fraction of the model's memory) and
// places power, SM clock and temperature between the model's idle and
// full-load values. The XID counts are what InjectXID injected. A MIG
// instance's GPU instance ID is its start slot.
func (h *Host) Telemetry(ctx context.Context) ([]gpu.Telemetry, error) {
	if err := h.enter(ctx, OpTelemetry); err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]gpu.Telemetry, 0, len(h.gpus))
	for i := range h.gpus {
		g := &h.gpus[i]
		t := gpu.Telemetry{Index: i, UUID: g.uuid, Model: h.model.Name, MIG: g.mig}
		busy := g.load
		if g.mig {
			busy = 0
			for _, in := range g.instances {
				mt := gpu.MIGTelemetry{
					ID: in.Start, ProfileID: in.ProfileID, Start: in.Start, UUID: in.uuid,
					EngineActive: ptr(in.load),
				}
				if p := h.model.ProfileByID(in.ProfileID); p != nil {
					mt.Profile = p.Name
				}
				t.Instances = append(t.Instances, mt)
				busy += in.load * float64(in.Slices) / catalog.MIGComputeSlices
			}
			busy = min(busy, 1)
		} else {
			t.Utilization = ptr(g.load)
		}
		total := uint64(h.model.MemoryMiB) << 20
		used := uint64(busy*float64(h.model.MemoryMiB)) << 20
		t.MemoryUsedBytes, t.MemoryFreeBytes = ptr(used), ptr(total-used)
		idleW, maxW, idleMHz, maxMHz, idleC, maxC := Envelope(h.model.Name)
		t.PowerWatts = ptr(lerp(idleW, maxW, busy))
		t.SMClockMHz = ptr(lerp(idleMHz, maxMHz, busy))
		t.TemperatureC = ptr(lerp(idleC, maxC, busy))
		t.XIDErrors = make(map[int]uint64, len(g.xids))
		for xid, n := range g.xids {
			t.XIDErrors[xid] = n
		}
		out = append(out, t)
	}
	return out, nil
}

// InjectXID records an XID error of code xid (79: fallen off the bus) on a
// GPU, as the kernel driver would log one: Telemetry's count of that XID
// goes up by one. It does not change the GPU's health; SetHealth does, for
// the XIDs that make a GPU unusable. Errors: ErrNotFound for an unknown
// GPU, ErrInvalid for a code that is not positive.
func (h *Host) InjectXID(index, xid int) error {
	if xid <= 0 {
		return fmt.Errorf("XID %d: XIDs are positive: %w", xid, gpu.ErrInvalid)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	g, err := h.gpuLocked(index)
	if err != nil {
		return err
	}
	if g.xids == nil {
		g.xids = map[int]uint64{}
	}
	g.xids[xid]++
	return nil
}

func ptr[T any](v T) *T { return &v }
