//go:build cgo

package nvml

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpucloud/gpucloud/agent/gpu"
	"github.com/gpucloud/gpucloud/fleet"
)

// migH100 is an H100 in MIG mode.
func migH100(t *testing.T) *fakeGPU {
	g := h100(t)
	g.mig, g.pendingMIG = nvml.DEVICE_MIG_ENABLE, nvml.DEVICE_MIG_ENABLE
	return g
}

// migCalls are the NVML calls that read or change MIG state; a request the
// catalog rejects must not reach any of them.
var migCalls = []string{
	"GetMigMode", "SetMigMode", "GetGpuInstanceProfileInfo", "GetGpuInstances",
	"CreateGpuInstanceWithPlacement", "CreateComputeInstance", "GpuInstance.Destroy",
}

func TestCreateMIGRejectedByCatalog(t *testing.T) {
	tests := []struct {
		desc       string
		gpu        func(t *testing.T) *fakeGPU
		profile    int
		start      int
		want       error
		wantInText string
	}{{
		desc: "3g at slot 2", gpu: migH100, profile: 9, start: 2,
		want: gpu.ErrInvalid, wantInText: "can start at slot 0 or 4, not 2",
	}, {
		desc: "7g at slot 1", gpu: migH100, profile: 0, start: 1,
		want: gpu.ErrInvalid, wantInText: "7g.80gb (id 0) can start at slot 0, not 1",
	}, {
		desc: "profile the model lacks", gpu: migH100, profile: 42, start: 0,
		want: gpu.ErrNotSupported, wantInText: "MIG profile 42",
	}, {
		desc: "model without MIG", gpu: l40s, profile: 19, start: 0,
		want: gpu.ErrNotSupported, wantInText: "L40S has no MIG",
	}}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			lib := newFakeLib(tt.gpu(t))
			_, err := New(lib, nil).CreateMIG(context.Background(), 0, tt.profile, tt.start)
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.wantInText) {
				t.Fatalf("CreateMIG = %v, want %v mentioning %q", err, tt.want, tt.wantInText)
			}
			if calls := lib.callsMatching(migCalls...); len(calls) > 0 {
				t.Errorf("rejected request reached NVML: %v", calls)
			}
		})
	}
}

func TestCreateMIGRejectedByState(t *testing.T) {
	tests := []struct {
		desc       string
		gpu        func(t *testing.T) *fakeGPU
		index      int
		profile    int
		start      int
		want       error
		wantInText string
	}{{
		desc: "GPU not in MIG mode", gpu: h100, profile: 9, start: 0,
		want: gpu.ErrInvalid, wantInText: "not in MIG mode",
	}, {
		desc:  "slots held by another instance",
		gpu:   func(t *testing.T) *fakeGPU { return migH100(t).withInstance(9, 0) },
		index: 0, profile: 5, start: 0,
		want: gpu.ErrBusy, wantInText: "3g.40gb (id 9) holds slots 0-3",
	}, {
		desc:    "second media instance",
		gpu:     func(t *testing.T) *fakeGPU { return migH100(t).withInstance(20, 0) },
		profile: 20, start: 6,
		want: gpu.ErrBusy, wantInText: "media engines",
	}, {
		desc: "unknown GPU", gpu: migH100, index: 3, profile: 9, start: 0,
		want: gpu.ErrNotFound, wantInText: "gpu 3",
	}}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			lib := newFakeLib(tt.gpu(t))
			_, err := New(lib, nil).CreateMIG(context.Background(), tt.index, tt.profile, tt.start)
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.wantInText) {
				t.Fatalf("CreateMIG = %v, want %v mentioning %q", err, tt.want, tt.wantInText)
			}
			if calls := lib.callsMatching("CreateGpuInstanceWithPlacement", "CreateComputeInstance"); len(calls) > 0 {
				t.Errorf("rejected request created something: %v", calls)
			}
		})
	}
}

