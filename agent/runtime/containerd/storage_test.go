package containerd

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/agent/runtime/runtimetest"
)

// diskUsed is what the files under dirs take on disk (their allocated
// blocks), not counting what is mounted below them: everything the
// runtime and its workloads can write to this machine's disk lies under
// the daemon's directory, the runtime's base directory and the test's.
// (The filesystem's free space would say the same if nothing else wrote
// to it; CI runs other packages' tests beside this one.)
func diskUsed(t *testing.T, dirs ...string) int64 {
	t.Helper()
	var total int64
	for _, dir := range dirs {
		var root syscall.Stat_t
		if err := syscall.Stat(dir, &root); err != nil {
			t.Fatal(err)
		}
		filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil // a file gone meanwhile, or unreadable: not ours to count
			}
			var st syscall.Stat_t
			if syscall.Lstat(p, &st) != nil {
				return nil
			}
			if st.Dev != root.Dev {
				if d.IsDir() {
					return fs.SkipDir // a mount: its bytes are in its image, counted there
				}
				return nil
			}
			total += st.Blocks * 512
			return nil
		})
	}
	return total
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
// limit or its volume's size gets ENOSPC, and what the daemon, the
// runtime and the volume take on disk grows by no more than the limit; the images take on disk no more than their
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
			dirs := []string{env.daemon.Dir(), rt.cfg.BaseDir, dir}
			used := diskUsed(t, dirs...)
			mib := c.limit>>20 + 64
			if err := rt.Start(t.Context(), runtime.Spec{InstanceID: id, Volumes: []string{vol}, Grace: grace,
				Command: sh("dd if=/dev/zero of=" + c.target + " bs=1M count=" + itoa(mib) + " 2>&1; echo rc=$?; ls -l " + c.target + "; echo filled; sleep 60")}); err != nil {
				t.Fatal(err)
			}
			out := waitLog(t, rt, id, "filled")
			if !strings.Contains(out, "No space left on device") || strings.Contains(out, "rc=0") {
				t.Fatalf("writing %d MiB into %d: output %q; want ENOSPC", mib, c.limit>>20, out)
			}
			grew := diskUsed(t, dirs...) - used
			if grew > c.limit+c.limit/8 {
				t.Errorf("the disk use of the daemon, the runtime and the volume grew by %d bytes, more than the %d limit", grew, c.limit)
			}
			if a := allocated(t, c.image(id)); a > c.limit {
				t.Errorf("the image takes %d bytes on disk, more than its %d", a, c.limit)
			} else {
				t.Logf("%s: dd of %d MiB ended in ENOSPC; the image of %d MiB takes %d MiB on disk; the disk use grew by %d MiB", c.name, mib, c.limit>>20, a>>20, grew>>20)
			}
			if err := rt.Stop(t.Context(), id); err != nil {
				t.Fatal(err)
			}
			if err := rt.Remove(id); err != nil {
				t.Fatal(err)
			}
			if c.name == "root filesystem" {
				if _, err := os.Stat(c.image(id)); !os.IsNotExist(err) {
					t.Errorf("the root image is left after the exit and Remove: %v", err)
				}
				if held, err := runtime.ImageAttached(c.image(id)); err != nil || held {
					t.Errorf("the removed root image is still attached to a loop device (%v)", err)
				}
			}
		})
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestLogRotation: the workload's log, written by the log writer the shim
// runs, never takes more than LogSize × LogFiles on disk; a reader that
// keeps up gets every line in order across rotations, one that falls
// behind resumes at the oldest output kept; no writer outlives the
// workload.
func TestLogRotation(t *testing.T) {
	const size, files = 16 << 10, 3
	rt := newRuntime(t, func(c *Config) { c.LogSize, c.LogFiles = size, files })
	// 3000 lines of 39 bytes (114 KiB), in bursts of 100.
	script := `i=0; while [ $i -lt 3000 ]; do printf 'line-%05d-padding-padding-padding-pad\n' $i; i=$((i+1)); ` +
		`[ $((i % 100)) = 0 ] && sleep 0.05; done; echo done`
	id := newID(t)
	s := withWorkDir(rt, runtime.Spec{InstanceID: id, Command: sh(script), Grace: grace})
	s.LogPath = filepath.Join(t.TempDir(), "logs", id+".log")
	if err := rt.Start(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	writerConf := fmt.Sprintf("%d:%d:%s", size, files, s.LogPath)
	if p := hostProcesses(logWriterArg, writerConf); len(p) != 1 {
		t.Errorf("log writers of the workload: %v, want one", p)
	}
	var got []byte
	var off int64
	maxUse := int64(0)
	for done := false; !done; {
		st, err := rt.Status(id)
		if err != nil {
			t.Fatal(err)
		}
		done = st.State == runtime.StateExited
		for {
			b, next, err := rt.Logs(id, off)
			if err != nil {
				t.Fatal(err)
			}
			got, off = append(got, b...), next
			if len(b) == 0 {
				break
			}
		}
		use, n := dirUse(t, filepath.Dir(s.LogPath))
		maxUse = max(maxUse, use)
		if use > size*files || n > files {
			t.Fatalf("the log takes %d bytes in %d files, more than %d in %d", use, n, size*files, files)
		}
		time.Sleep(5 * time.Millisecond)
	}
	lines := strings.Split(strings.TrimSuffix(string(got), "\n"), "\n")
	if len(lines) != 3001 || lines[3000] != "done" {
		t.Fatalf("read %d lines ending %q, want 3000 and done", len(lines), lines[len(lines)-1])
	}
	for i, l := range lines[:3000] {
		if want := fmt.Sprintf("line-%05d-padding-padding-padding-pad", i); l != want {
			t.Fatalf("line %d is %q, want %q", i, l, want)
		}
	}
	if want := int64(3000*39 + 5); off != want {
		t.Errorf("the reader ends at %d, want %d", off, want)
	}
	t.Logf("%d bytes written, at most %d on disk in at most %d files", off, maxUse, files)
	// A reader from the start gets the output kept, the newest.
	b, next, err := rt.Logs(id, 0)
	if from := next - int64(len(b)); err != nil || from <= 0 || string(got[from:next]) != string(b) {
		t.Errorf("a reader from 0 got %d bytes up to %d (%v), want the oldest kept", len(b), next, err)
	}
	runtimetest.Eventually(t, "the log writer gone", func() (bool, string) {
		p := hostProcesses(logWriterArg, writerConf)
		return len(p) == 0, fmt.Sprint(p)
	})
}

// dirUse sums the sizes of the files in dir.
func dirUse(t *testing.T, dir string) (total int64, n int) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if fi, err := e.Info(); err == nil {
			total += fi.Size()
			n++
		}
	}
	return total, n
}
