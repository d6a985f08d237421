package runtimetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agent/runtime"
)

// The life of a workload: its exit status, Stop's escalation, Start's
// idempotence, Wait's context and the errors of unknown instances.

func testExitStatus(t *testing.T, h Harness) {
	rt := h.New(t)
	tests := []struct {
		desc     string
		script   string
		wantCode int
		wantSig  string
	}{
		{desc: "success", script: "exit 0", wantCode: 0},
		{desc: "failure code", script: "exit 3", wantCode: 3},
		{desc: "killed by a signal", script: "kill -KILL $$", wantCode: 137, wantSig: "SIGKILL"},
		{desc: "terminated by a signal", script: "kill -TERM $$", wantCode: 143, wantSig: "SIGTERM"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			before := time.Now()
			st, out := Exec(t, rt, runtime.Spec{InstanceID: h.ID(t), Command: Sh(tt.script)})
			if st.State != runtime.StateExited || st.ExitCode != tt.wantCode || st.Signal != tt.wantSig {
				t.Fatalf("status %+v, want exit %d signal %q; output %q", st, tt.wantCode, tt.wantSig, out)
			}
			if st.StartedAt.Before(before.Add(-h.StartSlack)) || st.ExitedAt.Before(st.StartedAt) {
				t.Fatalf("times %v..%v", st.StartedAt, st.ExitedAt)
			}
		})
	}
}

func testStop(t *testing.T, h Harness) {
	rt := h.New(t)
	tests := []struct {
		desc     string
		script   string
		wantCode int
		wantSig  string
		// killed says whether SIGKILL (after grace) was needed.
		killed bool
	}{
		{desc: "default SIGTERM disposition", script: "echo ready; sleep 30 & wait", wantCode: 143, wantSig: "SIGTERM"},
		{desc: "trap handles SIGTERM and exits", script: "trap 'echo bye; exit 7' TERM; echo ready; sleep 30 & wait", wantCode: 7},
		{desc: "SIGTERM ignored gets SIGKILL after grace", script: "trap '' TERM; echo ready; sleep 30", wantCode: 137, wantSig: "SIGKILL", killed: true},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			id := h.ID(t)
			if err := rt.Start(t.Context(), runtime.Spec{InstanceID: id, Command: Sh(tt.script), Grace: h.Grace}); err != nil {
				t.Fatal(err)
			}
			WaitLog(t, rt, id, "ready")
			if st, _ := rt.Status(id); st.State != runtime.StateRunning || !st.ExitedAt.IsZero() {
				t.Fatalf("status before stop %+v", st)
			}
			start := time.Now()
			if err := rt.Stop(t.Context(), id); err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			st, err := rt.Status(id)
			if err != nil {
				t.Fatal(err)
			}
			if st.State != runtime.StateExited || st.ExitCode != tt.wantCode || st.Signal != tt.wantSig {
				t.Fatalf("status %+v, want exit %d signal %q", st, tt.wantCode, tt.wantSig)
			}
			// The exit status already shows whether SIGKILL was needed; a
			// kill must also have waited out the grace period.
			if tt.killed && took < h.Grace {
				t.Fatalf("SIGKILL after %v, before the grace period of %v", took, h.Grace)
			}
			if tt.wantCode == 7 && !strings.Contains(Logs(t, rt, id), "bye") {
				t.Fatal("trap output missing")
			}
			// Stop is idempotent.
			if err := rt.Stop(t.Context(), id); err != nil {
				t.Fatalf("second stop: %v", err)
			}
		})
	}
}

func testStopContextEndsBeforeKill(t *testing.T, h Harness) {
	rt := h.New(t)
	id := h.ID(t)
	if err := rt.Start(t.Context(), runtime.Spec{InstanceID: id, Command: Sh("trap '' TERM; echo ready; sleep 30"), Grace: h.Grace}); err != nil {
		t.Fatal(err)
	}
	WaitLog(t, rt, id, "ready")
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if err := rt.Stop(ctx, id); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("stop with a short context: %v", err)
	}
	// The escalation goes on without the caller.
	if st := Wait(t, rt, id); st.Signal != "SIGKILL" {
		t.Fatalf("status %+v", st)
	}
}

