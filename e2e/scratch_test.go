package e2e

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/agent"
	"github.com/gpucloud/gpucloud/agent/gpu/sim"
	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/internal/filexfer"
	"github.com/gpucloud/gpucloud/store/pgtest"
)

// TestScratchContainers: an offering's instance store through the real
// server, agent and containerd: `instances cp` puts a dataset into
// /scratch of a running container (owned by the workload's uid), copies
// it back out byte for byte, another tenant cannot reach it, and the next
// run of the instance finds /scratch empty. On SQLite and PostgreSQL.
func TestScratchContainers(t *testing.T) {
	ch := startContainerHost(t)
	t.Run("sqlite", func(t *testing.T) {
		testScratchContainers(t, ch, "sqlite://"+filepath.Join(t.TempDir(), "gpucloud.db"))
	})
	t.Run("postgres", func(t *testing.T) { testScratchContainers(t, ch, pgtest.URL(t)) })
}

// scratchScript reports what its run finds in /scratch, waits for the
// dataset a copy brings, and says what it got and whose it is.
const scratchScript = `echo "run: $(ls -A /scratch | grep -vx lost+found | wc -l) entries in $GPUCLOUD_SCRATCH"
while [ ! -f /scratch/ready ]; do sleep 0.1; done
echo "got: $(wc -c < /scratch/dataset/a.bin) bytes, owner $(stat -c %u /scratch/dataset/a.bin), me $(id -u)"
exec sleep 600`

