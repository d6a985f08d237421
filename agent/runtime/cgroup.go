package runtime

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// ReadCgroup reads what the processes of a cgroup (v2, the unified
// hierarchy) use, from the cgroup's directory (/sys/fs/cgroup/<path>):
// CPUSeconds from cpu.stat's usage_usec, MemoryBytes from memory.current.
// Both files must be there: the cpu and memory controllers enabled for
// the cgroup. A runtime that puts each workload in a cgroup of its own
// implements ResourceReader with it.
func ReadCgroup(dir string) (Resources, error) {
	var r Resources
	stat, err := os.ReadFile(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		return r, fmt.Errorf("cgroup %s: %w", dir, err)
	}
	usec, ok := statValue(stat, "usage_usec")
	if !ok {
		return r, fmt.Errorf("cgroup %s: cpu.stat has no usage_usec", dir)
	}
	r.CPUSeconds = float64(usec) / 1e6
	mem, err := os.ReadFile(filepath.Join(dir, "memory.current"))
	if err != nil {
		return r, fmt.Errorf("cgroup %s: %w", dir, err)
	}
	if r.MemoryBytes, err = strconv.ParseUint(string(bytes.TrimSpace(mem)), 10, 64); err != nil {
		return r, fmt.Errorf("cgroup %s: memory.current: %w", dir, err)
	}
	return r, nil
}

// statValue finds "key value" in a flat-keyed cgroup file.
func statValue(b []byte, key string) (uint64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := bytes.Cut(sc.Bytes(), []byte{' '})
		if !ok || string(k) != key {
			continue
		}
		n, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 64)
		return n, err == nil
	}
	return 0, false
}