func TestCreateMIG(t *testing.T) {
	g := migH100(t).withInstance(9, 0)
	lib := newFakeLib(g)
	d := New(lib, nil)
	got, err := d.CreateMIG(context.Background(), 0, 9, 4)
	if err != nil {
		t.Fatal(err)
	}
	gi := g.instanceAt(4)
	if gi == nil || gi.profile.ID != 9 || len(gi.cis) != 1 || gi.cis[0].slices != gi.profile.ComputeSlices {
		t.Fatalf("GPU instances after create: %+v; want a 3g at slot 4 with one compute instance spanning it", g.instances)
	}
	want := gpu.MIGInstance{GPU: 0, ProfileID: 9, Start: 4, UUID: gi.uuid()}
	if got != want {
		t.Errorf("CreateMIG = %+v, want %+v", got, want)
	}

	// The same request again returns the instance as it is.
	lib.calls = nil
	again, err := d.CreateMIG(context.Background(), 0, 9, 4)
	if err != nil || again != want {
		t.Errorf("CreateMIG again = %+v, %v; want %+v", again, err, want)
	}
	if calls := lib.callsMatching("CreateGpuInstanceWithPlacement", "CreateComputeInstance"); len(calls) > 0 {
		t.Errorf("idempotent create created something: %v", calls)
	}
}

