//go:build linux

package sim

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/agent/gpu"
)

func TestMIGCapMinors(t *testing.T) {
	// The NVIDIA driver's numbering: config, monitor, then per GPU 15 GPU
	// instances, each followed by its 8 compute instances.
	tests := []struct{ gpu, gi, ci, want int }{
		{0, 0, -1, 3}, {0, 0, 0, 4}, {0, 0, 7, 11}, {0, 1, -1, 12}, {0, 1, 0, 13}, {1, 0, -1, 138},
	}
	for _, tt := range tests {
		if got := MIGCapMinor(tt.gpu, tt.gi, tt.ci); got != tt.want {
			t.Errorf("MIGCapMinor(%d, %d, %d) = %d, want %d", tt.gpu, tt.gi, tt.ci, got, tt.want)
		}
	}
	table := MIGMinorsTable(2)
	for _, line := range []string{"config 1", "monitor 2", "gpu0/gi1/access 12", "gpu0/gi1/ci0/access 13", "gpu1/gi14/ci7/access 272"} {
		if !strings.Contains(table, line+"\n") {
			t.Errorf("the table lacks %q", line)
		}
	}
}

func TestMIGIDs(t *testing.T) {
	h, err := New(Spec{ID: "h", GPUs: GPUSpec{Model: "H100", Count: 2, MIG: true}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := h.CreateMIG(ctx, 1, 9, 4); err != nil {
		t.Fatal(err)
	}
	if gi, ci, err := h.MIGIDs(ctx, 1, 4); err != nil || gi != 5 || ci != 0 {
		t.Fatalf("MIGIDs = %d, %d, %v", gi, ci, err)
	}
	if _, _, err := h.MIGIDs(ctx, 1, 0); !errors.Is(err, gpu.ErrNotFound) {
		t.Fatalf("no instance: %v", err)
	}
	if _, _, err := h.MIGIDs(ctx, 7, 0); !errors.Is(err, gpu.ErrNotFound) {
		t.Fatalf("no GPU: %v", err)
	}
}

func TestMakeDeviceNodes(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("making device nodes needs root, which CI has")
		}
		t.Skip("making device nodes needs root")
	}
	h, err := New(Spec{ID: "h", GPUs: GPUSpec{Model: "H100", Count: 2}, HCAs: make(HCAs, 2)})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "dev")
	for range 2 { // idempotent
		if err := h.MakeDeviceNodes(dir); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []struct {
		name  string
		major uint32
		minor uint32
	}{{"nvidia0", 195, 0}, {"nvidia1", 195, 1}, {"nvidiactl", 195, 255},
		{"infiniband/uverbs0", 231, 192}, {"infiniband/uverbs1", 231, 193}, {"infiniband/rdma_cm", 10, 255}} {
		ma, mi, ok := nodeNumbers(filepath.Join(dir, n.name))
		if !ok || ma != n.major || mi != n.minor {
			t.Errorf("%s: %d:%d (%v), want %d:%d", n.name, ma, mi, ok, n.major, n.minor)
		}
	}
	uvm, _, ok := nodeNumbers(filepath.Join(dir, "nvidia-uvm"))
	if !ok || uvm < 384 {
		t.Errorf("nvidia-uvm major %d (%v)", uvm, ok)
	}
	last := MIGCapMinor(1, 14, 7)
	if _, mi, ok := nodeNumbers(filepath.Join(dir, "nvidia-caps", "nvidia-cap"+strconv.Itoa(last))); !ok || int(mi) != last {
		t.Errorf("last caps node: %d (%v)", mi, ok)
	}
	if b, err := os.ReadFile(filepath.Join(dir, MIGMinorsFile)); err != nil || string(b) != MIGMinorsTable(2) {
		t.Errorf("mig-minors: %v", err)
	}
	// rdma_cm's misc minor is one no misc device ever holds.
	if f, err := os.Open(filepath.Join(dir, "infiniband", "rdma_cm")); err == nil {
		f.Close()
		t.Error("the fake rdma_cm node opened a device")
	}
	// No driver is behind the nodes: opening one fails with ENXIO.
	f, err := os.Open(filepath.Join(dir, "nvidia0"))
	if err == nil {
		f.Close()
		t.Skip("a driver answers major 195 on this host: it has NVIDIA GPUs")
	}
	if !strings.Contains(err.Error(), "no such device or address") {
		t.Errorf("open nvidia0: %v, want ENXIO", err)
	}
}
