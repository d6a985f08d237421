package agent_test

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agent"
	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/testkit"
)

// marker is a random string a test's workload writes, to look for after
// deletion: no file may still hold it.
func marker(t *testing.T) string {
	t.Helper()
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "gpucloud-marker-" + hex.EncodeToString(b)
}

// filesWith returns the regular files under the dirs that hold m. It
// reads only the data of sparse files (a volume's image), between holes.
func filesWith(t *testing.T, m string, dirs ...string) []string {
	t.Helper()
	var found []string
	for _, d := range dirs {
		err := filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err != nil || !e.Type().IsRegular() {
				return nil
			}
			if holds(t, p, []byte(m)) {
				found = append(found, p)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return found
}

// holds reports whether the file at p holds m, reading its data regions
// (SEEK_DATA, SEEK_HOLE) in chunks that overlap by len(m).
func holds(t *testing.T, p string, m []byte) bool {
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	for off := int64(0); off < fi.Size(); {
		data, err := f.Seek(off, 3) // SEEK_DATA
		if err != nil {
			return false // no data after off
		}
		hole, err := f.Seek(data, 4) // SEEK_HOLE
		if err != nil {
			hole = fi.Size()
		}
		for at := data; at < hole; at += int64(len(buf) - len(m)) {
			n, _ := f.ReadAt(buf[:min(int64(len(buf)), hole-at)], at)
			if bytes.Contains(buf[:n], m) {
				return true
			}
			if int64(n) < int64(len(buf)) {
				break
			}
		}
		off = hole
	}
	return false
}

// needLoop skips a test that mounts filesystem images where it cannot,
// and fails it instead when CI is set.
func needLoop(t *testing.T) {
	t.Helper()
	why := ""
	if os.Geteuid() != 0 {
		why = "loop mounts need root"
	} else if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		why = "mkfs.ext4 is not installed"
	}
	if why == "" {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("the filesystem image tests must run in CI: %s", why)
	}
	t.Skipf("skipping: %s", why)
}

// writeScript writes the marker to the log, the working directory ($WORK:
// with volumes the workload starts in its first one) and each volume,
// then exits.
const writeScript = `echo "$MARK"; echo "$MARK" > "$WORK/mark"
for v in $(echo "$GPUCLOUD_VOLUMES" | tr : ' '); do echo "$MARK" > "$v/mark"; done`

// TestStorageRetention: a terminated instance's working directory and log
// stay for the retention and then go, with every byte of them; a
// stopped one's (not gone) stay; a deleted volume's files go at the first
// sweep, a live one's stay.
func TestStorageRetention(t *testing.T) {
	for _, c := range []struct {
		name   string
		retain time.Duration
	}{
		{"retained an hour", time.Hour},
		{"removed at once", -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			clock := testkit.NewClock(time.Now())
			e := newEnv(t, h100, func(cfg *agent.Config) {
				cfg.RetainTerminated, cfg.StorageSweep, cfg.Now = c.retain, time.Nanosecond, clock.Now
			})
			m := marker(t)
			for _, id := range []string{"i-term", "i-stop"} {
				a := e.assignment(id, whole(e.host.ID(), 0), writeScript)
				a.Env["MARK"], a.Env["WORK"] = m, filepath.Join(e.dir, "instances", id)
				a.Volumes = []string{"v-gone-" + id, "v-kept-" + id}
				e.assign(a)
				e.untilPhase(id, agentapi.PhaseExited)
			}
			e.until("the instances released", func() bool { return e.gone("i-term") && e.gone("i-stop") })
			vols := filepath.Join(e.dir, "volumes")
			if got := filesWith(t, m, e.dir); len(got) != 8 {
				t.Fatalf("the marker is in %v, want two logs, two work directories and four volumes", got)
			}
			e.srv.MarkGone([]string{"v-gone-i-term", "v-gone-i-stop"}, []string{"i-term"})
			clock.Advance(time.Second)
			e.steps(2)
			want := []string{
				filepath.Join(e.dir, "instances", "i-stop", "mark"), filepath.Join(e.dir, "logs", "i-stop.log"),
				filepath.Join(vols, "v-kept-i-stop", "mark"), filepath.Join(vols, "v-kept-i-term", "mark"),
			}
			if c.retain > 0 {
				want = append(want, filepath.Join(e.dir, "instances", "i-term", "mark"), filepath.Join(e.dir, "logs", "i-term.log"))
				if got := filesWith(t, m, e.dir); len(got) != len(want) {
					t.Fatalf("within the retention the marker is in %v, want %v", got, want)
				}
				clock.Advance(c.retain)
				e.steps(2)
				want = want[:4]
			}
			if got := filesWith(t, m, e.dir); strings.Join(got, " ") != strings.Join(sortedCopy(want), " ") {
				t.Errorf("the marker is in %v, want only %v", got, sortedCopy(want))
			}
			for _, p := range []string{filepath.Join(e.dir, "instances", "i-term"), filepath.Join(vols, "v-gone-i-term"), filepath.Join(e.dir, "retired", "i-term")} {
				if _, err := os.Stat(p); !os.IsNotExist(err) {
					t.Errorf("%s is left: %v", p, err)
				}
			}
			clock.Advance(time.Second)
			e.steps(1)
			asked := e.srv.GoneAsked()
			if len(asked) == 0 {
				t.Fatal("the agent never asked the server")
			}
			last := asked[len(asked)-1]
			if strings.Join(last.Instances, ",") != "i-stop" || strings.Join(last.Volumes, ",") != "v-kept-i-stop,v-kept-i-term" {
				t.Errorf("the last sweep asked about %+v, want the stopped instance and the live volumes", last)
			}
		})
	}
}