func TestCreateMIGFinishesAnInstanceWithoutComputeInstance(t *testing.T) {
	g := migH100(t)
	gi := g.addInstance(14, 2)
	lib := newFakeLib(g)
	got, err := New(lib, nil).CreateMIG(context.Background(), 0, 14, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(gi.cis) != 1 || got.UUID != gi.uuid() || len(g.instances) != 1 {
		t.Errorf("CreateMIG = %+v with %d compute instances on %d GPU instances; want the existing instance finished", got, len(gi.cis), len(g.instances))
	}
	if calls := lib.callsMatching("CreateGpuInstanceWithPlacement"); len(calls) > 0 {
		t.Errorf("created a second GPU instance: %v", calls)
	}
}

func TestCreateMIGUndoesOnComputeInstanceFailure(t *testing.T) {
	g := migH100(t)
	g.fail = map[string]nvml.Return{"CreateComputeInstance": nvml.ERROR_INSUFFICIENT_RESOURCES}
	_, err := New(newFakeLib(g), nil).CreateMIG(context.Background(), 0, 19, 3)
	if !errors.Is(err, gpu.ErrBusy) {
		t.Errorf("CreateMIG = %v, want ErrBusy", err)
	}
	if len(g.instances) != 0 {
		t.Errorf("GPU instances left behind: %+v", g.instances)
	}
}

func TestDestroyMIG(t *testing.T) {
	g := migH100(t).withInstance(9, 0).withInstance(19, 4)
	lib := newFakeLib(g)
	d := New(lib, nil)
	if err := d.DestroyMIG(context.Background(), 0, 4); err != nil {
		t.Fatal(err)
	}
	if len(g.instances) != 1 || g.instanceAt(0) == nil {
		t.Errorf("instances after destroying slot 4: %+v; want only the 3g at 0", g.instances)
	}
	if err := d.DestroyMIG(context.Background(), 0, 4); !errors.Is(err, gpu.ErrNotFound) {
		t.Errorf("DestroyMIG of a missing instance = %v, want ErrNotFound", err)
	}
	if err := d.DestroyMIG(context.Background(), 0, 7); !errors.Is(err, gpu.ErrNotFound) {
		t.Errorf("DestroyMIG of an empty slot = %v, want ErrNotFound", err)
	}

	g.fail = map[string]nvml.Return{"ComputeInstance.Destroy": nvml.ERROR_IN_USE}
	if err := d.DestroyMIG(context.Background(), 0, 0); !errors.Is(err, gpu.ErrBusy) {
		t.Errorf("DestroyMIG with processes running = %v, want ErrBusy", err)
	}
	if err := New(newFakeLib(h100(t)), nil).DestroyMIG(context.Background(), 0, 0); !errors.Is(err, gpu.ErrNotFound) {
		t.Errorf("DestroyMIG on a GPU not in MIG mode = %v, want ErrNotFound", err)
	}
}

func TestSetMIGMode(t *testing.T) {
	ctx := context.Background()

	g := h100(t)
	lib := newFakeLib(g)
	if err := New(lib, nil).SetMIGMode(ctx, 0, true); err != nil || g.mig != nvml.DEVICE_MIG_ENABLE {
		t.Errorf("SetMIGMode on = %v, mode %d; want MIG on", err, g.mig)
	}

	// The mode a GPU is already in is set without asking NVML, busy or not.
	g = migH100(t)
	g.fail = map[string]nvml.Return{"SetMigMode": nvml.ERROR_IN_USE}
	lib = newFakeLib(g)
	if err := New(lib, nil).SetMIGMode(ctx, 0, true); err != nil || len(lib.callsMatching("SetMigMode")) > 0 {
		t.Errorf("SetMIGMode on a MIG GPU = %v after %v; want nil without a change", err, lib.callsMatching("SetMigMode"))
	}

	g = migH100(t).withInstance(0, 0)
	if err := New(newFakeLib(g), nil).SetMIGMode(ctx, 0, false); !errors.Is(err, gpu.ErrBusy) || g.mig != nvml.DEVICE_MIG_ENABLE {
		t.Errorf("SetMIGMode off with an instance = %v; want ErrBusy and MIG still on", err)
	}

	g = h100(t)
	g.activation = nvml.ERROR_RESET_REQUIRED
	if err := New(newFakeLib(g), nil).SetMIGMode(ctx, 0, true); !errors.Is(err, gpu.ErrBusy) || !strings.Contains(err.Error(), "pending") {
		t.Errorf("SetMIGMode needing a reset = %v; want ErrBusy saying the mode is pending", err)
	}

	lib = newFakeLib(l40s(t))
	if err := New(lib, nil).SetMIGMode(ctx, 0, true); !errors.Is(err, gpu.ErrNotSupported) {
		t.Errorf("SetMIGMode on for an L40S = %v, want ErrNotSupported", err)
	}
	if err := New(lib, nil).SetMIGMode(ctx, 0, false); err != nil {
		t.Errorf("SetMIGMode off for an L40S = %v, want nil", err)
	}
	if err := New(lib, nil).SetMIGMode(ctx, 5, false); !errors.Is(err, gpu.ErrNotFound) {
		t.Errorf("SetMIGMode on a GPU the host lacks = %v, want ErrNotFound", err)
	}
}

func TestDevices(t *testing.T) {
	mig0 := migH100(t).withInstance(9, 0).withInstance(19, 4)
	mig1 := migH100(t).withInstance(0, 0)
	whole := h100(t)
	lib := newFakeLib(mig0, mig1, whole)
	d := New(lib, nil)
	d.HostID = "host-1"
	ctx := context.Background()

	p := &fleet.Placement{ID: "a1", HostID: "host-1", Devices: []fleet.Device{
		{GPU: 0, Kind: fleet.MIGSlice, MIGProfileID: 19, MIGStart: 4},
		{GPU: 1, Kind: fleet.MIGSlice, MIGProfileID: 0, MIGStart: 0},
		{GPU: 0, Kind: fleet.MIGSlice, MIGProfileID: 9, MIGStart: 0},
		{GPU: 2, Kind: fleet.Whole, UUID: whole.uuid},
	}}
	got, err := d.Devices(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{mig0.instanceAt(4).uuid(), mig1.instanceAt(0).uuid(), mig0.instanceAt(0).uuid(), whole.uuid}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Devices = %v, want %v", got, want)
	}
	for _, u := range got[:3] {
		if !strings.HasPrefix(u, "MIG-") {
			t.Errorf("MIG slice device %q is not a MIG device UUID", u)
		}
	}
	if calls := lib.callsMatching("CreateGpuInstanceWithPlacement", "CreateComputeInstance", "SetMigMode"); len(calls) > 0 {
		t.Errorf("Devices changed something: %v", calls)
	}

	metal := &fleet.Placement{ID: "m1", Metal: true}
	if got, err := d.Devices(ctx, metal); err != nil || !reflect.DeepEqual(got, []string{mig0.uuid, mig1.uuid, whole.uuid}) {
		t.Errorf("Devices(metal) = %v, %v; want every GPU's UUID", got, err)
	}

	bad := []struct {
		desc string
		dev  fleet.Device
		host string
		want error
	}{
		{"no instance at the start", fleet.Device{GPU: 1, Kind: fleet.MIGSlice, MIGProfileID: 19, MIGStart: 6}, "", gpu.ErrNotFound},
		{"another profile at the start", fleet.Device{GPU: 0, Kind: fleet.MIGSlice, MIGProfileID: 5, MIGStart: 0}, "", gpu.ErrNotFound},
		{"MIG slice on a GPU not in MIG mode", fleet.Device{GPU: 2, Kind: fleet.MIGSlice, MIGProfileID: 19, MIGStart: 0}, "", gpu.ErrNotFound},
		{"whole GPU in MIG mode", fleet.Device{GPU: 0, Kind: fleet.Whole}, "", gpu.ErrInvalid},
		{"shared GPU in MIG mode", fleet.Device{GPU: 1, Kind: fleet.Share, Milli: 500}, "", gpu.ErrInvalid},
		{"another GPU's UUID", fleet.Device{GPU: 2, Kind: fleet.Whole, UUID: "GPU-elsewhere"}, "", gpu.ErrNotFound},
		{"GPU the host lacks", fleet.Device{GPU: 8, Kind: fleet.Whole}, "", gpu.ErrNotFound},
		{"another host", fleet.Device{GPU: 2, Kind: fleet.Whole}, "host-2", gpu.ErrInvalid},
	}
	for _, tt := range bad {
		p := &fleet.Placement{ID: "b1", HostID: tt.host, Devices: []fleet.Device{tt.dev}}
		if _, err := d.Devices(ctx, p); !errors.Is(err, tt.want) {
			t.Errorf("%s: Devices = %v, want %v", tt.desc, err, tt.want)
		}
	}
}

// A catalog-valid instance created through the driver shows up in the
// inventory exactly as CreateMIG placed it, and its UUID is the one Devices
// returns.
func TestCreateThenInventoryAndDevices(t *testing.T) {
	g := migH100(t)
	g.nvmlSize = map[int]int{9: 3, 0: 7} // go-nvml mock's sizes
	lib := newFakeLib(g)
	d := New(lib, nil)
	ctx := context.Background()
	a, err := d.CreateMIG(ctx, 0, 9, 4)
	if err != nil {
		t.Fatal(err)
	}
	b, err := d.CreateMIG(ctx, 0, 15, 2)
	if err != nil {
		t.Fatal(err)
	}
	inv, err := d.Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m := model(t, "H100-80GB-SXM")
	p15, p9 := m.ProfileByID(15), m.ProfileByID(9)
	want := []fleet.MIGInstance{
		{ProfileID: 15, Start: 2, Slots: p15.MemorySlots, Slices: p15.ComputeSlices},
		{ProfileID: 9, Start: 4, Slots: p9.MemorySlots, Slices: p9.ComputeSlices},
	}
	if got := inv.Host.GPUs[0].Instances; !reflect.DeepEqual(got, want) {
		t.Errorf("inventory instances %+v, want %+v", got, want)
	}
	p := &fleet.Placement{Devices: []fleet.Device{
		{GPU: 0, Kind: fleet.MIGSlice, MIGProfileID: 9, MIGStart: 4},
		{GPU: 0, Kind: fleet.MIGSlice, MIGProfileID: 15, MIGStart: 2},
	}}
	if got, err := d.Devices(ctx, p); err != nil || !reflect.DeepEqual(got, []string{a.UUID, b.UUID}) {
		t.Errorf("Devices = %v, %v; want %v", got, err, []string{a.UUID, b.UUID})
	}
}

func TestOpenWithoutLibrary(t *testing.T) {
	d, err := Open()
	if err == nil {
		d.Close()
		t.Skip("NVML is present on this machine")
	}
	if !errors.Is(err, gpu.ErrUnavailable) || !strings.Contains(err.Error(), "libnvidia-ml.so.1") {
		t.Errorf("Open without NVML = %v, want ErrUnavailable naming libnvidia-ml.so.1", err)
	}
}
