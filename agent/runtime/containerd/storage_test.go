package containerd

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/gpucloud/gpucloud/agent/runtime"
)

// hostFree is the free space of the filesystem holding dir, in bytes.
func hostFree(t *testing.T, dir string) int64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * st.Bsize
}

// allocated is what a file takes on disk (its allocated blocks).
func allocated(t *testing.T, p string) int64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

// TestStorageLimits: a workload that writes past its root filesystem's
// limit or its volume's size gets ENOSPC, and the host's free space drops
// by no more than the limit; the images take on disk no more than their
// size; the root image goes with the container, detached.
func TestStorageLimits(t *testing.T) {
	const rootSize = 64 << 20
	rt := newRuntime(t, func(c *Config) { c.RootSize = rootSize })
	// A volume of 1 GiB, as the agent makes it (agent/volumes.go).
	dir := t.TempDir()
	vol, img := filepath.Join(dir, "v-limit"), filepath.Join(dir, "v-limit.img")
	if err := os.Mkdir(vol, 0o750); err != nil {
		t.Fatal(err)
	}
	const volSize = 1 << 30
	if err := runtime.MakeImage(img, volSize); err != nil {
		t.Fatal(err)
	}
	if err := runtime.MountImage(img, vol); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = runtime.Unmount(vol) })

	for _, c := range []struct {
		name, target string
		limit        int64
		image        func(id string) string
	}{
		{"root filesystem", "/tmp/fill", rootSize, rt.rootImage},
		{"volume", VolumesDir + "/v-limit/fill", volSize, func(string) string { return img }},
	} {
		t.Run(c.name, func(t *testing.T) {
			id := newID(t)
			free := hostFree(t, dir)
			mib := c.limit>>20 + 64
			st, out := run(t, rt, runtime.Spec{InstanceID: id, Volumes: []string{vol}, Grace: grace,
				Command: sh("dd if=/dev/zero of=" + c.target + " bs=1M count=" + itoa(mib) + " 2>&1; echo rc=$?; ls -l " + c.target)})
			if st.ExitCode != 0 || !strings.Contains(out, "No space left on device") || strings.Contains(out, "rc=0") {
				t.Fatalf("writing %d MiB into %d: exit %d, output %q; want ENOSPC", mib, c.limit>>20, st.ExitCode, out)
			}
			if drop := free - hostFree(t, dir); drop > c.limit+c.limit/8 {
				t.Errorf("the host's free space dropped by %d bytes, more than the %d limit", drop, c.limit)
			}
			if a := allocated(t, c.image(id)); a > c.limit {
				t.Errorf("the image takes %d bytes on disk, more than its %d", a, c.limit)
			} else {
				t.Logf("%s: dd of %d MiB ended in ENOSPC; the image of %d MiB takes %d MiB on disk", c.name, mib, c.limit>>20, a>>20)
			}
			if err := rt.Remove(id); err != nil {
				t.Fatal(err)
			}
			if c.name == "root filesystem" {
				if _, err := os.Stat(c.image(id)); !os.IsNotExist(err) {
					t.Errorf("the root image is left after Remove: %v", err)
				}
				if held, err := runtime.ImageAttached(c.image(id)); err != nil || held {
					t.Errorf("the removed root image is still attached to a loop device (%v)", err)
				}
			}
		})
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