func sortedCopy(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// TestVolumeImages: with VolumeImages each volume is a filesystem image of
// its size, mounted while an instance uses it and unmounted after; a
// volume without a size does not start; a volume that was a directory
// keeps its files; a deleted volume's image is gone, attached to no loop
// device, and no file holds what the workload wrote.
func TestVolumeImages(t *testing.T) {
	needLoop(t)
	e := newEnv(t, h100, func(cfg *agent.Config) {
		cfg.VolumeImages, cfg.RetainTerminated, cfg.StorageSweep = true, -1, time.Nanosecond
	})
	vols := filepath.Join(e.dir, "volumes")
	// A volume from before images, a plain directory with a file.
	if err := os.MkdirAll(filepath.Join(vols, "v-old"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(vols, "v-old", "kept"), []byte("old data"), 0o600); err != nil {
		t.Fatal(err)
	}
	m := marker(t)
	a := e.assignment("i-1", whole(e.host.ID(), 0), serveScript)
	a.Env["MARK"] = m
	a.Volumes, a.VolumeSizes = []string{"v-new", "v-old"}, map[string]int64{"v-new": 1, "v-old": 2}
	e.assign(a)
	e.ready("i-1")
	for _, c := range []struct {
		id   string
		size uint64
	}{{"v-new", 1 << 30}, {"v-old", 2 << 30}} {
		dir := filepath.Join(vols, c.id)
		if ok, err := runtime.Mounted(dir); err != nil || !ok {
			t.Fatalf("%s is not mounted while its instance runs: %v", c.id, err)
		}
		var st syscall.Statfs_t
		if err := syscall.Statfs(dir, &st); err != nil {
			t.Fatal(err)
		}
		if total := st.Blocks * uint64(st.Bsize); total > c.size || total < c.size*9/10 {
			t.Errorf("%s holds %d bytes, want at most its %d and not much less", c.id, total, c.size)
		}
		var ist syscall.Stat_t
		if err := syscall.Stat(filepath.Join(vols, c.id+".img"), &ist); err != nil {
			t.Fatal(err)
		}
		if used := uint64(ist.Blocks) * 512; used > c.size/8 {
			t.Errorf("the empty %s takes %d bytes of the host's disk", c.id, used)
		}
	}
	if b, err := os.ReadFile(filepath.Join(vols, "v-old", "kept")); err != nil || string(b) != "old data" {
		t.Errorf("the old volume's file in its image: %q, %v", b, err)
	}
	if err := os.WriteFile(filepath.Join(vols, "v-new", "mark"), []byte(m), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := e.srv.SetDesired("i-1", agentapi.DesiredStop); err != nil {
		t.Fatal(err)
	}
	e.untilPhase("i-1", agentapi.PhaseStopped)
	e.until("the volumes unmounted", func() bool {
		a, _ := runtime.Mounted(filepath.Join(vols, "v-new"))
		b, _ := runtime.Mounted(filepath.Join(vols, "v-old"))
		return e.gone("i-1") && !a && !b
	})
	if got := filesWith(t, m, e.dir); len(got) != 1 || got[0] != filepath.Join(vols, "v-new.img") {
		t.Errorf("unmounted, the marker is in %v, want in the volume's image (the scan reads images)", got)
	}
	// A volume without a size fails its instance, definitively.
	bad := e.assignment("i-nosize", whole(e.host.ID(), 1), "true")
	bad.Volumes = []string{"v-nosize"}
	e.assign(bad)
	e.untilPhase("i-nosize", agentapi.PhaseFailed)
	if r := e.lastReport("i-nosize"); !strings.Contains(r.Message, "no size") {
		t.Errorf("failure message %q", r.Message)
	}

	e.srv.MarkGone([]string{"v-new"}, nil)
	e.until("the deleted volume's files removed", func() bool {
		_, err := os.Stat(filepath.Join(vols, "v-new.img"))
		return os.IsNotExist(err)
	})
	if held, err := runtime.ImageAttached(filepath.Join(vols, "v-new.img")); err != nil || held {
		t.Errorf("the deleted image is still attached to a loop device: %v", err)
	}
	if got := filesWith(t, m, e.dir); len(got) != 0 {
		t.Errorf("the marker is still in %v", got)
	}
	if _, err := os.Stat(filepath.Join(vols, "v-old.img")); err != nil {
		t.Errorf("the live volume's image: %v", err)
	}
}