// stopper is implemented by runtimes that can stop every workload at
// once, for a host process that exits.
type stopper interface {
	StopAll(ctx context.Context) error
}

func testStopAll(t *testing.T, h Harness) {
	rt := h.New(t)
	s, ok := rt.(stopper)
	if !ok {
		t.Skipf("%T has no StopAll", rt)
	}
	ids := []string{h.ID(t), h.ID(t)}
	for _, id := range ids {
		if err := rt.Start(t.Context(), runtime.Spec{InstanceID: id, Command: Sh("sleep 30"), Grace: h.Grace}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.StopAll(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if st, err := rt.Status(id); err != nil || st.State != runtime.StateExited {
			t.Fatalf("%s: %+v, %v", id, st, err)
		}
	}
}

// testChildrenDie: the processes a workload starts die with it, when it
// is stopped (even those that ignore SIGTERM) and when its first process
// exits by itself. What escapes the workload's process group or session
// is for each runtime's own tests: a container's survives no more than
// these, a process runtime's does.
func testChildrenDie(t *testing.T, h Harness) {
	rt := h.New(t)
	tests := []struct {
		desc   string
		script string
		stop   bool
	}{
		{desc: "children die when the instance is stopped", script: "sleep %s & echo ready; wait", stop: true},
		{desc: "children die when the leader exits by itself", script: "sleep %s & echo ready; sleep 0.5; exit 0"},
		{desc: "children ignoring SIGTERM die too", script: "(trap '' TERM; sleep %s) & echo ready; wait", stop: true},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			id, mark := h.ID(t), Mark()
			if err := rt.Start(t.Context(), runtime.Spec{InstanceID: id, Command: Sh(fmt.Sprintf(tt.script, mark)), Grace: h.Grace}); err != nil {
				t.Fatal(err)
			}
			WaitLog(t, rt, id, "ready")
			Eventually(t, "the child to run", func() (bool, string) { return len(HostProcesses("sleep", mark)) > 0, "" })
			if tt.stop {
				if err := rt.Stop(t.Context(), id); err != nil {
					t.Fatal(err)
				}
			} else {
				Wait(t, rt, id)
			}
			// A killed child may linger a moment as a zombie (which has
			// no command line) until its parent reaps it.
			Eventually(t, "the child to die with its instance", func() (bool, string) {
				pids := HostProcesses("sleep", mark)
				return len(pids) == 0, fmt.Sprint(pids)
			})
		})
	}
}

func testStartIsIdempotent(t *testing.T, h Harness) {
	rt := h.New(t)
	id := h.ID(t)
	spec := runtime.Spec{InstanceID: id, Command: Sh("echo started; exec sleep 30"), Grace: h.Grace}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if err := rt.Start(t.Context(), spec); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	WaitLog(t, rt, id, "started")
	if err := rt.Remove(id); !errors.Is(err, runtime.ErrRunning) {
		t.Fatalf("remove while running: %v", err)
	}
	var stops sync.WaitGroup
	for range 4 {
		stops.Go(func() {
			if err := rt.Stop(t.Context(), id); err != nil {
				t.Error(err)
			}
		})
	}
	stops.Wait()
	// Starting an exited instance does not run it again...
	if err := rt.Start(t.Context(), spec); err != nil {
		t.Fatal(err)
	}
	if st, _ := rt.Status(id); st.State != runtime.StateExited {
		t.Fatalf("start after exit changed status: %+v", st)
	}
	if n := strings.Count(Logs(t, rt, id), "started"); n != 1 {
		t.Fatalf("started %d times", n)
	}
	// ...until it is removed; the log is appended to, not replaced.
	if err := rt.Remove(id); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Status(id); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("status after remove: %v", err)
	}
	if err := rt.Start(t.Context(), spec); err != nil {
		t.Fatal(err)
	}
	WaitLog(t, rt, id, "started\nstarted")
	if err := rt.Stop(t.Context(), id); err != nil {
		t.Fatal(err)
	}
}

