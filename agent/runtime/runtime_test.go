package runtime

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestEnviron(t *testing.T) {
	tests := []struct {
		desc string
		spec Spec
		want []string
	}{
		{
			desc: "no devices gives empty visibility, not inherited",
			spec: Spec{InstanceID: "i-1"},
			want: []string{"CUDA_VISIBLE_DEVICES=", "GPUCLOUD_INSTANCE_ID=i-1", "HOME=/w", "NVIDIA_VISIBLE_DEVICES=", "PATH=" + DefaultPath},
		},
		{
			desc: "whole GPUs and MIG devices joined exactly, in order",
			spec: Spec{InstanceID: "i-2", Devices: []string{"GPU-b", "MIG-a"}, Env: map[string]string{"FOO": "bar baz"}},
			want: []string{"CUDA_VISIBLE_DEVICES=GPU-b,MIG-a", "FOO=bar baz", "GPUCLOUD_INSTANCE_ID=i-2", "HOME=/w", "NVIDIA_VISIBLE_DEVICES=GPU-b,MIG-a", "PATH=" + DefaultPath},
		},
		{
			desc: "a share sets its limits and the MPS hint",
			spec: Spec{InstanceID: "i-3", Devices: []string{"GPU-x"}, ShareMilli: 250, ShareMemoryMiB: 8192},
			want: []string{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=8192M", "CUDA_VISIBLE_DEVICES=GPU-x", "GPUCLOUD_GPU_MEMORY_MIB=8192", "GPUCLOUD_GPU_SHARE_MILLI=250",
				"GPUCLOUD_INSTANCE_ID=i-3", "HOME=/w", "NVIDIA_VISIBLE_DEVICES=GPU-x", "PATH=" + DefaultPath},
		},
		{
			desc: "AMD partitions: ROCr by UUID, HIP and CUDA by index, no NVIDIA GPU; the tenant cannot widen them",
			spec: Spec{InstanceID: "i-amd", Devices: []string{"GPU-p3", "GPU-p4"}, RenderMinors: []int{139, 140},
				Env: map[string]string{"ROCR_VISIBLE_DEVICES": "all", "HIP_VISIBLE_DEVICES": "0,1,2"}},
			want: []string{"CUDA_VISIBLE_DEVICES=0,1", "GPUCLOUD_INSTANCE_ID=i-amd", "HIP_VISIBLE_DEVICES=0,1", "HOME=/w",
				"NVIDIA_VISIBLE_DEVICES=", "PATH=" + DefaultPath, "ROCR_VISIBLE_DEVICES=GPU-p3,GPU-p4"},
		},
		{
			desc: "a tiny share still gets at least 1% of the threads",
			spec: Spec{InstanceID: "i-4", ShareMilli: 5},
			want: []string{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=1", "CUDA_VISIBLE_DEVICES=", "GPUCLOUD_GPU_SHARE_MILLI=5", "GPUCLOUD_INSTANCE_ID=i-4", "HOME=/w", "NVIDIA_VISIBLE_DEVICES=", "PATH=" + DefaultPath},
		},
		{
			desc: "tenant env cannot widen its devices or forge gpucloud variables, but may set PATH and HOME",
			spec: Spec{InstanceID: "i-5", Devices: []string{"GPU-1"}, MetadataURL: "http://127.0.0.1:9", Env: map[string]string{
				"CUDA_VISIBLE_DEVICES": "all", "NVIDIA_VISIBLE_DEVICES": "all", "GPUCLOUD_GPU_SHARE_MILLI": "1000",
				"GPUCLOUD_METADATA_URL": "http://evil", "PATH": "/opt/bin", "HOME": "/home/me",
			}},
			want: []string{"CUDA_VISIBLE_DEVICES=GPU-1", "GPUCLOUD_INSTANCE_ID=i-5", "GPUCLOUD_METADATA_URL=http://127.0.0.1:9", "HOME=/home/me", "NVIDIA_VISIBLE_DEVICES=GPU-1", "PATH=/opt/bin"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			got := Environ(tt.spec, "/w")
			if !slices.Equal(got, tt.want) {
				t.Fatalf("environment\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	ok := Spec{InstanceID: "i-1.a_b", Command: []string{"true"}}
	tests := []struct {
		desc    string
		change  func(*Spec)
		wantMsg string
	}{
		{desc: "valid", change: func(*Spec) {}},
		{desc: "empty id", change: func(s *Spec) { s.InstanceID = "" }, wantMsg: "instance id"},
		{desc: "id escaping the base directory", change: func(s *Spec) { s.InstanceID = "../x" }, wantMsg: "instance id"},
		{desc: "dot-dot id", change: func(s *Spec) { s.InstanceID = ".." }, wantMsg: "instance id"},
		{desc: "id too long", change: func(s *Spec) { s.InstanceID = strings.Repeat("a", 129) }, wantMsg: "instance id"},
		{desc: "no command", change: func(s *Spec) { s.Command = nil }, wantMsg: "no command"},
		{desc: "empty program", change: func(s *Spec) { s.Command = []string{""} }, wantMsg: "no command"},
		{desc: "no command, an image that may name one", change: func(s *Spec) { s.Command, s.Image = nil, "docker.io/acme/w:1" }},
		{desc: "empty program with an image", change: func(s *Spec) { s.Command, s.Image = []string{""}, "docker.io/acme/w:1" }, wantMsg: "no command"},
		{desc: "NUL in an argument", change: func(s *Spec) { s.Command = []string{"echo", "a\x00b"} }, wantMsg: "NUL"},
		{desc: "'=' in an env key", change: func(s *Spec) { s.Env = map[string]string{"A=B": "c"} }, wantMsg: "environment"},
		{desc: "comma in a device", change: func(s *Spec) { s.Devices = []string{"GPU-1,GPU-2"} }, wantMsg: "bad device"},
		{desc: "empty device", change: func(s *Spec) { s.Devices = []string{""} }, wantMsg: "bad device"},
		{desc: "share over a GPU", change: func(s *Spec) { s.ShareMilli = 1001 }, wantMsg: "out of range"},
		{desc: "negative memory limit", change: func(s *Spec) { s.MemoryMiB = -1 }, wantMsg: "negative limits"},
		{desc: "image name with a space", change: func(s *Spec) { s.Image = "a b" }, wantMsg: "image name"},
		{desc: "negative GPU index", change: func(s *Spec) { s.GPUIndexes = []int{-1} }, wantMsg: "GPU index"},
		{desc: "negative MIG id", change: func(s *Spec) { s.MIG = []MIGDevice{{GPU: 0, GI: -1}} }, wantMsg: "MIG device"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			s := ok
			tt.change(&s)
			err := s.Validate()
			if tt.wantMsg == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("error %v, want ErrInvalid containing %q", err, tt.wantMsg)
			}
		})
	}
}

func TestWithEnv(t *testing.T) {
	for _, c := range []struct {
		name        string
		base, extra []string
		want        []string
	}{
		{"no extra", []string{"A=1"}, nil, []string{"A=1"}},
		{"appended", []string{"A=1"}, []string{"B=2"}, []string{"A=1", "B=2"}},
		{"replaced in place", []string{"A=1", "B=2"}, []string{"A=9"}, []string{"A=9", "B=2"}},
		{"the last of extra wins", []string{"A=1"}, []string{"A=2", "A=3"}, []string{"A=3"}},
		{"an empty value is a value", []string{"A=1"}, []string{"A="}, []string{"A="}},
		{"no base", nil, []string{"TERM=xterm"}, []string{"TERM=xterm"}},
	} {
		base := slices.Clone(c.base)
		if got := WithEnv(c.base, c.extra); !slices.Equal(got, c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
		if !slices.Equal(base, c.base) {
			t.Errorf("%s: base changed to %q", c.name, c.base)
		}
	}
}