func testScratchContainers(t *testing.T, ch *containerHost, db string) {
	spec := sim.Spec{ID: "sim-scratch", Zone: "zone-a", GPUs: sim.GPUSpec{Model: "H100", Count: 8}}
	c := startClusterOn(t, db, nil, func(cfg *agent.Config) {
		cfg.VolumeImages = true // stores as filesystems of their size, as on containers
		withFiles(cfg)
	}, ch.runtimeOf, spec)
	ctx := t.Context()
	_, alice, _ := c.member("acme", "alice")
	_, mallory, _ := c.member("globex", "mallory")
	in, err := alice.CreateInstance(ctx, api.CreateInstanceRequest{Name: "stager", Offering: "h100.1x",
		Command: []string{"/bin/sh", "-c", scratchScript}}, "")
	if err != nil {
		t.Fatal(err)
	}
	c.waitState(alice, in.ID, cloud.Running)
	if out := c.waitLogs(alice, in.ID, "run: "); !strings.Contains(out, "run: 0 entries in /scratch") {
		t.Fatalf("the first run's /scratch: %q", out)
	}

	local := t.TempDir()
	data := writeRandom(t, filepath.Join(local, "dataset", "a.bin"), 5<<20+3)
	writeRandom(t, filepath.Join(local, "ready"), 0)
	fc, err := filesClient(t, alice, "instances", in.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := filexfer.Upload(fc, filepath.Join(local, "dataset"), "/scratch/", filexfer.Options{}); err != nil || st.Files != 1 {
		t.Fatalf("upload into /scratch: %+v, %v", st, err)
	}
	if _, err := filexfer.Upload(fc, filepath.Join(local, "ready"), "/scratch/ready", filexfer.Options{}); err != nil {
		t.Fatal(err)
	}
	out := c.waitLogs(alice, in.ID, "got: ")
	m := regexp.MustCompile(`got: (\d+) bytes, owner (\d+), me (\d+)`).FindStringSubmatch(out)
	if m == nil || m[1] != "5242883" || m[2] != m[3] {
		t.Fatalf("the workload's view of the copy: %q", out)
	}
	back := t.TempDir()
	if _, err := filexfer.Download(fc, "/scratch/dataset", back, filexfer.Options{}); err != nil {
		t.Fatal(err)
	}
	sameFile(t, filepath.Join(back, "dataset", "a.bin"), data)

	_, err = filesClient(t, mallory, "instances", in.ID, 0)
	wantCode(t, "another tenant's cp into the instance store", err, cloud.NotFound)

	// The next run starts with an empty store.
	if _, err := alice.StopInstance(ctx, in.ID, 0); err != nil {
		t.Fatal(err)
	}
	c.waitState(alice, in.ID, cloud.Stopped)
	if _, err := alice.StartInstance(ctx, in.ID, 0); err != nil {
		t.Fatal(err)
	}
	c.waitState(alice, in.ID, cloud.Running)
	c.until("the second run's report of /scratch", func() (bool, string) {
		out := c.logs(alice, in.ID)
		return strings.Count(out, "run: ") == 2, out
	})
	if out := c.logs(alice, in.ID); strings.Count(out, "run: 0 entries in /scratch") != 2 {
		t.Errorf("the second run's /scratch is not empty: %q", out)
	}
}

// TestDetachedVolumeCopyContainers: `volumes cp` of a volume no instance
// has attached, on a host that keeps volumes in filesystem images (as on
// containers): the copy mounts the image for its session, the files an
// earlier instance wrote come out, what is copied in is there for the
// next instance, and the image is unmounted again after the copy. On
// SQLite and PostgreSQL.
func TestDetachedVolumeCopyContainers(t *testing.T) {
	ch := startContainerHost(t)
	t.Run("sqlite", func(t *testing.T) {
		testDetachedVolumeCopy(t, ch, "sqlite://"+filepath.Join(t.TempDir(), "gpucloud.db"))
	})
	t.Run("postgres", func(t *testing.T) { testDetachedVolumeCopy(t, ch, pgtest.URL(t)) })
}

func testDetachedVolumeCopy(t *testing.T, ch *containerHost, db string) {
	spec := sim.Spec{ID: "sim-detached", Zone: "zone-a", GPUs: sim.GPUSpec{Model: "H100", Count: 8}}
	c := startClusterOn(t, db, nil, func(cfg *agent.Config) {
		cfg.VolumeImages = true
		withFiles(cfg)
	}, ch.runtimeOf, spec)
	ctx := t.Context()
	_, alice, _ := c.member("acme", "alice")
	vol, err := alice.CreateVolume(ctx, api.CreateVolumeRequest{Name: "ckpt", SizeGiB: 1, Zone: "zone-a"}, "")
	if err != nil {
		t.Fatal(err)
	}
	first, err := alice.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "h100.1x", Volumes: []string{vol.ID},
		Command: []string{"/bin/sh", "-c", `echo step-1000 > $GPUCLOUD_VOLUMES/model.pt; echo saved`}}, "")
	if err != nil {
		t.Fatal(err)
	}
	c.waitLogs(alice, first.ID, "saved\n")
	if _, err := alice.TerminateInstance(ctx, first.ID, 0); err != nil {
		t.Fatal(err)
	}
	c.waitState(alice, first.ID, cloud.Terminated)
	volDir := filepath.Join(c.hosts[spec.ID].dir, "volumes", vol.ID)
	c.until("the detached volume's image unmounted", func() (bool, string) {
		ok, err := runtime.Mounted(volDir)
		return err == nil && !ok, "still mounted"
	})

	conn, err := alice.OpenFiles(ctx, "volumes", vol.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fc := filexfer.NewClient(conn)
	out := t.TempDir()
	if _, err := filexfer.Download(fc, "/model.pt", filepath.Join(out, "model.pt"), filexfer.Options{}); err != nil {
		t.Fatalf("the checkpoint out of the detached volume: %v", err)
	}
	sameFile(t, filepath.Join(out, "model.pt"), []byte("step-1000\n"))
	local := t.TempDir()
	writeRandom(t, filepath.Join(local, "dataset.bin"), 1<<20+5)
	if _, err := filexfer.Upload(fc, filepath.Join(local, "dataset.bin"), "/dataset.bin", filexfer.Options{}); err != nil {
		t.Fatalf("a dataset into the detached volume: %v", err)
	}
	conn.Close() // the session ends
	c.until("the image unmounted after the copy", func() (bool, string) {
		ok, err := runtime.Mounted(volDir)
		return err == nil && !ok, "still mounted"
	})

	next, err := alice.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "h100.1x", Volumes: []string{vol.ID},
		Command: []string{"/bin/sh", "-c", `echo "dataset $(wc -c < $GPUCLOUD_VOLUMES/dataset.bin)"; exec sleep 600`}}, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := c.waitLogs(alice, next.ID, "dataset "); !strings.Contains(got, "dataset 1048581") {
		t.Errorf("the next instance's view of the copied dataset: %q", got)
	}
}
