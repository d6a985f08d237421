//go:build cgo

package nvml

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpucloud/gpucloud/agent/gpu"
)

func TestUtilization(t *testing.T) {
	a, b := h100(t), h100(t)
	a.util, b.util = 30, 90
	m := migH100(t).withInstance(9, 0)
	lib := newFakeLib(a, b, m)
	d := New(lib, nil)
	ctx := context.Background()
	mig := m.instances[0].uuid()

	got, err := d.Utilization(ctx, []string{a.uuid, b.uuid})
	if err != nil || math.Abs(got-0.6) > 1e-9 {
		t.Fatalf("two whole GPUs: %v, %v; want 0.6", got, err)
	}
	if got, err := d.Utilization(ctx, []string{b.uuid}); err != nil || got != 0.9 {
		t.Fatalf("one GPU: %v, %v", got, err)
	}
	// A MIG device has no counter, nor has its parent in MIG mode.
	if _, err := d.Utilization(ctx, []string{mig}); !errors.Is(err, gpu.ErrNotSupported) {
		t.Fatalf("MIG device: %v, want ErrNotSupported", err)
	}
	// ... and is left out of a mean with devices that have one.
	if got, err := d.Utilization(ctx, []string{a.uuid, mig}); err != nil || got != 0.3 {
		t.Fatalf("GPU and MIG device: %v, %v; want 0.3", got, err)
	}
	if _, err := d.Utilization(ctx, []string{"GPU-nope"}); !errors.Is(err, gpu.ErrNotFound) {
		t.Fatalf("unknown UUID: %v", err)
	}
	if _, err := d.Utilization(ctx, nil); !errors.Is(err, gpu.ErrInvalid) {
		t.Fatalf("no UUIDs: %v", err)
	}
	a.fail = map[string]nvml.Return{"GetUtilizationRates": nvml.ERROR_GPU_IS_LOST}
	if _, err := d.Utilization(ctx, []string{a.uuid}); !errors.Is(err, gpu.ErrUnavailable) {
		t.Fatalf("lost GPU: %v", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := d.Utilization(cancelled, []string{b.uuid}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
}
