package containerd

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agent/runtime"
)

// TestPauseResume: a paused container's workload makes no progress and
// its state says paused; resumed, it goes on where it was; pausing or
// resuming twice does nothing; a paused container stops on SIGTERM (it is
// thawed first); an unknown workload is ErrNotFound.
func TestPauseResume(t *testing.T) {
	rt := newRuntime(t)
	id := newID(t)
	if err := rt.Start(t.Context(), runtime.Spec{InstanceID: id, Grace: 5 * time.Second,
		Command: sh("trap 'echo term; exit 0' TERM; i=0; while true; do i=$((i+1)); echo tick $i; sleep 0.05; done")}); err != nil {
		t.Fatal(err)
	}
	waitLog(t, rt, id, "tick 3")
	var p runtime.Pauser = rt
	ctx := t.Context()
	for range 2 {
		if err := p.Pause(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if paused, err := p.Paused(ctx, id); err != nil || !paused {
		t.Fatalf("paused %v, %v; want true", paused, err)
	}
	time.Sleep(100 * time.Millisecond) // a tick in flight lands
	before := logs(t, rt, id)
	time.Sleep(500 * time.Millisecond)
	if after := logs(t, rt, id); after != before {
		t.Fatalf("a paused workload wrote %q", strings.TrimPrefix(after, before))
	}
	if st, err := rt.Status(id); err != nil || st.State != runtime.StateRunning {
		t.Fatalf("status of a paused workload: %+v, %v (it is still there, running as far as the agent knows)", st, err)
	}
	for range 2 {
		if err := p.Resume(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if paused, err := p.Paused(ctx, id); err != nil || paused {
		t.Fatalf("paused %v, %v after resume; want false", paused, err)
	}
	n := strings.Count(before, "tick")
	waitLog(t, rt, id, "tick "+strconv.Itoa(n+3))
	if err := p.Pause(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := rt.Stop(ctx, id); err != nil {
		t.Fatal(err)
	}
	if st, _ := rt.Status(id); st.State != runtime.StateExited || st.ExitCode != 0 || !strings.Contains(logs(t, rt, id), "term") {
		t.Fatalf("a paused workload stopped: %+v, output ends %q; want it to have handled SIGTERM", st, tail(logs(t, rt, id)))
	}
	for _, f := range []func() error{
		func() error { return p.Pause(ctx, "no-such-instance") },
		func() error { return p.Resume(ctx, "no-such-instance") },
		func() error { _, err := p.Paused(ctx, "no-such-instance"); return err },
		func() error { return p.Pause(ctx, id) }, // exited
	} {
		if err := f(); !errors.Is(err, runtime.ErrNotFound) {
			t.Fatalf("error %v, want ErrNotFound", err)
		}
	}
}

func tail(s string) string {
	if len(s) > 200 {
		return s[len(s)-200:]
	}
	return s
}

// TestImageTime: a workload the runtime started says how long its image
// took (here the base image, in containerd's store already); an unknown
// one says nothing.
func TestImageTime(t *testing.T) {
	rt := newRuntime(t)
	id := newID(t)
	if err := rt.Start(t.Context(), runtime.Spec{InstanceID: id, Command: sh("sleep 30")}); err != nil {
		t.Fatal(err)
	}
	var it runtime.ImageTimer = rt
	if d, ok := it.ImageTime(id); !ok || d <= 0 || d > time.Minute {
		t.Errorf("ImageTime(%s) = %v, %v; want a positive time", id, d, ok)
	}
	if _, ok := it.ImageTime("i-unknown"); ok {
		t.Error("ImageTime of an unknown workload answered")
	}
}
