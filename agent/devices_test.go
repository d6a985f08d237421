package agent_test

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/gpucloud/gpucloud/agent"
	"github.com/gpucloud/gpucloud/agent/gpu/sim"
	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/fleet"
)

// recorder is a runtime that records the specs it is asked to start.
type recorder struct {
	runtime.Runtime
	mu    sync.Mutex
	specs map[string]runtime.Spec
}

func (r *recorder) Start(ctx context.Context, s runtime.Spec) error {
	r.mu.Lock()
	r.specs[s.InstanceID] = s
	r.mu.Unlock()
	return r.Runtime.Start(ctx, s)
}

func (r *recorder) spec(id string) runtime.Spec {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.specs[id]
}

// TestSpecCarriesLimitsAndDeviceNodes checks what the agent tells a
// container runtime to enforce: the placement's CPU and memory, the GPU
// indexes whose nodes the workload may open, and its MIG slices by GPU
// and compute instance IDs (the sim driver names them).
func TestSpecCarriesLimitsAndDeviceNodes(t *testing.T) {
	rec := &recorder{specs: map[string]runtime.Spec{}}
	e := newEnv(t, h100, func(c *agent.Config) {
		rec.Runtime = c.Runtime
		c.Runtime = rec
	})
	withLimits := func(p *fleet.Placement) *fleet.Placement {
		p.CPUMilli, p.MemoryMiB = 4000, 16384
		return p
	}
	tests := []struct {
		id      string
		pl      *fleet.Placement
		wantGPU []int
		wantMIG []runtime.MIGDevice
	}{
		{id: "i-whole", pl: withLimits(whole(h100.ID, 0, 1)), wantGPU: []int{0, 1}},
		{id: "i-share", pl: withLimits(shared(h100.ID, 2, 250, 8192)), wantGPU: []int{2}},
		// The sim driver numbers a GPU instance by its start slot + 1.
		{id: "i-mig", pl: withLimits(mig3g(h100.ID, 3, 4, true)), wantMIG: []runtime.MIGDevice{{GPU: 3, GI: 5, CI: 0}}},
	}
	for _, tt := range tests {
		e.assign(e.assignment(tt.id, tt.pl, serveScript))
	}
	for _, tt := range tests {
		e.ready(tt.id)
		s := rec.spec(tt.id)
		if s.CPUMilli != 4000 || s.MemoryMiB != 16384 || !slices.Equal(s.GPUIndexes, tt.wantGPU) || !slices.Equal(s.MIG, tt.wantMIG) {
			t.Errorf("%s: spec has %d milli-CPUs, %d MiB, GPUs %v, MIG %+v; want 4000, 16384, %v, %+v",
				tt.id, s.CPUMilli, s.MemoryMiB, s.GPUIndexes, s.MIG, tt.wantGPU, tt.wantMIG)
		}
	}
}

// TestAMDSpecCarriesRenderNodes: on an AMD host the agent gives a
// partition's workload its render node (the sim driver numbers them in GPU
// then device order from renderD128) and the partition's own UUID, no
// NVIDIA GPU index.
func TestAMDSpecCarriesRenderNodes(t *testing.T) {
	rec := &recorder{specs: map[string]runtime.Spec{}}
	amd := sim.Spec{ID: "amd1", Zone: "zone-a", GPUs: sim.GPUSpec{Model: "MI300X", Count: 2, Partition: "CPX"}}
	e := newEnv(t, amd, func(c *agent.Config) {
		rec.Runtime = c.Runtime
		c.Runtime = rec
	})
	pl := &fleet.Placement{HostID: amd.ID, CPUMilli: 4000, MemoryMiB: 16384,
		Devices: []fleet.Device{{GPU: 1, Kind: fleet.Partition, Part: 5, Parts: 8, Partition: "CPX"}}}
	e.assign(e.assignment("i-cpx", pl, serveScript))
	e.ready("i-cpx")
	s := rec.spec("i-cpx")
	if !slices.Equal(s.RenderMinors, []int{128 + 8 + 5}) || len(s.GPUIndexes) != 0 || len(s.MIG) != 0 ||
		!slices.Equal(s.Devices, []string{sim.PartUUID(amd.ID, 1, 5)}) {
		t.Errorf("spec: render %v, GPUs %v, MIG %v, devices %v", s.RenderMinors, s.GPUIndexes, s.MIG, s.Devices)
	}
}
