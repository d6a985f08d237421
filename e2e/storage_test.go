package e2e

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agent"
	"github.com/gpucloud/gpucloud/agent/gpu/sim"
	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/store/pgtest"
)

// TestStorageLimitsAndDeletion: through the server and a containerd host
// whose agent keeps volumes as filesystems of their size, a workload that
// writes past its 1 GiB volume gets ENOSPC and the volume's image takes no
// more than 1 GiB; another tenant does not see the volume; once the
// instance is terminated its working directory and log leave the host,
// and once the volume is deleted its image does too: a random marker the
// workload wrote into each is in no file under the agent's data directory
// (images read whole), and no loop device holds the image. On SQLite and
// PostgreSQL.
func TestStorageLimitsAndDeletion(t *testing.T) {
	ch := startContainerHost(t)
	t.Run("sqlite", func(t *testing.T) { testStorage(t, ch, "sqlite://"+filepath.Join(t.TempDir(), "gpucloud.db")) })
	t.Run("postgres", func(t *testing.T) { testStorage(t, ch, pgtest.URL(t)) })
}

func testStorage(t *testing.T, ch *containerHost, db string) {
	spec := sim.Spec{ID: "sim-storage", Zone: "zone-a", GPUs: sim.GPUSpec{Model: "H100", Count: 8}}
	c := startClusterOn(t, db, nil, func(cfg *agent.Config) {
		cfg.VolumeImages, cfg.RetainTerminated, cfg.StorageSweep = true, -1, 50*time.Millisecond
	}, ch.runtimeOf, spec)
	ctx := t.Context()
	h := c.hosts[spec.ID]
	_, alice, _ := c.member("acme", "alice")
	_, bob, _ := c.member("globex", "bob")
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	mark := "STORAGE-MARK-" + hex.EncodeToString(b)

	vol, err := alice.CreateVolume(ctx, api.CreateVolumeRequest{Name: "data", SizeGiB: 1, Zone: "zone-a"}, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bob.GetVolume(ctx, vol.ID); cloud.ErrorCode(err) != cloud.NotFound {
		t.Errorf("another tenant reads the volume: %v", err)
	}
	// One instance writes the marker into its volume (where it starts)
	// and fills it; one without volumes into its working directory. Both
	// print it to their logs.
	script := `v=$GPUCLOUD_VOLUMES; echo "$MARK"; echo "$MARK" > $v/mark
dd if=/dev/zero of=$v/fill bs=1M count=1100 2>&1; echo "volume: $(df -k $v | tail -n 1)"; rm -f $v/fill; echo done`
	in, err := alice.CreateInstance(ctx, api.CreateInstanceRequest{Name: "writer", Offering: "h100.1x",
		Env: map[string]string{"MARK": mark}, Volumes: []string{vol.ID}, Command: []string{"/bin/sh", "-c", script}}, "")
	if err != nil {
		t.Fatal(err)
	}
	scratch, err := alice.CreateInstance(ctx, api.CreateInstanceRequest{Name: "scratch", Offering: "h100.1x",
		Env: map[string]string{"MARK": mark}, Command: []string{"/bin/sh", "-c", `echo "$MARK" > $HOME/mark && echo "$MARK" && echo done`}}, "")
	if err != nil {
		t.Fatal(err)
	}
	c.waitLogs(alice, scratch.ID, "done\n")
	out := c.waitLogs(alice, in.ID, "done\n")
	if !strings.Contains(out, "No space left on device") {
		t.Errorf("writing 1100 MiB into a 1 GiB volume: no ENOSPC; output:\n%s", out)
	}
	t.Logf("the workload's view:\n%s", out)
	img := filepath.Join(h.dir, "volumes", vol.ID+".img")
	var st syscall.Stat_t
	if err := syscall.Stat(img, &st); err != nil {
		t.Fatalf("the volume's image: %v", err)
	}
	if used := st.Blocks * 512; used > 1<<30 {
		t.Errorf("the 1 GiB volume takes %d bytes on disk", used)
	} else {
		t.Logf("the 1 GiB volume's image takes %d MiB on disk once the fill is removed (apparent size %d MiB)", used>>20, st.Size>>20)
	}
	for _, id := range []string{in.ID, scratch.ID} {
		c.waitState(alice, id, cloud.Stopped)
	}
	// Two logs, the working directory, and the volume's image (or its
	// mount, while still mounted).
	if got := filesWith(t, mark, h.dir); len(got) < 4 {
		t.Fatalf("before deletion the marker is in %v, want two logs, a working directory and the volume", got)
	}
	for _, id := range []string{in.ID, scratch.ID} {
		if _, err := alice.TerminateInstance(ctx, id, 0); err != nil {
			t.Fatal(err)
		}
		c.waitState(alice, id, cloud.Terminated)
	}
	c.until("the terminated instance's files removed", func() (bool, string) {
		got := filesWith(t, mark, h.dir)
		return len(got) == 1 && got[0] == img, strings.Join(got, " ")
	})
	if _, err := alice.DeleteVolume(ctx, vol.ID); err != nil {
		t.Fatal(err)
	}
	c.until("the deleted volume's image removed", func() (bool, string) {
		_, err := os.Stat(img)
		return os.IsNotExist(err), ""
	})
	if got := filesWith(t, mark, h.dir); len(got) != 0 {
		t.Errorf("after deletion the marker is still in %v", got)
	}
	if held, err := runtime.ImageAttached(img); err != nil || held {
		t.Errorf("the deleted image is still attached to a loop device (%v)", err)
	}
}

// filesWith lists the regular files under dir that hold m, reading each
// whole but for the holes of sparse files (SEEK_DATA, SEEK_HOLE).
func filesWith(t *testing.T, m, dir string) []string {
	t.Helper()
	var found []string
	_ = filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err == nil && e.Type().IsRegular() && fileHolds(p, []byte(m)) {
			found = append(found, p)
		}
		return nil
	})
	return found
}

func fileHolds(p string, m []byte) bool {
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return false
	}
	buf := make([]byte, 1<<20)
	for off := int64(0); off < fi.Size(); {
		data, err := f.Seek(off, 3) // SEEK_DATA
		if err != nil {
			return false
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
			if n < len(buf) {
				break
			}
		}
		off = hole
	}
	return false
}
