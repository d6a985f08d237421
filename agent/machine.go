package agent

import (
	"bufio"
	"bytes"
	"os"
	goruntime "runtime"
	"strconv"
	"strings"

	"github.com/gpucloud/gpucloud/fleet"
)

// Machine is this machine's CPUs (in thousandths, those the agent may run
// on) and memory (MemTotal in /proc/meminfo, in MiB; 0 where it cannot be
// read, as off Linux).
func Machine() (cpuMilli, memoryMiB int64) {
	cpuMilli = int64(goruntime.NumCPU()) * 1000
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		memoryMiB = MemTotalMiB(b)
	}
	return cpuMilli, memoryMiB
}

// MemTotalMiB reads MemTotal (in kB) from the text of /proc/meminfo, in
// MiB; 0 when it is not there.
func MemTotalMiB(meminfo []byte) int64 {
	sc := bufio.NewScanner(bytes.NewReader(meminfo))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil || kb < 0 {
				return 0
			}
			return kb / 1024
		}
	}
	return 0
}

// fillMachine gives a host whose driver reports no CPUs or memory (NVML
// knows only the GPUs) this machine's: without them no offering, which
// always asks for vCPUs and memory, could ever be placed on a real host.
func fillMachine(h *fleet.Host) {
	if h.CPUMilli > 0 && h.MemoryMiB > 0 {
		return
	}
	cpu, mem := Machine()
	if h.CPUMilli <= 0 {
		h.CPUMilli = cpu
	}
	if h.MemoryMiB <= 0 {
		h.MemoryMiB = mem
	}
}
