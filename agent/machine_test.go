package agent

import (
	"testing"

	"github.com/gpucloud/gpucloud/fleet"
)

func TestMemTotalMiB(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"MemTotal:       24641536 kB\nMemFree:         1234 kB\n", 24064},
		{"MemFree:         1234 kB\nMemTotal:  8388608 kB\n", 8192},
		{"MemFree: 1 kB\n", 0},
		{"MemTotal: lots kB\n", 0},
		{"", 0},
	} {
		if got := MemTotalMiB([]byte(tc.in)); got != tc.want {
			t.Errorf("MemTotalMiB(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

func TestInventoryFillsMachine(t *testing.T) {
	cpu, mem := Machine()
	if cpu < 1000 {
		t.Fatalf("Machine() CPU = %d milli, want at least one CPU", cpu)
	}
	for _, tc := range []struct {
		name             string
		cpu, mem         int64
		wantCPU, wantMem int64
	}{
		{"a driver that says nothing (NVML)", 0, 0, cpu, mem},
		{"a driver that says (a simulated host)", 64000, 512 << 10, 64000, 512 << 10},
		{"only memory unknown", 8000, 0, 8000, mem},
	} {
		h := fleet.Host{CPUMilli: tc.cpu, MemoryMiB: tc.mem}
		fillMachine(&h)
		if h.CPUMilli != tc.wantCPU || h.MemoryMiB != tc.wantMem {
			t.Errorf("%s: got %d milli, %d MiB; want %d, %d", tc.name, h.CPUMilli, h.MemoryMiB, tc.wantCPU, tc.wantMem)
		}
	}
}
