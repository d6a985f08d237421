package agent_test

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agent"
	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/agentapi"
)

// scratchUnit makes a "GiB" of instance store a MiB in these tests.
const scratchUnit = 1 << 20

// scratchEnv is an env whose instance stores are kept in filesystem
// images (images) or plain directories, with every store the test leaves
// mounted unmounted when it ends.
func scratchEnv(t *testing.T, images bool) *env {
	t.Helper()
	e := newEnv(t, h100, func(cfg *agent.Config) {
		cfg.VolumeImages, cfg.RetainTerminated, cfg.StorageSweep = images, -1, time.Nanosecond
	})
	e.ag.SetScratchUnit(scratchUnit)
	t.Cleanup(func() {
		// Before newEnv's own cleanups (they run last first): the
		// workloads stopped, every mount the test made is undone.
		e.killAll()
		if err := e.ag.ReleaseVolumes(); err != nil {
			t.Errorf("ReleaseVolumes: %v", err)
		}
		entries, _ := os.ReadDir(filepath.Join(e.dir, "scratch"))
		for _, en := range entries {
			if en.IsDir() {
				_ = runtime.Unmount(filepath.Join(e.dir, "scratch", en.Name()))
			}
		}
	})
	return e
}

// TestInstanceStore: an instance whose offering has an instance store
// gets a directory of its own at GPUCLOUD_SCRATCH (with images, a
// filesystem of exactly its size, where a write past it is ENOSPC); a
// stop wipes it (no byte written before is left on the host, the image
// is gone and held by no loop device); the next start gets an empty one;
// a restarted agent wipes the store of an instance it does not run and
// keeps the running one's; a withdrawn assignment wipes it too.
func TestInstanceStore(t *testing.T) {
	for _, images := range []bool{true, false} {
		name := "plain directories"
		if images {
			name = "filesystem images"
		}
		t.Run(name, func(t *testing.T) {
			if images {
				needLoop(t)
			}
			testInstanceStore(t, images)
		})
	}
}

func testInstanceStore(t *testing.T, images bool) {
	const size = 64 // MiB here
	e := scratchEnv(t, images)
	m := marker(t)
	dir := filepath.Join(e.dir, "scratch", "i-1")
	img := dir + ".img"
	// The workload writes the marker and 16 MiB of data, then tries to
	// write past the store's size.
	a := e.assignment("i-1", whole(e.host.ID(), 0), `echo "$MARK" > "$GPUCLOUD_SCRATCH/mark"
head -c 16777216 /dev/urandom > "$GPUCLOUD_SCRATCH/data"
dd if=/dev/zero of="$GPUCLOUD_SCRATCH/fill" bs=1M count=100 2>&1 | grep -o "No space left on device"; rm -f "$GPUCLOUD_SCRATCH/fill"
`+serveScript)
	a.Env["MARK"] = m
	a.InstanceStoreGiB = size
	e.assign(a)
	e.ready("i-1")
	if got := e.workloadEnv("i-1")[runtime.EnvScratch]; got != dir {
		t.Fatalf("%s=%q, want %q", runtime.EnvScratch, got, dir)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "mark")); err != nil || strings.TrimSpace(string(b)) != m {
		t.Fatalf("the marker in the store: %q, %v", b, err)
	}
	if images {
		if ok, err := runtime.Mounted(dir); err != nil || !ok {
			t.Fatalf("the store is not mounted while its instance runs: %v", err)
		}
		var st syscall.Statfs_t
		if err := syscall.Statfs(dir, &st); err != nil {
			t.Fatal(err)
		}
		if total := st.Blocks * uint64(st.Bsize); total > size*scratchUnit {
			t.Errorf("the store holds %d bytes, more than its %d", total, size*scratchUnit)
		}
		if out := string(e.srv.Logs("i-1")); !strings.Contains(out, "No space left on device") {
			t.Errorf("writing 100 MiB into a %d MiB store: %q, want ENOSPC", size, out)
		}
		var ist syscall.Stat_t
		if err := syscall.Stat(img, &ist); err != nil {
			t.Fatal(err)
		}
		if used := ist.Blocks * 512; used < 16<<20 || used > size*scratchUnit {
			t.Errorf("the image takes %d bytes of the host's disk, want the 16 MiB written and at most its size", used)
		}
	}

	// Stop: the store goes, every byte of it.
	if err := e.srv.SetDesired("i-1", agentapi.DesiredStop); err != nil {
		t.Fatal(err)
	}
	e.untilPhase("i-1", agentapi.PhaseStopped)
	e.until("the store wiped", func() bool {
		_, derr := os.Stat(dir)
		_, ierr := os.Stat(img)
		return os.IsNotExist(derr) && os.IsNotExist(ierr)
	})
	if got := filesWith(t, m, e.dir); len(got) != 0 {
		t.Errorf("after the stop the marker is still in %v", got)
	}
	if n := loopsOf(t, img); n != 0 {
		t.Errorf("the wiped image is on %d loop devices: its blocks are not freed", n)
	}

	// Started again: an empty store.
	again := e.assignment("i-1", whole(e.host.ID(), 0), `echo "entries: $(ls -A "$GPUCLOUD_SCRATCH" | wc -l)"
echo kept > "$GPUCLOUD_SCRATCH/kept"
`+serveScript)
	again.InstanceStoreGiB = size
	e.assign(again)
	e.until("the second run ready", func() bool { return strings.Count(string(e.srv.Logs("i-1")), "ready\n") == 2 })
	if out := string(e.srv.Logs("i-1")); !strings.Contains(out, "entries: 0\n") {
		t.Errorf("the second run's store is not empty: %q", out)
	}

	// A store an earlier agent left of an instance that no longer runs
	// here (it crashed before wiping it): a restarted agent wipes it and
	// keeps the running instance's.
	ghost := filepath.Join(e.dir, "scratch", "i-ghost")
	if err := os.MkdirAll(ghost, 0o750); err != nil {
		t.Fatal(err)
	}
	if images {
		if err := runtime.MakeScratchImage(ghost+".img", 8<<20); err != nil {
			t.Fatal(err)
		}
		if err := runtime.MountImage(ghost+".img", ghost); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = runtime.Unmount(ghost) })
	}
	if err := os.WriteFile(filepath.Join(ghost, "mark"), []byte(m), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := agent.Config{Driver: e.host, Runtime: e.rt, Metadata: e.md, DataDir: e.dir, Interval: testInterval,
		ManageMIG: true, VolumeImages: images, RetainTerminated: -1, StorageSweep: time.Nanosecond,
		Log: slog.New(slog.NewTextHandler(t.Output(), nil))}
	e.ag = agent.New(e.srv, cfg)
	e.ag.SetScratchUnit(scratchUnit)
	e.steps(3)
	if _, err := os.Stat(ghost); !os.IsNotExist(err) {
		t.Errorf("the left-over store: %v, want it removed", err)
	}
	if got := filesWith(t, m, e.dir); len(got) != 0 {
		t.Errorf("after the restart the marker is still in %v", got)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "kept")); err != nil || string(b) != "kept\n" {
		t.Errorf("the running instance's store after an agent restart: %q, %v", b, err)
	}
	if images {
		if n := loopsOf(t, ghost+".img"); n != 0 {
			t.Errorf("the left-over image is on %d loop devices", n)
		}
		if n := loopsOf(t, img); n != 1 {
			t.Errorf("the running instance's image is on %d loop devices, want 1", n)
		}
	}

	// Terminated behind the agent's back (the assignment withdrawn).
	e.srv.Drop("i-1")
	e.until("the withdrawn instance's store wiped", func() bool {
		_, derr := os.Stat(dir)
		_, ierr := os.Stat(img)
		return e.gone("i-1") && os.IsNotExist(derr) && os.IsNotExist(ierr)
	})
}

