package containerd

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/pkg/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gpucloud/gpucloud/agent/gpu/sim"
	"github.com/gpucloud/gpucloud/agent/runtime"
)

// cdiNode is a device node of a fake CDI specification.
type cdiNode struct {
	Path     string `json:"path"`
	HostPath string `json:"hostPath,omitempty"`
	Type     string `json:"type,omitempty"`
	Major    int64  `json:"major,omitempty"`
	Minor    int64  `json:"minor,omitempty"`
}

// writeCDISpec writes, into dir, the CDI specification the NVIDIA
// Container Toolkit would generate for a host of 4 GPUs (nvidia-ctk cdi
// generate, index names) with two MIG devices on GPU 2: "2:0" the slice
// (GI gi, CI ci) and "2:1" another (GI gi+1, CI 0). Nodes point at devDir
// (the sim driver's fake nodes); with numbers, they carry their numbers
// and need no node on the host.
func writeCDISpec(t *testing.T, dir, devDir string, gi, ci int, numbers bool) {
	t.Helper()
	capsMajor := int64(511)
	node := func(p string, major, minor int64) cdiNode {
		n := cdiNode{Path: p, HostPath: filepath.Join(devDir, strings.TrimPrefix(p, "/dev/"))}
		if numbers {
			n.Type, n.Major, n.Minor = "c", major, minor
		}
		return n
	}
	capNode := func(gi, ci int) cdiNode {
		m := sim.MIGCapMinor(2, gi, ci)
		return node("/dev/nvidia-caps/nvidia-cap"+strconv.Itoa(m), capsMajor, int64(m))
	}
	type edits struct {
		Env         []string  `json:"env,omitempty"`
		DeviceNodes []cdiNode `json:"deviceNodes,omitempty"`
	}
	type device struct {
		Name           string `json:"name"`
		ContainerEdits edits  `json:"containerEdits"`
	}
	var devs []device
	for g := range 4 {
		devs = append(devs, device{Name: strconv.Itoa(g), ContainerEdits: edits{
			DeviceNodes: []cdiNode{node("/dev/nvidia"+strconv.Itoa(g), sim.NVIDIAMajor, int64(g))}}})
	}
	parent := node("/dev/nvidia2", sim.NVIDIAMajor, 2)
	devs = append(devs,
		device{Name: "2:1", ContainerEdits: edits{DeviceNodes: []cdiNode{parent, capNode(gi+1, -1), capNode(gi+1, 0)}}},
		device{Name: "2:0", ContainerEdits: edits{DeviceNodes: []cdiNode{parent, capNode(gi, -1), capNode(gi, ci)}}},
	)
	spec := map[string]any{
		"cdiVersion": "0.5.0",
		"kind":       CDIKind,
		"devices":    devs,
		"containerEdits": edits{
			Env:         []string{"NVIDIA_FAKE_TOOLKIT=1"},
			DeviceNodes: []cdiNode{node("/dev/nvidiactl", sim.NVIDIAMajor, sim.ControlMinor)},
		},
	}
	b, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "nvidia.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestCDINames checks the names the runtime asks the CDI registry for, and
// what injecting them puts in the OCI spec. It needs no containerd.
func TestCDINames(t *testing.T) {
	const gi, ci = 5, 0
	dir := t.TempDir()
	writeCDISpec(t, dir, "/nonexistent", gi, ci, true)
	minors := filepath.Join(t.TempDir(), "mig-minors")
	if err := os.WriteFile(minors, []byte(sim.MIGMinorsTable(4)), 0o644); err != nil {
		t.Fatal(err)
	}
	reg, err := newCDIRegistry([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.refresh(); err != nil {
		t.Fatal(err)
	}
	capPath := func(gi, ci int) string {
		return "/dev/nvidia-caps/nvidia-cap" + strconv.Itoa(sim.MIGCapMinor(2, gi, ci))
	}
	tests := []struct {
		desc      string
		spec      runtime.Spec
		want      []string
		wantNodes []string
		wantErr   error
		wantMsg   string
	}{
		{desc: "CPU only", spec: runtime.Spec{}},
		{desc: "whole GPUs by index", spec: runtime.Spec{GPUIndexes: []int{3, 1, 1}},
			want:      []string{"nvidia.com/gpu=1", "nvidia.com/gpu=3"},
			wantNodes: []string{"/dev/nvidia1", "/dev/nvidia3", "/dev/nvidiactl"}},
		{desc: "a share is its GPU", spec: runtime.Spec{GPUIndexes: []int{0}, ShareMilli: 250, Devices: []string{"GPU-0"}},
			want: []string{"nvidia.com/gpu=0"}, wantNodes: []string{"/dev/nvidia0", "/dev/nvidiactl"}},
		{desc: "MIG slice by its MIG device index, not its GI",
			spec:      runtime.Spec{GPUIndexes: []int{2}, MIG: []runtime.MIGDevice{{GPU: 2, GI: gi, CI: ci}}},
			want:      []string{"nvidia.com/gpu=2:0"},
			wantNodes: []string{"/dev/nvidia2", capPath(gi, -1), capPath(gi, ci), "/dev/nvidiactl"}},
		{desc: "the other MIG slice", spec: runtime.Spec{MIG: []runtime.MIGDevice{{GPU: 2, GI: gi + 1, CI: 0}}},
			want: []string{"nvidia.com/gpu=2:1"}},
		{desc: "unknown GPU", spec: runtime.Spec{GPUIndexes: []int{7}},
			want: []string{"nvidia.com/gpu=7"}, wantErr: ErrCDIDevice, wantMsg: "nvidia.com/gpu=7; the CDI specifications in " + dir + " lack it"},
		{desc: "MIG slice the specification lacks", spec: runtime.Spec{MIG: []runtime.MIGDevice{{GPU: 2, GI: 9, CI: 0}}},
			wantErr: ErrCDIDevice, wantMsg: "nvidia-ctk cdi generate"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			names, err := reg.names(tt.spec, minors)
			if err != nil {
				if tt.wantErr == nil || !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.wantMsg) {
					t.Fatalf("names = %v, want %v mentioning %q", err, tt.wantErr, tt.wantMsg)
				}
				return
			}
			if !slices.Equal(names, tt.want) {
				t.Fatalf("names %q, want %q", names, tt.want)
			}
			sp := &oci.Spec{Process: &specs.Process{}, Linux: &specs.Linux{Resources: &specs.LinuxResources{}}}
			err = reg.withDevices(names)(context.Background(), nil, nil, sp)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.wantMsg) {
					t.Fatalf("inject = %v, want %v mentioning %q", err, tt.wantErr, tt.wantMsg)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var nodes []string
			for _, d := range sp.Linux.Devices {
				nodes = append(nodes, d.Path)
			}
			slices.Sort(nodes)
			want := slices.Clone(tt.wantNodes)
			slices.Sort(want)
			if tt.wantNodes != nil && !slices.Equal(nodes, want) {
				t.Fatalf("device nodes %q, want %q", nodes, want)
			}
			if len(names) > 0 && !slices.Contains(sp.Process.Env, "NVIDIA_FAKE_TOOLKIT=1") {
				t.Fatalf("the specification's common edits are missing: env %q", sp.Process.Env)
			}
			if len(sp.Linux.Resources.Devices) != len(sp.Linux.Devices) {
				t.Fatalf("%d device cgroup rules for %d nodes", len(sp.Linux.Resources.Devices), len(sp.Linux.Devices))
			}
		})
	}
}

// TestCDIContainer runs containers whose GPUs come from a fake CDI
// specification naming the sim host's fake nodes: what the specification
// gives opens (ENXIO: no driver behind it), the rest is denied.
func TestCDIContainer(t *testing.T) {
	need(t)
	ctx := t.Context()
	if err := env.host.SetMIGMode(ctx, 2, true); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.host.SetMIGMode(context.Background(), 2, false) }()
	if _, err := env.host.CreateMIG(ctx, 2, 9, 4); err != nil { // 3g.40gb at slot 4
		t.Fatal(err)
	}
	defer func() { _ = env.host.DestroyMIG(context.Background(), 2, 4) }()
	gi, ci, err := env.host.MIGIDs(ctx, 2, 4)
	if err != nil {
		t.Fatal(err)
	}
	specDir := t.TempDir()
	writeCDISpec(t, specDir, env.devDir, gi, ci, false)
	rt := newRuntime(t, func(c *Config) { c.CDI, c.CDISpecDirs = true, []string{specDir} })
	mine := "/dev/nvidia-caps/nvidia-cap" + strconv.Itoa(sim.MIGCapMinor(2, gi, -1))
	mineCI := "/dev/nvidia-caps/nvidia-cap" + strconv.Itoa(sim.MIGCapMinor(2, gi, ci))
	other := "/dev/nvidia-caps/nvidia-cap" + strconv.Itoa(sim.MIGCapMinor(2, gi+1, 0))
	const enxio, absent = "No such device or address", "o such file"
	tests := []struct {
		desc string
		spec runtime.Spec
		want map[string]string
	}{
		{desc: "whole GPU 1", spec: runtime.Spec{GPUIndexes: []int{1}},
			want: map[string]string{"/dev/nvidia1": enxio, "/dev/nvidiactl": enxio, "/dev/nvidia0": absent,
				"/testdev/nvidia0": "Operation not permitted", "env": "NVIDIA_FAKE_TOOLKIT=1"}},
		{desc: "MIG slice on GPU 2", spec: runtime.Spec{GPUIndexes: []int{2}, MIG: []runtime.MIGDevice{{GPU: 2, GI: gi, CI: ci}}},
			want: map[string]string{"/dev/nvidia2": enxio, mine: enxio, mineCI: enxio, other: absent,
				"/testdev/nvidia-cap": "Operation not permitted"}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			s := tt.spec
			var script strings.Builder
			for p := range tt.want {
				if strings.HasPrefix(p, "/") {
					script.WriteString("(: < " + p + ") 2>&1 | sed 's|^|" + p + ": |'; ")
				}
			}
			script.WriteString("echo env: $NVIDIA_FAKE_TOOLKIT")
			s.InstanceID, s.Command = newID(t), sh(script.String())
			_, out := run(t, rt, s)
			for p, want := range tt.want {
				if p == "env" {
					if !strings.Contains(out, "env: 1") {
						t.Errorf("the specification's environment is missing: %q", out)
					}
					continue
				}
				line := ""
				for _, l := range strings.Split(out, "\n") {
					if strings.HasPrefix(l, p+": ") {
						line = l
					}
				}
				if !strings.Contains(line, want) {
					t.Errorf("opening %s: %q, want %q (output %q)", p, line, want, out)
				}
			}
		})
	}
	t.Run("unknown GPU", func(t *testing.T) {
		s := runtime.Spec{InstanceID: newID(t), Command: sh("true"), GPUIndexes: []int{9}}
		err := rt.Start(ctx, s)
		if !errors.Is(err, ErrCDIDevice) || !strings.Contains(err.Error(), "nvidia.com/gpu=9") {
			t.Fatalf("Start = %v, want %v naming nvidia.com/gpu=9", err, ErrCDIDevice)
		}
		if _, err := rt.Status(s.InstanceID); !errors.Is(err, runtime.ErrNotFound) {
			t.Fatalf("a failed start left the instance: %v", err)
		}
	})
}
