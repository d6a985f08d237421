package upcmd

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/agent/gpu/sim"
	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/agent/runtime/containerd"
	"github.com/gpucloud/gpucloud/agent/runtime/process"
)

// The machine of issue 21: 2 cores, 23.5 GiB.
var smallMachine = resources{cpuMilli: 2000, memoryMiB: 24064}

func TestLimitScale(t *testing.T) {
	fleet := resources{cpuMilli: 1280_000, memoryMiB: 40 * 256 * 1024} // the default fleet: 40 GPUs
	for _, tc := range []struct {
		name            string
		fleet, machine  resources
		in              runtime.Spec
		wantCPU, wantMi int64
		scales          bool
	}{
		{"A100 MIG slice on the small machine", fleet, smallMachine,
			runtime.Spec{CPUMilli: 3000, MemoryMiB: 34 * 1024}, 2000, 79, true},
		{"whole host (metal) on the small machine", fleet, smallMachine,
			runtime.Spec{CPUMilli: 256_000, MemoryMiB: 2048 * 1024}, 2000, 4812, true},
		{"the whole fleet fits the machine", fleet, smallMachine,
			runtime.Spec{CPUMilli: fleet.cpuMilli, MemoryMiB: fleet.memoryMiB}, 2000, 24064, true},
		{"tiny limits stay positive", fleet, smallMachine,
			runtime.Spec{CPUMilli: 1, MemoryMiB: 1}, 1, 1, true},
		{"no limits stay none", fleet, smallMachine, runtime.Spec{}, 0, 0, true},
		{"a machine bigger than the fleet scales nothing",
			resources{cpuMilli: 8000, memoryMiB: 16384}, resources{cpuMilli: 64000, memoryMiB: 512 * 1024},
			runtime.Spec{CPUMilli: 3000, MemoryMiB: 4096}, 3000, 4096, false},
		{"only memory short", resources{cpuMilli: 8000, memoryMiB: 64 * 1024}, resources{cpuMilli: 16000, memoryMiB: 16 * 1024},
			runtime.Spec{CPUMilli: 3000, MemoryMiB: 8192}, 3000, 2048, true},
		{"only CPU short", resources{cpuMilli: 64000, memoryMiB: 8 * 1024}, resources{cpuMilli: 2000, memoryMiB: 16 * 1024},
			runtime.Spec{CPUMilli: 3000, MemoryMiB: 8192}, 2000, 8192, true},
		{"CPU under the machine's kept", fleet, smallMachine,
			runtime.Spec{CPUMilli: 1500, MemoryMiB: 1024}, 1500, 2, true},
		{"memory unknown (not Linux): CPU only", resources{cpuMilli: 8000, memoryMiB: 64 * 1024}, resources{cpuMilli: 2000},
			runtime.Spec{CPUMilli: 4000, MemoryMiB: 8192}, 2000, 8192, true},
		{"equal: nothing", smallMachine, smallMachine, runtime.Spec{CPUMilli: 2000, MemoryMiB: 24064}, 2000, 24064, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := limitScale{fleet: tc.fleet, machine: tc.machine}
			got := l.apply(tc.in)
			if got.CPUMilli != tc.wantCPU || got.MemoryMiB != tc.wantMi {
				t.Errorf("apply(%d m, %d MiB) = %d m, %d MiB; want %d m, %d MiB",
					tc.in.CPUMilli, tc.in.MemoryMiB, got.CPUMilli, got.MemoryMiB, tc.wantCPU, tc.wantMi)
			}
			if got.CPUMilli > tc.in.CPUMilli || got.MemoryMiB > tc.in.MemoryMiB {
				t.Errorf("apply raised a limit: %+v from %+v", got, tc.in)
			}
			if l.scales() != tc.scales {
				t.Errorf("scales() = %v, want %v", l.scales(), tc.scales)
			}
			if (l.describe() != "") != tc.scales {
				t.Errorf("describe() = %q with scales %v", l.describe(), tc.scales)
			}
		})
	}
}