// TestInstanceStoreIsolation: each instance's store is its own, under
// the agent's scratch directory and under no volume directory nor
// another instance's: another tenant's workload, and the same tenant's,
// sees an empty store of its own, not the files of the first.
func TestInstanceStoreIsolation(t *testing.T) {
	for _, images := range []bool{true, false} {
		t.Run(map[bool]string{true: "filesystem images", false: "plain directories"}[images], func(t *testing.T) {
			if images {
				needLoop(t)
			}
			e := scratchEnv(t, images)
			volDir := filepath.Join(e.dir, "volumes")
			script := `echo "$GPUCLOUD_INSTANCE_ID" > "$GPUCLOUD_SCRATCH/owner"; echo "seen: $(cat "$GPUCLOUD_SCRATCH"/* | tr '\n' ' ')"
` + serveScript
			first := e.assignment("i-a", whole(e.host.ID(), 0), script)
			first.InstanceStoreGiB, first.Volumes, first.VolumeSizes = 16, []string{"v-a"}, map[string]int64{"v-a": 1}
			sameTenant := e.assignment("i-b", whole(e.host.ID(), 1), script)
			sameTenant.InstanceStoreGiB = 16
			other := e.assignment("i-c", whole(e.host.ID(), 2), script)
			other.TenantID, other.InstanceStoreGiB = "tenant-2", 16
			e.assign(first, sameTenant, other)
			dirs := map[string]bool{}
			for _, id := range []string{"i-a", "i-b", "i-c"} {
				e.ready(id)
				d := e.workloadEnv(id)[runtime.EnvScratch]
				if want := filepath.Join(e.dir, "scratch", id); d != want {
					t.Errorf("%s: store %q, want %q", id, d, want)
				}
				if dirs[d] || strings.HasPrefix(d, volDir+"/") || strings.HasPrefix(d, filepath.Join(e.dir, "instances")+"/") {
					t.Errorf("%s: store %q is shared or under a volume or working directory", id, d)
				}
				dirs[d] = true
				if out := string(e.srv.Logs(id)); !strings.Contains(out, "seen: "+id+" \n") {
					t.Errorf("%s saw %q in its store, want only its own file", id, out)
				}
			}
			if images {
				devs := map[uint64]bool{}
				for d := range dirs {
					var st syscall.Stat_t
					if err := syscall.Stat(d, &st); err != nil {
						t.Fatal(err)
					}
					if devs[st.Dev] {
						t.Errorf("%s is on a filesystem another store is on", d)
					}
					devs[st.Dev] = true
				}
			}
			// One instance's stop wipes its store only.
			if err := e.srv.SetDesired("i-b", agentapi.DesiredStop); err != nil {
				t.Fatal(err)
			}
			e.untilPhase("i-b", agentapi.PhaseStopped)
			e.until("i-b's store wiped", func() bool {
				_, err := os.Stat(filepath.Join(e.dir, "scratch", "i-b"))
				return os.IsNotExist(err)
			})
			for _, id := range []string{"i-a", "i-c"} {
				if b, err := os.ReadFile(filepath.Join(e.dir, "scratch", id, "owner")); err != nil || string(b) != id+"\n" {
					t.Errorf("%s's store after i-b stopped: %q, %v", id, b, err)
				}
			}
			// An instance without an instance store has none.
			none := e.assignment("i-d", whole(e.host.ID(), 3), serveScript)
			e.assign(none)
			e.ready("i-d")
			if d, ok := e.workloadEnv("i-d")[runtime.EnvScratch]; ok {
				t.Errorf("an instance without an instance store has %s=%q", runtime.EnvScratch, d)
			}
		})
	}
}
