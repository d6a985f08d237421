package containerd

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/agent/gpu/sim"
	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/fleet"
)

// TestAMDPartitionDevices runs a CPX partition of a simulated MI300X host
// (two GPUs in CPX: 16 logical GPUs, renderD128 to renderD143): the
// workload opens /dev/kfd and exactly its partition's render node (ENXIO:
// allowed, no driver behind it), finds no other render node or NVIDIA node
// in its /dev, is denied another partition's node even where one exists
// (EPERM), and its environment names its one GPU the ROCm way.
func TestAMDPartitionDevices(t *testing.T) {
	need(t)
	host, err := sim.New(sim.Spec{ID: "h-amd", GPUs: sim.GPUSpec{Model: "MI300X", Count: 2, Partition: "CPX"}})
	if err != nil {
		t.Fatal(err)
	}
	dev := filepath.Join(t.TempDir(), "dev")
	if err := host.MakeDeviceNodes(dev); err != nil {
		t.Fatal(err)
	}
	rt := newRuntime(t, func(c *Config) { c.DevDir = dev })
	// Partition 3 of GPU 1 is the host's twelfth logical GPU: renderD139.
	pl := &fleet.Placement{ID: "p", HostID: "h-amd", Devices: []fleet.Device{{GPU: 1, Kind: fleet.Partition, Part: 3, Parts: 8, Partition: "CPX"}}}
	minors, err := host.RenderMinors(t.Context(), pl)
	if err != nil || !slices.Equal(minors, []int{139}) {
		t.Fatalf("render minors %v, %v; want [139]", minors, err)
	}
	uuids, err := host.Devices(t.Context(), pl)
	if err != nil || len(uuids) != 1 || uuids[0] != sim.PartUUID("h-amd", 1, 3) {
		t.Fatalf("devices %v, %v", uuids, err)
	}
	open := func(p string) string {
		return fmt.Sprintf("(: < %s) 2>&1 | sed 's/^/%s: /'; ", p, strings.ReplaceAll(p, "/", "_"))
	}
	probe := []string{"/dev/kfd", "/dev/dri/renderD139", "/dev/dri/renderD138", "/dev/nvidiactl", "/testdev/renderD138", "/testdev/nvidia0"}
	want := map[string]string{
		"/dev/kfd": "No such device or address", "/dev/dri/renderD139": "No such device or address",
		"/dev/dri/renderD138": "o such file", "/dev/nvidiactl": "o such file",
		"/testdev/renderD138": "Operation not permitted", "/testdev/nvidia0": "Operation not permitted",
	}
	var script strings.Builder
	for _, p := range probe {
		script.WriteString(open(p))
	}
	script.WriteString(`echo "dri: $(ls /dev/dri)"; echo "rocr=$ROCR_VISIBLE_DEVICES hip=$HIP_VISIBLE_DEVICES cuda=$CUDA_VISIBLE_DEVICES nvidia=$NVIDIA_VISIBLE_DEVICES"`)
	s := runtime.Spec{InstanceID: newID(t), Command: sh(script.String()), Devices: uuids, RenderMinors: minors}
	_, out := run(t, rt, s)
	for p, w := range want {
		prefix := strings.ReplaceAll(p, "/", "_") + ": "
		line := ""
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, prefix) {
				line = l
			}
		}
		if !strings.Contains(line, w) {
			t.Errorf("opening %s: %q, want %q (output %q)", p, line, w, out)
		}
	}
	for _, w := range []string{"dri: renderD139\n", "rocr=" + uuids[0] + " hip=0 cuda=0 nvidia=\n"} {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
}