// testErrors: malformed specs and unknown instances are refused with the
// contract's errors, and a failed start leaves nothing behind, so that a
// corrected retry can run.
func testErrors(t *testing.T, h Harness) {
	rt := h.New(t)
	ctx := t.Context()
	ids := map[string]string{}
	for _, k := range []string{"np", "np2", "np3", "cx"} {
		ids[k] = h.ID(t) + "-" + k
	}
	tests := []struct {
		desc    string
		call    func() error
		wantErr error
	}{
		{desc: "program not in PATH", call: func() error {
			return rt.Start(ctx, runtime.Spec{InstanceID: ids["np"], Command: []string{"no-such-program-xyz"}})
		}, wantErr: runtime.ErrInvalid},
		{desc: "program not in the workload's PATH even if it is in the agent's or the image's", call: func() error {
			return rt.Start(ctx, runtime.Spec{InstanceID: ids["np2"], Command: []string{"sh"}, Env: map[string]string{"PATH": "/nonexistent"}})
		}, wantErr: runtime.ErrInvalid},
		{desc: "missing program path", call: func() error {
			return rt.Start(ctx, runtime.Spec{InstanceID: ids["np3"], Command: []string{"/no/such/file"}})
		}, wantErr: runtime.ErrInvalid},
		{desc: "unsafe id", call: func() error {
			return rt.Start(ctx, runtime.Spec{InstanceID: "../escape", Command: []string{"true"}})
		}, wantErr: runtime.ErrInvalid},
		{desc: "cancelled context", call: func() error {
			c, cancel := context.WithCancel(ctx)
			cancel()
			return rt.Start(c, runtime.Spec{InstanceID: ids["cx"], Command: []string{"true"}})
		}, wantErr: context.Canceled},
		{desc: "stop unknown", call: func() error { return rt.Stop(ctx, "nope") }, wantErr: runtime.ErrNotFound},
		{desc: "status unknown", call: func() error { _, err := rt.Status("nope"); return err }, wantErr: runtime.ErrNotFound},
		{desc: "wait unknown", call: func() error { _, err := rt.Wait(ctx, "nope"); return err }, wantErr: runtime.ErrNotFound},
		{desc: "logs unknown", call: func() error { _, _, err := rt.Logs("nope", 0); return err }, wantErr: runtime.ErrNotFound},
		{desc: "remove unknown", call: func() error { return rt.Remove("nope") }, wantErr: runtime.ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			if err := tt.call(); !errors.Is(err, tt.wantErr) {
				t.Fatalf("error %v, want %v", err, tt.wantErr)
			}
		})
	}
	for _, id := range ids {
		if _, err := rt.Status(id); !errors.Is(err, runtime.ErrNotFound) {
			t.Fatalf("failed start of %s left a record: %v", id, err)
		}
		if h.LeftBehind == nil {
			continue
		}
		if left := h.LeftBehind(t, rt, id); left != "" {
			t.Fatalf("failed start of %s left %s", id, left)
		}
	}
}

func testWaitHonoursContext(t *testing.T, h Harness) {
	rt := h.New(t)
	id := h.ID(t)
	if err := rt.Start(t.Context(), runtime.Spec{InstanceID: id, Command: []string{"sleep", "30"}, Grace: h.Grace}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
	defer cancel()
	if _, err := rt.Wait(ctx, id); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait: %v", err)
	}
	if err := rt.Stop(t.Context(), id); err != nil {
		t.Fatal(err)
	}
}
