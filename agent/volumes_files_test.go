package agent_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agent"
	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/agentapi"
)

// TestFilesOnDetachedVolume: a files session on a volume kept in an image
// that no instance has mounted mounts it for the session, and the last
// session's end unmounts it; sessions share one mount; an instance that
// starts with the volume during a session uses that mount, which then
// outlives the session until the instance ends; the agent's pass never
// unmounts a volume a session holds; and a volume whose image is not on
// the host is refused, saying why.
func TestFilesOnDetachedVolume(t *testing.T) {
	needLoop(t)
	e := newEnv(t, h100, func(cfg *agent.Config) {
		cfg.VolumeImages, cfg.RetainTerminated, cfg.StorageSweep = true, -1, time.Nanosecond
	})
	dir := filepath.Join(e.dir, "volumes", "v-data")
	mounted := func() bool {
		ok, err := runtime.Mounted(dir)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	// An instance makes the volume's image, writes into it, and ends: the
	// volume is detached, its image unmounted.
	a := e.assignment("i-1", whole(e.host.ID(), 0), serveScript)
	a.Volumes, a.VolumeSizes = []string{"v-data"}, map[string]int64{"v-data": 1}
	e.assign(a)
	e.ready("i-1")
	if err := os.WriteFile(filepath.Join(dir, "from-the-instance"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := e.srv.SetDesired("i-1", agentapi.DesiredStop); err != nil {
		t.Fatal(err)
	}
	e.untilPhase("i-1", agentapi.PhaseStopped)
	e.until("the volume unmounted", func() bool { return e.gone("i-1") && !mounted() })

	// Two sessions: one mount, kept until the last ends.
	d1, release1, err := agent.AcquireVolume(e.cfg, "v-data", false, 1)
	if err != nil {
		t.Fatal(err)
	}
	d2, release2, err := agent.AcquireVolume(e.cfg, "v-data", false, 1)
	if err != nil || d1 != d2 || !mounted() {
		t.Fatalf("sessions: %s, %s, %v; mounted %v", d1, d2, err, mounted())
	}
	if _, err := os.Stat(filepath.Join(d1, "from-the-instance")); err != nil {
		t.Errorf("the session does not see the volume's files: %v", err)
	}
	if err := os.WriteFile(filepath.Join(d1, "copied-in"), []byte("y"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.steps(2) // the agent's passes leave a held volume mounted
	if !mounted() {
		t.Fatal("the agent's pass unmounted a volume a files session holds")
	}
	release1()
	release1() // a second call changes nothing
	if !mounted() {
		t.Fatal("unmounted while a second session still holds it")
	}
	release2()
	if mounted() {
		t.Fatal("the last session's end left the volume mounted")
	}
	if held, _ := runtime.ImageAttached(dir + ".img"); held {
		t.Error("the image is still on a loop device after the session")
	}

	// A session, then an instance with the volume: the instance uses the
	// session's mount, which outlives the session until the instance ends.
	_, release3, err := agent.AcquireVolume(e.cfg, "v-data", false, 1)
	if err != nil {
		t.Fatal(err)
	}
	b := e.assignment("i-2", whole(e.host.ID(), 1), serveScript)
	b.Volumes, b.VolumeSizes = []string{"v-data"}, map[string]int64{"v-data": 1}
	e.assign(b)
	e.ready("i-2")
	if n := loopsOf(t, dir+".img"); n != 1 {
		t.Errorf("the image is on %d loop devices, want 1", n)
	}
	release3()
	if !mounted() {
		t.Fatal("the session's end unmounted the volume of a running instance")
	}
	if _, err := os.Stat(filepath.Join(dir, "copied-in")); err != nil {
		t.Errorf("the instance does not see what the session copied: %v", err)
	}
	if err := e.srv.SetDesired("i-2", agentapi.DesiredStop); err != nil {
		t.Fatal(err)
	}
	e.untilPhase("i-2", agentapi.PhaseStopped)
	e.until("the volume unmounted after its instance", func() bool { return e.gone("i-2") && !mounted() })

	// A volume that was never used: without its size it is refused; with
	// it, its image is made for the session, and stays after it.
	if _, _, err := agent.AcquireVolume(e.cfg, "v-new", false, 0); !errors.Is(err, agent.ErrVolumeNotMounted) {
		t.Errorf("a volume without an image here and no size: %v, want ErrVolumeNotMounted", err)
	}
	nd, release4, err := agent.AcquireVolume(e.cfg, "v-new", false, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(nd, "first"), []byte("z"), 0o600); err != nil {
		t.Fatal(err)
	}
	release4()
	if ok, _ := runtime.Mounted(nd); ok {
		t.Error("the new volume's image is still mounted after its session")
	}
	if _, err := os.Stat(nd + ".img"); err != nil {
		t.Errorf("the new volume's image: %v", err)
	}
}