func TestFleetLimitsDefaultFleet(t *testing.T) {
	l, err := fleetLimits(sim.DefaultFleet(), smallMachine)
	if err != nil {
		t.Fatal(err)
	}
	// 2 hosts of 8 H100, 2 of 8 A100, 4 of 2 L40S: 40 GPUs at 32 cores
	// and 256 GiB each.
	if want := (resources{cpuMilli: 40 * sim.CPUPerGPU, memoryMiB: 40 * sim.MemoryPerGPU}); l.fleet != want {
		t.Errorf("fleet %+v, want %+v", l.fleet, want)
	}
	want := "limits: the simulated hosts promise 1280 CPUs and 10240 GiB together, this machine has 2 CPUs and 23.5 GiB: " +
		"each container's memory limit is scaled by 1/436, so that all of them together fit in its memory; " +
		"a container's CPU limit is at most 2 CPUs (busy CPUs are shared in proportion to the offerings) (docs/RUNTIME.md)"
	if got := l.describe(); got != want {
		t.Errorf("describe:\n got %s\nwant %s", got, want)
	}
	if _, err := fleetLimits([]sim.Spec{{ID: "x", GPUs: sim.GPUSpec{Model: "nope", Count: 1}}}, smallMachine); err == nil {
		t.Error("a bad spec: no error")
	}
}

// TestUpSaysItScales: up's runtime line says so when it scales, and only
// then.
func TestUpSaysItScales(t *testing.T) {
	l, err := fleetLimits(sim.DefaultFleet(), smallMachine)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		limits limitScale
		want   bool
	}{
		{"small machine", l, true},
		{"big machine", limitScale{fleet: l.fleet, machine: resources{cpuMilli: 2_000_000, memoryMiB: 16 << 20}}, false},
	} {
		u := &upRuntimes{kind: upRuntimeContainerd, daemon: &containerd.Daemon{}, limits: tc.limits}
		out := u.describe()
		lines := strings.Split(out, "\n")
		if !strings.HasPrefix(lines[0], "workloads: containers") {
			t.Errorf("%s: %q", tc.name, out)
		}
		says := len(lines) == 2 && strings.Contains(lines[1], "scaled by 1/436")
		if says != tc.want || len(lines) > 2 || !tc.want && len(lines) != 1 {
			t.Errorf("%s: describe %q; want the limits line: %v", tc.name, out, tc.want)
		}
	}
}

// recordingRuntime records the spec Start got.
type recordingRuntime struct {
	containerRuntime
	got runtime.Spec
}

func (r *recordingRuntime) Start(_ context.Context, s runtime.Spec) error {
	r.got = s
	return nil
}

func TestScaledRuntimeStart(t *testing.T) {
	rec := &recordingRuntime{}
	rt := scaledRuntime{containerRuntime: rec, limits: limitScale{fleet: resources{cpuMilli: 8000, memoryMiB: 8192}, machine: resources{cpuMilli: 2000, memoryMiB: 4096}}}
	if err := rt.Start(context.Background(), runtime.Spec{InstanceID: "i-1", CPUMilli: 4000, MemoryMiB: 2048, ShareMemoryMiB: 1000}); err != nil {
		t.Fatal(err)
	}
	if rec.got.InstanceID != "i-1" || rec.got.CPUMilli != 2000 || rec.got.MemoryMiB != 1024 || rec.got.ShareMemoryMiB != 1000 {
		t.Errorf("started %+v; want i-1 at 2000 m, 1024 MiB, GPU share memory untouched", rec.got)
	}
}

// TestScaledRuntimeIsContainers: a simulated host whose container limits up
// scales still runs containers, so its volumes and instance stores are
// filesystems of their size (VolumeImages), not plain directories: up on
// a machine smaller than its fleet once lost that.
func TestScaledRuntimeIsContainers(t *testing.T) {
	if !isContainers(scaledRuntime{}) {
		t.Error("a scaled containerd runtime is not taken for containers")
	}
	if isContainers(process.New(t.TempDir())) {
		t.Error("the process runtime is taken for containers")
	}
}

// TestScaledRuntimeHidesNothing: up hands its agents the containerd
// runtime wrapped in scaledRuntime, and the agent finds the runtime's
// optional parts (pause, exec, usage, ...) by type assertion on what it
// is given: every method of the containerd runtime is on the wrapper,
// but those only up itself calls on the runtime it made. (An endpoint's
// warm pool was not frozen on up because Pause was missing.)
func TestScaledRuntimeHidesNothing(t *testing.T) {
	upOnly := map[string]bool{"Close": true, "EnsureBaseImage": true, "ImportImage": true, "ImportImageFile": true}
	rt := reflect.TypeOf(&containerd.Runtime{})
	wrapped := reflect.TypeOf(scaledRuntime{})
	for i := range rt.NumMethod() {
		name := rt.Method(i).Name
		if _, ok := wrapped.MethodByName(name); !ok && !upOnly[name] {
			t.Errorf("scaledRuntime lacks the containerd runtime's %s: the agent cannot use it on up (add its interface to containerRuntime)", name)
		}
	}
}
