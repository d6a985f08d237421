package runtime

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadCgroup(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ReadCgroup(dir); err == nil {
		t.Fatal("a directory without cgroup files read")
	}
	write("cpu.stat", "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\nnr_periods 0\n")
	if _, err := ReadCgroup(dir); err == nil {
		t.Fatal("a cgroup without memory.current read")
	}
	write("memory.current", "104857600\n")
	r, err := ReadCgroup(dir)
	if err != nil || r.CPUSeconds != 2.5 || r.MemoryBytes != 100<<20 {
		t.Fatalf("ReadCgroup = %+v, %v; want 2.5 s and 100 MiB", r, err)
	}
	write("cpu.stat", "user_usec 2000000\n")
	if _, err := ReadCgroup(dir); err == nil {
		t.Error("cpu.stat without usage_usec read")
	}
	write("cpu.stat", "usage_usec 1\n")
	write("memory.current", "max\n")
	if _, err := ReadCgroup(dir); err == nil {
		t.Error("a memory.current that is not a number read")
	}
}

// TestReadOwnCgroup reads the cgroup this test runs in, where the host
// has cgroup v2 with the controllers enabled; it skips elsewhere.
func TestReadOwnCgroup(t *testing.T) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Skip("no /proc/self/cgroup")
	}
	var path string
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			path = p
		}
	}
	dir := filepath.Join("/sys/fs/cgroup", path)
	if path == "" {
		t.Skip("not on cgroup v2")
	}
	if _, err := os.Stat(filepath.Join(dir, "memory.current")); err != nil {
		t.Skipf("no memory controller in %s", dir)
	}
	r, err := ReadCgroup(dir)
	if err != nil || r.MemoryBytes == 0 {
		t.Fatalf("own cgroup %s: %+v, %v", dir, r, err)
	}
}
