package containerd

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"

	"github.com/gpucloud/gpucloud/agent/runtime"
)

// cgroupRoot is where the cgroup hierarchies are mounted.
var cgroupRoot = "/sys/fs/cgroup"

// Usage implements runtime.UsageReader: the CPU time of the container's
// cgroup, all its processes, live and gone.
func (r *Runtime) Usage(id string) (float64, bool) {
	res, ok := r.Resources(id)
	return res.CPUSeconds, ok
}

// Resources implements runtime.ResourceReader from the container's
// cgroup: with cgroup v2, cpu.stat's usage_usec and memory.current
// (runtime.ReadCgroup); with cgroup v1, cpuacct.usage and the memory
// controller's memory.usage_in_bytes. Both count the page cache the
// workload caused. It is false for an unknown or exited workload.
func (r *Runtime) Resources(id string) (runtime.Resources, bool) {
	r.mu.Lock()
	in := r.insts[id]
	running := in != nil && in.status.State == runtime.StateRunning
	r.mu.Unlock()
	if !running {
		return runtime.Resources{}, false
	}
	return readCgroup(in.cgroup)
}

func readCgroup(cg string) (runtime.Resources, bool) {
	if _, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers")); err == nil {
		res, err := runtime.ReadCgroup(filepath.Join(cgroupRoot, cg))
		return res, err == nil
	}
	cpu, ok1 := readUint(filepath.Join(cgroupRoot, "cpuacct", cg, "cpuacct.usage"))
	mem, ok2 := readUint(filepath.Join(cgroupRoot, "memory", cg, "memory.usage_in_bytes"))
	if !ok1 || !ok2 {
		return runtime.Resources{}, false
	}
	return runtime.Resources{CPUSeconds: float64(cpu) / 1e9, MemoryBytes: mem}, true
}

func readUint(p string) (uint64, bool) {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, false
	}
	v, err := strconv.ParseUint(string(bytes.TrimSpace(b)), 10, 64)
	return v, err == nil
}
