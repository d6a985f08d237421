package containerd

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"

	"github.com/gpucloud/gpucloud/agent/gpu/sim"
	"github.com/gpucloud/gpucloud/agent/runtime"
)

// TestExtraDevicesSpec checks the OCI spec of a workload given extra
// device nodes (the host's RDMA adapters): each is created at its /dev
// path with the host node's numbers and allowed in the device cgroup,
// after the default deny-all; a path outside /dev, or a node that is not
// a character device, is refused.
func TestExtraDevicesSpec(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("making device nodes needs root, which CI has")
		}
		t.Skip("making device nodes needs root")
	}
	h, err := sim.New(sim.Spec{ID: "h-spec", GPUs: sim.GPUSpec{Model: "H100", Count: 2}, HCAs: make(sim.HCAs, 2)})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "dev")
	if err := h.MakeDeviceNodes(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "infiniband", "plain"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r := &Runtime{cfg: Config{DevDir: dir, PidsLimit: DefaultPidsLimit}}
	type node struct {
		path         string
		major, minor int64
	}
	uvm, _, err := charDevice(filepath.Join(dir, "nvidia-uvm"))
	if err != nil {
		t.Fatal(err)
	}
	uverbs1 := node{"/dev/infiniband/uverbs1", sim.UverbsMajor, sim.UverbsMinorBase + 1}
	cm := node{"/dev/infiniband/rdma_cm", sim.RDMACMMajor, sim.RDMACMMinor}
	tests := []struct {
		desc    string
		spec    runtime.Spec
		want    []node // the nodes beyond the default spec's, in order
		invalid bool   // refused as runtime.ErrInvalid
		refused bool   // refused otherwise
	}{
		{desc: "RDMA nodes", spec: runtime.Spec{ExtraDevices: []string{uverbs1.path, cm.path}}, want: []node{uverbs1, cm}},
		{desc: "a GPU and RDMA nodes", spec: runtime.Spec{GPUIndexes: []int{1}, ExtraDevices: []string{cm.path}},
			want: []node{{"/dev/nvidia1", sim.NVIDIAMajor, 1}, {"/dev/nvidiactl", sim.NVIDIAMajor, sim.ControlMinor},
				{"/dev/nvidia-uvm", uvm, 0}, {"/dev/nvidia-uvm-tools", uvm, 1}, cm}},
		{desc: "none", spec: runtime.Spec{}},
		{desc: "outside /dev", spec: runtime.Spec{ExtraDevices: []string{"/etc/shadow"}}, invalid: true},
		{desc: "out of /dev by ..", spec: runtime.Spec{ExtraDevices: []string{"/dev/../etc/shadow"}}, invalid: true},
		{desc: "relative", spec: runtime.Spec{ExtraDevices: []string{"infiniband/uverbs0"}}, invalid: true},
		{desc: "/dev itself", spec: runtime.Spec{ExtraDevices: []string{"/dev/"}}, invalid: true},
		{desc: "a directory", spec: runtime.Spec{ExtraDevices: []string{"/dev/infiniband"}}, refused: true},
		{desc: "a plain file", spec: runtime.Spec{ExtraDevices: []string{"/dev/infiniband/plain"}}, refused: true},
		{desc: "a missing node", spec: runtime.Spec{ExtraDevices: []string{"/dev/infiniband/uverbs9"}}, refused: true},
	}
	ctx := namespaces.WithNamespace(context.Background(), "gpucloud-spec-test")
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			s := tt.spec
			s.InstanceID, s.Command = "i-spec", []string{"/bin/true"}
			opts, err := r.specOpts(s, mounts{cwd: WorkDir}, "/test/i-spec", "", 65534, 65534)
			switch {
			case tt.invalid:
				if !errors.Is(err, runtime.ErrInvalid) {
					t.Fatalf("error %v, want ErrInvalid", err)
				}
				// Start refuses it before it makes anything.
				if err := (&Runtime{}).Start(ctx, s); !errors.Is(err, runtime.ErrInvalid) {
					t.Fatalf("Start: %v, want ErrInvalid", err)
				}
				return
			case tt.refused:
				if err == nil || errors.Is(err, runtime.ErrInvalid) {
					t.Fatalf("error %v, want a refusal", err)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			sp, err := oci.GenerateSpec(ctx, nil, &containers.Container{ID: s.InstanceID}, opts...)
			if err != nil {
				t.Fatal(err)
			}
			base, err := oci.GenerateSpec(ctx, nil, &containers.Container{ID: s.InstanceID}, oci.WithDefaultSpec(), oci.WithDefaultUnixDevices)
			if err != nil {
				t.Fatal(err)
			}
			var got []node
			for _, d := range sp.Linux.Devices[len(base.Linux.Devices):] {
				if d.Type != "c" || d.FileMode == nil || *d.FileMode != 0o666 {
					t.Errorf("device %+v", d)
				}
				got = append(got, node{d.Path, d.Major, d.Minor})
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("devices %+v, want %+v", got, tt.want)
			}
			rules := sp.Linux.Resources.Devices
			if len(rules) == 0 || rules[0].Allow || rules[0].Access != "rwm" {
				t.Fatalf("the first device rule %+v is not the deny-all", rules)
			}
			var allowed []node
			for _, rule := range rules[len(base.Linux.Resources.Devices):] {
				if !rule.Allow || rule.Type != "c" || rule.Access != "rw" || rule.Major == nil || rule.Minor == nil {
					t.Errorf("rule %+v", rule)
					continue
				}
				allowed = append(allowed, node{major: *rule.Major, minor: *rule.Minor})
			}
			var want []node
			for _, n := range tt.want {
				want = append(want, node{major: n.major, minor: n.minor})
			}
			if !slices.Equal(allowed, want) {
				t.Errorf("allowed %+v, want %+v", allowed, want)
			}
		})
	}
}
