package sim

import (
	"context"
	"errors"
	"maps"
	"math"
	"testing"

	"github.com/gpucloud/gpucloud/agent/gpu"
)

func TestTelemetryFollowsLoad(t *testing.T) {
	h := newHost(t, "H100", 2, false)
	ctx := context.Background()
	if err := h.SetLoad(GPUUUID("h1", 1), 0.5); err != nil {
		t.Fatal(err)
	}
	for _, xid := range []int{79, 13, 13} {
		if err := h.InjectXID(1, xid); err != nil {
			t.Fatal(err)
		}
	}
	got, err := h.Telemetry(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("%d GPUs", len(got))
	}
	idleW, maxW, idleMHz, maxMHz, idleC, maxC := Envelope("H100-80GB-SXM")
	const total = uint64(80*1024) << 20
	idle, half := got[0], got[1]
	if idle.UUID != GPUUUID("h1", 0) || idle.Model != "H100-80GB-SXM" || idle.Index != 0 {
		t.Errorf("identity: %+v", idle)
	}
	if *idle.Utilization != 0 || *idle.MemoryUsedBytes != 0 || *idle.MemoryFreeBytes != total ||
		*idle.PowerWatts != idleW || *idle.SMClockMHz != idleMHz || *idle.TemperatureC != idleC || idle.XIDErrors == nil || len(idle.XIDErrors) != 0 {
		t.Errorf("idle GPU: %+v", idle)
	}
	if *half.Utilization != 0.5 || *half.MemoryUsedBytes != total/2 || *half.MemoryFreeBytes != total/2 ||
		*half.PowerWatts != (idleW+maxW)/2 || *half.SMClockMHz != (idleMHz+maxMHz)/2 || *half.TemperatureC != (idleC+maxC)/2 {
		t.Errorf("half-loaded GPU: %+v", half)
	}
	if want := map[int]uint64{13: 2, 79: 1}; !maps.Equal(half.XIDErrors, want) {
		t.Errorf("XIDs %v, want %v", half.XIDErrors, want)
	}
	if err := h.InjectXID(7, 79); !errors.Is(err, gpu.ErrNotFound) {
		t.Errorf("XID on gpu 7: %v", err)
	}
	if err := h.InjectXID(0, 0); !errors.Is(err, gpu.ErrInvalid) {
		t.Errorf("XID 0: %v", err)
	}
	// Telemetry's counts are the caller's.
	half.XIDErrors[13] = 100
	if again, err := h.Telemetry(ctx); err != nil || again[1].XIDErrors[13] != 2 {
		t.Errorf("a caller changed the driver's counts: %v %v", again[1].XIDErrors, err)
	}
	h.Fail(OpTelemetry, gpu.ErrUnavailable)
	if _, err := h.Telemetry(ctx); !errors.Is(err, gpu.ErrUnavailable) {
		t.Errorf("failed driver: %v", err)
	}
}

func TestTelemetryMIG(t *testing.T) {
	h := newHost(t, "H100", 1, true)
	ctx := context.Background()
	big, err := h.CreateMIG(ctx, 0, 9, 0) // 3g.40gb, 3 of 7 compute slices
	if err != nil {
		t.Fatal(err)
	}
	small, err := h.CreateMIG(ctx, 0, 19, 6) // 1g.10gb
	if err != nil {
		t.Fatal(err)
	}
	if err := h.SetLoad(big.UUID, 0.7); err != nil {
		t.Fatal(err)
	}
	got, err := h.Telemetry(ctx)
	if err != nil {
		t.Fatal(err)
	}
	g := got[0]
	if !g.MIG || g.Utilization != nil {
		t.Errorf("a MIG GPU has no utilization of its own: %+v", g)
	}
	if len(g.Instances) != 2 {
		t.Fatalf("instances: %+v", g.Instances)
	}
	in0, in1 := g.Instances[0], g.Instances[1]
	if in0.UUID != big.UUID || in0.Profile != "3g.40gb" || in0.ProfileID != 9 || in0.ID != 0 || *in0.EngineActive != 0.7 {
		t.Errorf("3g instance: %+v", in0)
	}
	if in1.UUID != small.UUID || in1.Profile != "1g.10gb" || in1.Start != 6 || in1.ID != 6 || *in1.EngineActive != 0 {
		t.Errorf("1g instance: %+v", in1)
	}
	busy := 0.7 * 3 / 7
	idleW, maxW, _, _, _, _ := Envelope("H100-80GB-SXM")
	if math.Abs(*g.PowerWatts-(idleW+(maxW-idleW)*busy)) > 1e-9 {
		t.Errorf("power %v for busy %v", *g.PowerWatts, busy)
	}
}
