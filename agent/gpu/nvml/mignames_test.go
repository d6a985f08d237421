//go:build cgo

package nvml

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpucloud/gpucloud/agent"
	"github.com/gpucloud/gpucloud/agent/gpu"
)

// The agent gives MIG workloads their slices' nvidia-caps nodes through
// this interface.
var _ agent.MIGNamer = (*Driver)(nil)

func TestMIGIDs(t *testing.T) {
	// migHost is GPU 0 in MIG mode with a 1g instance at slot 0 (GI 1, CI
	// 0), a 3g instance at slot 4 (GI 2) whose compute instance has ID 3,
	// and a 1g instance at slot 2 (GI 3) without a compute instance; GPU
	// 1 is not in MIG mode.
	migHost := func(t *testing.T) *fakeLib {
		g := migH100(t).withInstance(19, 0)
		gi := g.addInstance(9, 4)
		gi.cis = append(gi.cis, &fakeCI{gi: gi, id: 3, slices: gi.profile.ComputeSlices})
		g.addInstance(19, 2)
		return newFakeLib(g, h100(t))
	}
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		desc       string
		ctx        context.Context
		gpu, start int
		fail       map[string]nvml.Return
		wantGI     int
		wantCI     int
		want       error
		wantInText string
	}{
		{desc: "1g slice at slot 0", gpu: 0, start: 0, wantGI: 1, wantCI: 0},
		{desc: "compute instance ID read from the MIG device", gpu: 0, start: 4, wantGI: 2, wantCI: 3},
		{desc: "no instance at the slot", gpu: 0, start: 6, want: gpu.ErrNotFound, wantInText: "no MIG instance starts at slot 6"},
		{desc: "instance without a compute instance", gpu: 0, start: 2, want: gpu.ErrNotFound, wantInText: "has no MIG device"},
		{desc: "GPU not in MIG mode", gpu: 1, start: 0, want: gpu.ErrNotFound, wantInText: "not in MIG mode"},
		{desc: "no such GPU", gpu: 7, start: 0, want: gpu.ErrNotFound},
		{desc: "NVML cannot read the compute instance", gpu: 0, start: 0,
			fail: map[string]nvml.Return{"MIG.GetComputeInstanceId": nvml.ERROR_NOT_SUPPORTED},
			want: gpu.ErrNotSupported, wantInText: "compute instance ID"},
		{desc: "NVML cannot list MIG devices", gpu: 0, start: 0,
			fail: map[string]nvml.Return{"GetMaxMigDeviceCount": nvml.ERROR_NOT_SUPPORTED},
			want: gpu.ErrNotSupported, wantInText: "count MIG devices"},
		{desc: "context ended", ctx: canceled, gpu: 0, start: 0, want: context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			lib := migHost(t)
			lib.gpus[0].fail = tt.fail
			ctx := tt.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			gi, ci, err := New(lib, nil).MIGIDs(ctx, tt.gpu, tt.start)
			if tt.want != nil {
				if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.wantInText) {
					t.Fatalf("MIGIDs = %d, %d, %v; want %v mentioning %q", gi, ci, err, tt.want, tt.wantInText)
				}
				return
			}
			if err != nil || gi != tt.wantGI || ci != tt.wantCI {
				t.Fatalf("MIGIDs = %d, %d, %v; want %d, %d", gi, ci, err, tt.wantGI, tt.wantCI)
			}
		})
	}
}

// The slice MIGIDs names is the one whose UUID Devices returns: both find
// the MIG device by its GPU instance.
func TestMIGIDsAndDevicesAgree(t *testing.T) {
	g := migH100(t).withInstance(19, 0).withInstance(19, 1).withInstance(9, 4)
	d := New(newFakeLib(g), nil)
	for _, start := range []int{0, 1, 4} {
		gi, ci, err := d.MIGIDs(context.Background(), 0, start)
		if err != nil {
			t.Fatal(err)
		}
		inst := g.instanceAt(start)
		if gi != int(inst.id) || ci != int(inst.cis[0].id) {
			t.Fatalf("slot %d: MIGIDs = %d, %d; the instance is GI %d CI %d", start, gi, ci, inst.id, inst.cis[0].id)
		}
		uuid, err := migDeviceUUID(0, g, migInstance{info: nvml.GpuInstanceInfo{Id: uint32(gi)}})
		if err != nil || uuid != inst.uuid() {
			t.Fatalf("slot %d: MIG device %q, %v; want %q", start, uuid, err, inst.uuid())
		}
	}
}
