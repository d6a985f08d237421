package sim

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/gpucloud/gpucloud/agent/gpu"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/fleet"
)

func newHost(t *testing.T, model string, count int, mig bool) *Host {
	t.Helper()
	h, err := New(Spec{ID: "h1", GPUs: GPUSpec{Model: model, Count: count, MIG: mig}})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestInventory(t *testing.T) {
	h, err := New(Spec{ID: "inv", Zone: "z", Rack: "r", Labels: map[string]string{"k": "v"},
		GPUs: GPUSpec{Model: "h100", Count: 8, NVLinkIslands: Islands{4, 4}}})
	if err != nil {
		t.Fatal(err)
	}
	inv, err := h.Inventory(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if inv.Driver != DefaultDriver || inv.CUDA != DefaultCUDA || inv.Host.ID != "inv" || inv.Host.Zone != "z" || inv.Host.Rack != "r" {
		t.Fatalf("inventory header %+v", inv)
	}
	seen := map[string]bool{}
	for i, g := range inv.Host.GPUs {
		if g.Index != i || g.Model != "H100-80GB-SXM" || g.MemoryMiB != 80*catalog.GiB || g.Island != i/4 || g.MIG {
			t.Fatalf("gpu %d: %+v", i, g)
		}
		if !strings.HasPrefix(g.UUID, "GPU-") || len(g.UUID) != 40 || seen[g.UUID] {
			t.Fatalf("gpu %d uuid %q is malformed or repeated", i, g.UUID)
		}
		seen[g.UUID] = true
		if hl := inv.Health[i]; hl.Index != i || hl.UUID != g.UUID || !hl.Healthy {
			t.Fatalf("health %d: %+v", i, hl)
		}
	}
	// UUIDs derive from the host ID, so a restarted simulation reports the
	// same devices and running placements stay valid.
	again, _ := New(Spec{ID: "inv", GPUs: GPUSpec{Model: "H100", Count: 8}})
	inv2, _ := again.Inventory(t.Context())
	if inv2.Host.GPUs[3].UUID != inv.Host.GPUs[3].UUID {
		t.Fatal("UUIDs are not deterministic")
	}
	// The caller owns the result.
	inv.Host.Labels["k"] = "changed"
	inv3, _ := h.Inventory(t.Context())
	if inv3.Host.Labels["k"] != "v" {
		t.Fatal("inventory shares labels with the host")
	}
	if err := h.SetHealth(2, false, "XID 79 "); err != nil {
		t.Fatal(err)
	}
	if err := h.SetUsage(2, 55, 1024); err != nil {
		t.Fatal(err)
	}
	inv4, _ := h.Inventory(t.Context())
	if hl := inv4.Health[2]; hl.Healthy || hl.Reason != "XID 79" || hl.UtilizationPct != 55 || hl.MemoryUsedMiB != 1024 {
		t.Fatalf("health after SetHealth: %+v", hl)
	}
	if err := h.SetUsage(2, 101, 0); !errors.Is(err, gpu.ErrInvalid) {
		t.Fatalf("SetUsage 101%%: %v", err)
	}
	if inv.Host.HCAs != nil {
		t.Fatalf("a host without adapters reports %+v", inv.Host.HCAs)
	}
}

// TestInventoryHCAs checks that a host's fake RDMA adapters are reported
// with their device nodes as a workload sees them.
func TestInventoryHCAs(t *testing.T) {
	h, err := New(Spec{ID: "ib", GPUs: GPUSpec{Model: "H100", Count: 2},
		HCAs: HCAs{{}, {Name: "roce", LinkLayer: Ethernet, NetDev: "eth3"}}})
	if err != nil {
		t.Fatal(err)
	}
	inv, err := h.Inventory(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := []fleet.HCA{
		{Name: "mlx5_0", LinkLayer: "InfiniBand", NetDev: "ib0", Devices: []string{"/dev/infiniband/uverbs0", "/dev/infiniband/rdma_cm"}},
		{Name: "roce", LinkLayer: "Ethernet", NetDev: "eth3", Devices: []string{"/dev/infiniband/uverbs1", "/dev/infiniband/rdma_cm"}},
	}
	if !reflect.DeepEqual(inv.Host.HCAs, want) {
		t.Fatalf("hcas %+v\nwant %+v", inv.Host.HCAs, want)
	}
	// The caller owns the result.
	inv.Host.HCAs[0].Devices[0] = "changed"
	if again, _ := h.Inventory(t.Context()); again.Host.HCAs[0].Devices[0] != "/dev/infiniband/uverbs0" {
		t.Fatal("inventory shares adapters with the host")
	}
}

func TestCPUOnlyHost(t *testing.T) {
	h, err := New(Spec{ID: "cpu"})
	if err != nil {
		t.Fatal(err)
	}
	inv, err := h.Inventory(t.Context())
	if err != nil || len(inv.Host.GPUs) != 0 || inv.Host.CPUMilli != CPUPerGPU {
		t.Fatalf("inventory %+v, %v", inv, err)
	}
	if err := h.SetMIGMode(t.Context(), 0, true); !errors.Is(err, gpu.ErrNotFound) {
		t.Fatalf("SetMIGMode on a CPU host: %v", err)
	}
}

// step is one driver call in a scripted MIG scenario.
type step struct {
	op            string // "mode-on", "mode-off", "create", "destroy", "procs"
	gpu, profile  int
	start, procs  int
	wantErr       error
	wantMsg       string
	wantInstances int // instances on the GPU after the step; -1 skips
}

func TestMIGScenarios(t *testing.T) {
	tests := []struct {
		desc  string
		model string
		mig   bool
		steps []step
	}{
		{
			desc: "mig-parted all-balanced on H100", model: "H100",
			steps: []step{
				{op: "mode-on", wantInstances: 0},
				{op: "create", profile: 19, start: 0, wantInstances: 1},
				{op: "create", profile: 19, start: 1, wantInstances: 2},
				{op: "create", profile: 14, start: 2, wantInstances: 3},
				{op: "create", profile: 9, start: 4, wantInstances: 4},
				{op: "create", profile: 19, start: 6, wantErr: gpu.ErrBusy, wantMsg: "holds slots 4-7", wantInstances: 4},
			},
		},
		{
			desc: "creating an identical instance again returns it", model: "H100", mig: true,
			steps: []step{
				{op: "create", profile: 9, start: 0, wantInstances: 1},
				{op: "create", profile: 9, start: 0, wantInstances: 1},
				{op: "create", profile: 5, start: 0, wantErr: gpu.ErrBusy, wantInstances: 1},
			},
		},
		{
			desc: "create needs MIG mode", model: "A100-80GB-SXM",
			steps: []step{
				{op: "create", profile: 19, start: 0, wantErr: gpu.ErrInvalid, wantMsg: "not in MIG mode", wantInstances: 0},
			},
		},
		{
			desc: "no MIG on L40S", model: "L40S",
			steps: []step{
				{op: "mode-on", wantErr: gpu.ErrNotSupported, wantInstances: 0},
				{op: "mode-off", wantInstances: 0},
				{op: "create", profile: 19, start: 0, wantErr: gpu.ErrNotSupported, wantInstances: 0},
			},
		},
		{
			desc: "bad start and unknown profile", model: "H200", mig: true,
			steps: []step{
				{op: "create", profile: 9, start: 2, wantErr: gpu.ErrInvalid, wantMsg: "3g.71gb (id 9) can start at slot 0 or 4, not 2", wantInstances: 0},
				{op: "create", profile: 42, start: 0, wantErr: gpu.ErrNotSupported, wantMsg: "19 1g.18gb", wantInstances: 0},
				{op: "create", gpu: 8, profile: 19, start: 0, wantErr: gpu.ErrNotFound, wantInstances: -1},
			},
		},
		{
			desc: "MIG mode stays on while instances exist", model: "H100", mig: true,
			steps: []step{
				{op: "create", profile: 0, start: 0, wantInstances: 1},
				{op: "mode-off", wantErr: gpu.ErrBusy, wantMsg: "must be destroyed", wantInstances: 1},
				{op: "destroy", start: 0, wantInstances: 0},
				{op: "destroy", start: 0, wantErr: gpu.ErrNotFound, wantInstances: 0},
				{op: "mode-off", wantInstances: 0},
				{op: "mode-off", wantInstances: 0},
			},
		},
		{
			desc: "MIG mode does not change under processes", model: "H100",
			steps: []step{
				{op: "procs", procs: 2, wantInstances: 0},
				{op: "mode-on", wantErr: gpu.ErrBusy, wantMsg: "2 process(es)", wantInstances: 0},
				{op: "procs", procs: 0, wantInstances: 0},
				{op: "mode-on", wantInstances: 0},
				{op: "mode-on", wantInstances: 0},
			},
		},
		{
			desc: "destroy inside an instance is not found", model: "H100", mig: true,
			steps: []step{
				{op: "create", profile: 9, start: 4, wantInstances: 1},
				{op: "destroy", start: 5, wantErr: gpu.ErrNotFound, wantMsg: "slot 5", wantInstances: 1},
				{op: "destroy", start: 4, wantInstances: 0},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			h := newHost(t, tt.model, 8, tt.mig)
			ctx := t.Context()
			for i, s := range tt.steps {
				var err error
				switch s.op {
				case "mode-on":
					err = h.SetMIGMode(ctx, s.gpu, true)
				case "mode-off":
					err = h.SetMIGMode(ctx, s.gpu, false)
				case "create":
					var in gpu.MIGInstance
					in, err = h.CreateMIG(ctx, s.gpu, s.profile, s.start)
					if err == nil && (in.UUID != MIGUUID("h1", s.gpu, s.profile, s.start) || in.GPU != s.gpu || in.Start != s.start) {
						t.Fatalf("step %d: instance %+v", i, in)
					}
				case "destroy":
					err = h.DestroyMIG(ctx, s.gpu, s.start)
				case "procs":
					err = h.SetProcesses(GPUUUID("h1", s.gpu), s.procs)
				}
				if s.wantErr == nil && err != nil {
					t.Fatalf("step %d %s: %v", i, s.op, err)
				}
				if s.wantErr != nil && (!errors.Is(err, s.wantErr) || !strings.Contains(err.Error(), s.wantMsg)) {
					t.Fatalf("step %d %s: error %v, want %v containing %q", i, s.op, err, s.wantErr, s.wantMsg)
				}
				if s.wantInstances >= 0 {
					inv, err := h.Inventory(ctx)
					if err != nil {
						t.Fatal(err)
					}
					if n := len(inv.Host.GPUs[s.gpu].Instances); n != s.wantInstances {
						t.Fatalf("step %d %s: %d instances, want %d", i, s.op, n, s.wantInstances)
					}
				}
			}
		})
	}
}

func TestDestroyBusyInstance(t *testing.T) {
	h := newHost(t, "H100", 1, true)
	in, err := h.CreateMIG(t.Context(), 0, 14, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.SetProcesses(in.UUID, 1); err != nil {
		t.Fatal(err)
	}
	if err := h.DestroyMIG(t.Context(), 0, 2); !errors.Is(err, gpu.ErrBusy) {
		t.Fatalf("destroy with a process: %v", err)
	}
	if err := h.SetProcesses(in.UUID, 0); err != nil {
		t.Fatal(err)
	}
	if err := h.DestroyMIG(t.Context(), 0, 2); err != nil {
		t.Fatal(err)
	}
	if err := h.SetProcesses(in.UUID, 1); !errors.Is(err, gpu.ErrNotFound) {
		t.Fatalf("processes on a destroyed instance: %v", err)
	}
}

func TestDevices(t *testing.T) {
	h := newHost(t, "H100", 4, false)
	ctx := t.Context()
	if err := h.SetMIGMode(ctx, 3, true); err != nil {
		t.Fatal(err)
	}
	mig, err := h.CreateMIG(ctx, 3, 9, 4)
	if err != nil {
		t.Fatal(err)
	}
	u := func(i int) string { return GPUUUID("h1", i) }
	tests := []struct {
		desc    string
		p       *fleet.Placement
		want    []string
		wantErr error
	}{
		{desc: "two whole GPUs in placement order", p: &fleet.Placement{ID: "a", HostID: "h1", Devices: []fleet.Device{
			{GPU: 2, UUID: u(2), Kind: fleet.Whole}, {GPU: 0, UUID: u(0), Kind: fleet.Whole}}}, want: []string{u(2), u(0)}},
		{desc: "a share is its GPU", p: &fleet.Placement{ID: "b", Devices: []fleet.Device{{GPU: 1, Kind: fleet.Share, Milli: 250}}}, want: []string{u(1)}},
		{desc: "a MIG slice is its MIG device", p: &fleet.Placement{ID: "c", HostID: "h1", Devices: []fleet.Device{
			{GPU: 3, UUID: u(3), Kind: fleet.MIGSlice, MIGProfileID: 9, MIGStart: 4}}}, want: []string{mig.UUID}},
		{desc: "CPU only", p: &fleet.Placement{ID: "d", HostID: "h1"}, want: []string{}},
		{desc: "missing MIG instance", p: &fleet.Placement{ID: "e", Devices: []fleet.Device{
			{GPU: 3, Kind: fleet.MIGSlice, MIGProfileID: 9, MIGStart: 0}}}, wantErr: gpu.ErrNotFound},
		{desc: "MIG instance of another profile", p: &fleet.Placement{ID: "f", Devices: []fleet.Device{
			{GPU: 3, Kind: fleet.MIGSlice, MIGProfileID: 5, MIGStart: 4}}}, wantErr: gpu.ErrNotFound},
		{desc: "whole GPU in MIG mode", p: &fleet.Placement{ID: "g", Devices: []fleet.Device{{GPU: 3, Kind: fleet.Whole}}}, wantErr: gpu.ErrInvalid},
		{desc: "stale UUID", p: &fleet.Placement{ID: "h", Devices: []fleet.Device{{GPU: 0, UUID: "GPU-other", Kind: fleet.Whole}}}, wantErr: gpu.ErrNotFound},
		{desc: "no such GPU", p: &fleet.Placement{ID: "i", Devices: []fleet.Device{{GPU: 4, Kind: fleet.Whole}}}, wantErr: gpu.ErrNotFound},
		{desc: "another host", p: &fleet.Placement{ID: "j", HostID: "h2"}, wantErr: gpu.ErrInvalid},
		{desc: "unknown kind", p: &fleet.Placement{ID: "k", Devices: []fleet.Device{{GPU: 0, Kind: "vgpu"}}}, wantErr: gpu.ErrInvalid},
		{desc: "nil placement", p: nil, wantErr: gpu.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			got, err := h.Devices(ctx, tt.p)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("error %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) || got == nil {
				t.Fatalf("devices %v, want %v", got, tt.want)
			}
		})
	}
}

// TestRandomLayoutsStayValid drives random MIG calls on a host from several
// goroutines and checks after each round that the scheduler's fleet accepts
// the reported layout: the simulation can never report a layout that real
// hardware (and fleet.Check) would reject.
func TestRandomLayoutsStayValid(t *testing.T) {
	h := newHost(t, "A100-40GB-SXM", 4, true)
	m, _ := catalog.Default().Model("A100-40GB-SXM")
	ctx := t.Context()
	for round := 0; round < 30; round++ {
		var wg sync.WaitGroup
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func(seed uint32) {
				defer wg.Done()
				r := seed
				for i := 0; i < 25; i++ {
					r = r*1664525 + 1013904223
					g := int(r>>4) % 4
					p := m.MIGProfiles[int(r>>12)%len(m.MIGProfiles)]
					start := p.Starts[int(r>>20)%len(p.Starts)]
					var err error
					if r>>28&3 == 0 {
						err = h.DestroyMIG(ctx, g, start)
						if errors.Is(err, gpu.ErrNotFound) {
							err = nil
						}
					} else if _, err = h.CreateMIG(ctx, g, p.ID, start); errors.Is(err, gpu.ErrBusy) {
						err = nil
					}
					if err != nil {
						t.Errorf("unexpected error: %v", err)
						return
					}
				}
			}(uint32(round*4 + w + 1))
		}
		wg.Wait()
		inv, err := h.Inventory(ctx)
		if err != nil {
			t.Fatal(err)
		}
		f := fleet.New()
		if err := f.AddHost(&inv.Host, catalog.Default()); err != nil {
			t.Fatal(err)
		}
		if err := f.Check(); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
	}
}

func TestFaults(t *testing.T) {
	boom := errors.New("boom")
	h := newHost(t, "H100", 2, true)
	ctx := t.Context()

	h.FailNext(OpCreateMIG, 2, boom)
	for i := 0; i < 2; i++ {
		if _, err := h.CreateMIG(ctx, 0, 19, 0); !errors.Is(err, boom) {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if _, err := h.CreateMIG(ctx, 0, 19, 0); err != nil {
		t.Fatalf("after the injected failures: %v", err)
	}
	if n := h.Calls(OpCreateMIG); n != 3 {
		t.Fatalf("%d CreateMIG calls counted, want 3", n)
	}

	h.Fail(OpInventory, gpu.ErrBusy)
	for i := 0; i < 3; i++ {
		if _, err := h.Inventory(ctx); !errors.Is(err, gpu.ErrBusy) {
			t.Fatalf("Fail is not persistent: %v", err)
		}
	}
	if _, err := h.Devices(ctx, &fleet.Placement{}); err != nil {
		t.Fatalf("Fail(Inventory) broke Devices: %v", err)
	}
	h.Fail(OpInventory, nil)
	if _, err := h.Inventory(ctx); err != nil {
		t.Fatalf("Fail(op, nil) did not clear: %v", err)
	}

	h.Vanish()
	for _, call := range []func() error{
		func() error { _, err := h.Inventory(ctx); return err },
		func() error { return h.SetMIGMode(ctx, 0, false) },
		func() error { _, err := h.CreateMIG(ctx, 1, 19, 0); return err },
		func() error { return h.DestroyMIG(ctx, 0, 0) },
		func() error { _, err := h.Devices(ctx, &fleet.Placement{}); return err },
	} {
		if err := call(); !errors.Is(err, gpu.ErrUnavailable) {
			t.Fatalf("vanished host answered %v", err)
		}
	}
	h.Recover()
	inv, err := h.Inventory(ctx)
	if err != nil || len(inv.Host.GPUs[0].Instances) != 1 {
		t.Fatalf("recovered host lost its state: %+v, %v", inv, err)
	}

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := h.Inventory(cancelled); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled context: %v", err)
	}
}

func TestHang(t *testing.T) {
	h := newHost(t, "H100", 1, false)
	h.Hang(OpSetMIGMode)

	// A hung call returns when its context ends.
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- h.SetMIGMode(ctx, 0, true) }()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("hung call returned %v", err)
	}

	// A hung call goes on, and succeeds, once the host recovers. Calls
	// counts it on entry, which tells the test it is blocked.
	go func() { done <- h.SetMIGMode(t.Context(), 0, true) }()
	for h.Calls(OpSetMIGMode) < 2 {
		runtime.Gosched()
	}
	if _, err := h.Inventory(t.Context()); err != nil {
		t.Fatalf("hanging one op blocked another: %v", err)
	}
	h.Recover()
	if err := <-done; err != nil {
		t.Fatalf("released call: %v", err)
	}
	inv, _ := h.Inventory(t.Context())
	if !inv.Host.GPUs[0].MIG {
		t.Fatal("released call did not take effect")
	}
}

func TestUnknownOpPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Fail with a misspelt op did not panic")
		}
	}()
	newHost(t, "H100", 1, false).Fail("CreateMig", errors.New("x"))
}

