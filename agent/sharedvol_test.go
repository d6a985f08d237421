package agent_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agent"
	"github.com/gpucloud/gpucloud/agentapi"
)

// xfsDir mounts a sparse XFS image at a new directory, with project
// quotas when quota is true, for the shared volume directory of a test.
// It skips where this kernel has no quota support (CONFIG_QUOTA off: the
// mount with prjquota fails, as on the development machine), which no
// package installs.
func xfsDir(t *testing.T, quota bool) string {
	t.Helper()
	needLoop(t)
	for _, tool := range []string{"mkfs.xfs", "xfs_quota", "xfs_io"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s is missing (xfsprogs)", tool)
			}
			t.Skipf("skipping: %s is missing (xfsprogs)", tool)
		}
	}
	base := t.TempDir()
	img, dir := filepath.Join(base, "shared.img"), filepath.Join(base, "shared")
	run := func(name string, args ...string) error {
		if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s %v: %v: %s", name, args, err, out)
		}
		return nil
	}
	for _, err := range []error{run("truncate", "-s", "4G", img), run("mkfs.xfs", "-q", img), os.Mkdir(dir, 0o755)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	opts := "loop"
	if quota {
		opts += ",prjquota"
	}
	if err := run("mount", "-o", opts, img, dir); err != nil {
		if quota && run("mount", "-o", "loop", img, dir) == nil {
			_ = exec.Command("umount", dir).Run()
			t.Skipf("skipping: this kernel mounts XFS but not with project quotas (no CONFIG_QUOTA): %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = exec.Command("umount", dir).Run() })
	return dir
}

// sharedEnvs starts two agents (two hosts) with one shared volume
// directory, and an assignment maker that gives an instance shared volume
// vol of 1 GiB.
func sharedEnvs(t *testing.T, shared, vol string) (e1, e2 *env, withVol func(agentapi.Assignment) agentapi.Assignment) {
	withShared := func(cfg *agent.Config) { cfg.SharedVolumeDir, cfg.StorageSweep = shared, time.Nanosecond }
	e1, e2 = newEnv(t, h100, withShared), newEnv(t, h100, withShared)
	withVol = func(a agentapi.Assignment) agentapi.Assignment {
		a.Volumes, a.SharedVolumes, a.VolumeSizes = []string{vol}, []string{vol}, map[string]int64{vol: 1}
		return a
	}
	return e1, e2, withVol
}

// TestSharedVolumesTwoHosts: two agents (two hosts) share one shared
// volume directory that is not XFS (as NFS: nothing enforced by
// gpucloud). Both report the shared-volumes label; an instance on the
// first writes a file to the volume and an instance on the second reads
// it; a deleted volume's directory goes at the next sweep, a live one's
// stays.
func TestSharedVolumesTwoHosts(t *testing.T) {
	shared := t.TempDir()
	const vol = "v-shared1"
	e1, e2, withVol := sharedEnvs(t, shared, vol)
	for _, e := range []*env{e1, e2} {
		if err := e.ag.Heartbeat(t.Context()); err != nil {
			t.Fatal(err)
		}
		if inv := e.srv.Heartbeats()[0].Inventory; inv.Host.Labels[agent.LabelSharedVolumes] != "true" {
			t.Errorf("inventory labels %v, want %s=true", inv.Host.Labels, agent.LabelSharedVolumes)
		}
	}
	m := marker(t)
	w := withVol(e1.assignment("i-write", whole(e1.host.ID(), 0), `echo "$MARK" > "$GPUCLOUD_VOLUMES/mark"`))
	w.Env["MARK"] = m
	e1.assign(w)
	e1.untilPhase("i-write", agentapi.PhaseExited)
	e2.assign(withVol(e2.assignment("i-read", whole(e2.host.ID(), 0), `cat "$GPUCLOUD_VOLUMES/mark"`)))
	e2.untilPhase("i-read", agentapi.PhaseExited)
	e2.until("i-read's log shipped", func() bool { return strings.Contains(string(e2.srv.Logs("i-read")), m) })
	if err := os.Mkdir(filepath.Join(shared, "v-live"), 0o777); err != nil {
		t.Fatal(err)
	}

	e1.srv.Drop("i-write")
	e1.until("i-write released", func() bool { return e1.gone("i-write") })
	e2.srv.Drop("i-read")
	e2.until("i-read released", func() bool { return e2.gone("i-read") })
	e2.srv.MarkGone([]string{vol}, nil)
	e2.steps(2)
	if _, err := os.Stat(filepath.Join(shared, vol)); !os.IsNotExist(err) {
		t.Errorf("a deleted shared volume's directory is left: %v", err)
	}
	if _, err := os.Stat(filepath.Join(shared, "v-live")); err != nil {
		t.Errorf("a live shared volume's directory went: %v", err)
	}
}

// TestSharedVolumeXFSWithoutQuota: on XFS mounted without prjquota the
// size cannot be kept, and the instance does not start: its report says
// to mount with prjquota.
func TestSharedVolumeXFSWithoutQuota(t *testing.T) {
	shared := xfsDir(t, false)
	e1, _, withVol := sharedEnvs(t, shared, "v-noquota")
	e1.assign(withVol(e1.assignment("i-1", whole(e1.host.ID(), 0), "true")))
	e1.until("i-1 refused", func() bool {
		r := e1.srv.Reports("i-1")
		return len(r) > 0 && strings.Contains(r[len(r)-1].Message, "prjquota")
	})
}

// TestSharedVolumeQuotaXFS: on XFS with project quotas a write past a
// shared volume's size fails with EDQUOT or ENOSPC while the filesystem
// has room.
func TestSharedVolumeQuotaXFS(t *testing.T) {
	shared := xfsDir(t, true)
	const vol = "v-quota"
	e1, _, withVol := sharedEnvs(t, shared, vol)
	e1.assign(withVol(e1.assignment("i-1", whole(e1.host.ID(), 0), serveScript)))
	e1.ready("i-1")
	// 1 GiB of a 4 GiB filesystem: a write crosses the quota.
	f, err := os.Create(filepath.Join(shared, vol, "big"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<20)
	var written int64
	for written < 2<<30 {
		n, err := f.Write(chunk)
		written += int64(n)
		if err != nil {
			if !errors.Is(err, syscall.EDQUOT) && !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("write past the size: %v, want EDQUOT or ENOSPC", err)
			}
			break
		}
	}
	if written > 1<<30 || written < 1<<30-128<<20 {
		t.Errorf("wrote %d MiB into a 1 GiB shared volume, want about 1024 (the quota)", written>>20)
	}
}

// TestSharedVolumeDirMissing: a shared volume directory that is not there
// (the shared filesystem not mounted) is not made on the host's disk; the
// start fails and says so.
func TestSharedVolumeDirMissing(t *testing.T) {
	shared := filepath.Join(t.TempDir(), "not-mounted")
	e1, _, withVol := sharedEnvs(t, shared, "v-missing")
	e1.assign(withVol(e1.assignment("i-1", whole(e1.host.ID(), 0), "true")))
	e1.until("i-1 refused", func() bool {
		r := e1.srv.Reports("i-1")
		return len(r) > 0 && strings.Contains(r[len(r)-1].Message, "is the shared filesystem mounted?")
	})
	if _, err := os.Stat(shared); !os.IsNotExist(err) {
		t.Errorf("the agent made the missing shared volume directory: %v", err)
	}
}