func TestLoadAndUtilization(t *testing.T) {
	ctx := context.Background()
	h, err := New(Spec{ID: "h-load", GPUs: GPUSpec{Model: "H100", Count: 2, MIG: true}})
	if err != nil {
		t.Fatal(err)
	}
	g0, g1 := GPUUUID("h-load", 0), GPUUUID("h-load", 1)
	in, err := h.CreateMIG(ctx, 1, 9, 0)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := h.Utilization(ctx, []string{g0, in.UUID}); err != nil || v != 0 {
		t.Fatalf("before any load: %v, %v", v, err)
	}
	for u, v := range map[string]float64{g0: 0.5, in.UUID: 0.9} {
		if err := h.SetLoad(u, v); err != nil {
			t.Fatal(err)
		}
	}
	if v, err := h.Utilization(ctx, []string{in.UUID}); err != nil || v != 0.9 {
		t.Fatalf("MIG device: %v, %v", v, err)
	}
	if v, err := h.Utilization(ctx, []string{g0, in.UUID}); err != nil || v != 0.7 {
		t.Fatalf("mean: %v, %v", v, err)
	}
	// The MIG instance's load is its own, not its GPU's.
	if v, err := h.Utilization(ctx, []string{g1}); err != nil || v != 0 {
		t.Fatalf("parent of the MIG instance: %v, %v", v, err)
	}
	if err := h.SetLoad(g0, 1.5); !errors.Is(err, gpu.ErrInvalid) {
		t.Fatalf("load 1.5: %v", err)
	}
	if err := h.SetLoad("GPU-nope", 0.5); !errors.Is(err, gpu.ErrNotFound) {
		t.Fatalf("unknown device: %v", err)
	}
	if _, err := h.Utilization(ctx, []string{"GPU-nope"}); !errors.Is(err, gpu.ErrNotFound) {
		t.Fatalf("unknown device: %v", err)
	}
	if _, err := h.Utilization(ctx, nil); !errors.Is(err, gpu.ErrInvalid) {
		t.Fatalf("no devices: %v", err)
	}
	h.FailNext(OpUtilization, 1, errors.New("boom"))
	if _, err := h.Utilization(ctx, []string{g0}); err == nil || h.Calls(OpUtilization) == 0 {
		t.Fatalf("injected failure: %v", err)
	}
}
