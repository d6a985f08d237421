//go:build unix

package process

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/internal/testkit"
)

// grace is short so that the SIGKILL path costs the tests little time.
const grace = 200 * time.Millisecond

func sh(script string) []string { return []string{"/bin/sh", "-c", script} }

// logs reads an instance's whole output.
func logs(t *testing.T, rt *Runtime, id string) string {
	t.Helper()
	var out []byte
	var off int64
	for {
		b, next, err := rt.Logs(id, off)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b...)
		if next == off {
			return string(out)
		}
		off = next
	}
}

// waitLog polls until the output contains s: the workload says when it is
// ready (a trap installed, a child started) instead of the test sleeping.
func waitLog(t *testing.T, rt *Runtime, id, s string) string {
	t.Helper()
	var out string
	testkit.EventuallySays(t, 0, fmt.Sprintf("the output of %s to contain %q", id, s), func() (bool, string) {
		out = logs(t, rt, id)
		return strings.Contains(out, s), fmt.Sprintf("%q", out)
	})
	return out
}

func wait(t *testing.T, rt *Runtime, id string) runtime.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	st, err := rt.Wait(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// alive reports whether a process exists and is not a zombie; an orphan
// that has been killed may linger as a zombie until init reaps it.
func alive(pid int) bool {
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err == nil {
		i := bytes.LastIndexByte(b, ')')
		return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
	} else if _, statErr := os.Stat("/proc/self"); statErr == nil {
		return false
	}
	return syscall.Kill(pid, 0) == nil
}

func TestEnvironmentIsExact(t *testing.T) {
	tests := []struct {
		desc string
		spec runtime.Spec
	}{
		{desc: "CPU-only instance sees no GPU", spec: runtime.Spec{InstanceID: "env-cpu"}},
		{desc: "whole GPUs and tenant env", spec: runtime.Spec{InstanceID: "env-gpu", Devices: []string{"GPU-aaaa", "GPU-bbbb"},
			Env: map[string]string{"MODEL": "llama", "SPACES": "a b  c"}}},
		{desc: "MIG share with metadata", spec: runtime.Spec{InstanceID: "env-share", Devices: []string{"MIG-1234"},
			ShareMilli: 500, ShareMemoryMiB: 20480, MetadataURL: "http://127.0.0.1:4242"}},
		{desc: "tenant cannot widen devices", spec: runtime.Spec{InstanceID: "env-forge", Devices: []string{"GPU-1"},
			Env: map[string]string{"CUDA_VISIBLE_DEVICES": "all", "GPUCLOUD_INSTANCE_ID": "other"}}},
	}
	// The agent's own environment must not leak into workloads.
	t.Setenv("CUDA_VISIBLE_DEVICES", "GPU-agent")
	t.Setenv("GPUCLOUD_TOKEN", "secret")
	rt := New(t.TempDir())
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			s := tt.spec
			s.Command = []string{"env"}
			if err := rt.Start(t.Context(), s); err != nil {
				t.Fatal(err)
			}
			if st := wait(t, rt, s.InstanceID); st.ExitCode != 0 {
				t.Fatalf("env exited %d", st.ExitCode)
			}
			got := strings.Split(strings.TrimSuffix(logs(t, rt, s.InstanceID), "\n"), "\n")
			slices.Sort(got)
			want := runtime.Environ(s, filepath.Join(rt.base, s.InstanceID, "work"))
			if !slices.Equal(got, want) {
				t.Fatalf("environment\n got %q\nwant %q", got, want)
			}
		})
	}
}

func TestExitStatus(t *testing.T) {
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
	rt := New(t.TempDir())
	for i, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			id := "exit-" + strconv.Itoa(i)
			before := time.Now()
			if err := rt.Start(t.Context(), runtime.Spec{InstanceID: id, Command: sh(tt.script)}); err != nil {
				t.Fatal(err)
			}
			st := wait(t, rt, id)
			if st.State != runtime.StateExited || st.ExitCode != tt.wantCode || st.Signal != tt.wantSig {
				t.Fatalf("status %+v, want exit %d signal %q", st, tt.wantCode, tt.wantSig)
			}
			if st.StartedAt.Before(before) || st.ExitedAt.Before(st.StartedAt) {
				t.Fatalf("times %v..%v", st.StartedAt, st.ExitedAt)
			}
		})
	}
}

func TestStop(t *testing.T) {
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
	for i, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			rt := New(t.TempDir())
			id := "stop-" + strconv.Itoa(i)
			if err := rt.Start(t.Context(), runtime.Spec{InstanceID: id, Command: sh(tt.script), Grace: grace}); err != nil {
				t.Fatal(err)
			}
			waitLog(t, rt, id, "ready")
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
			if tt.killed && took < grace {
				t.Fatalf("SIGKILL after %v, before the grace period of %v", took, grace)
			}
			if tt.wantCode == 7 && !strings.Contains(logs(t, rt, id), "bye") {
				t.Fatal("trap output missing")
			}
			// Stop is idempotent.
			if err := rt.Stop(t.Context(), id); err != nil {
				t.Fatalf("second stop: %v", err)
			}
		})
	}
}

func TestStopContextEndsBeforeKill(t *testing.T) {
	rt := New(t.TempDir())
	if err := rt.Start(t.Context(), runtime.Spec{InstanceID: "stubborn", Command: sh("trap '' TERM; echo ready; sleep 30"), Grace: grace}); err != nil {
		t.Fatal(err)
	}
	waitLog(t, rt, "stubborn", "ready")
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if err := rt.Stop(ctx, "stubborn"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("stop with a short context: %v", err)
	}
	// The escalation goes on without the caller.
	if st := wait(t, rt, "stubborn"); st.Signal != "SIGKILL" {
		t.Fatalf("status %+v", st)
	}
}

func TestGroupDies(t *testing.T) {
	tests := []struct {
		desc   string
		script string
		stop   bool
	}{
		{desc: "children die when the instance is stopped", script: "sleep 30 & echo child $!; wait", stop: true},
		{desc: "children die when the leader exits by itself", script: "sleep 30 & echo child $!; sleep 0.05; exit 0"},
		{desc: "children ignoring SIGTERM die too", script: "(trap '' TERM; sleep 30) & echo child $!; wait", stop: true},
	}
	for i, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			rt := New(t.TempDir())
			id := "group-" + strconv.Itoa(i)
			if err := rt.Start(t.Context(), runtime.Spec{InstanceID: id, Command: sh(tt.script), Grace: grace}); err != nil {
				t.Fatal(err)
			}
			out := waitLog(t, rt, id, "\n")
			pid, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(strings.SplitN(out, "\n", 2)[0], "child ")))
			if err != nil {
				t.Fatalf("no child pid in %q", out)
			}
			if !alive(pid) {
				t.Fatalf("child %d not running before stop", pid)
			}
			if tt.stop {
				if err := rt.Stop(t.Context(), id); err != nil {
					t.Fatal(err)
				}
			} else {
				wait(t, rt, id)
			}
			testkit.Eventually(t, 0, fmt.Sprintf("child %d to die with its instance", pid), func() bool { return !alive(pid) })
		})
	}
}

func TestStartIsIdempotent(t *testing.T) {
	rt := New(t.TempDir())
	spec := runtime.Spec{InstanceID: "once", Command: sh("echo started; exec sleep 30"), Grace: grace}
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := rt.Start(t.Context(), spec); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	waitLog(t, rt, "once", "started")
	if err := rt.Remove("once"); !errors.Is(err, runtime.ErrRunning) {
		t.Fatalf("remove while running: %v", err)
	}
	var stops sync.WaitGroup
	for i := 0; i < 4; i++ {
		stops.Add(1)
		go func() {
			defer stops.Done()
			if err := rt.Stop(t.Context(), "once"); err != nil {
				t.Error(err)
			}
		}()
	}
	stops.Wait()
	// Starting an exited instance does not run it again...
	if err := rt.Start(t.Context(), spec); err != nil {
		t.Fatal(err)
	}
	if st, _ := rt.Status("once"); st.State != runtime.StateExited {
		t.Fatalf("start after exit changed status: %+v", st)
	}
	if n := strings.Count(logs(t, rt, "once"), "started"); n != 1 {
		t.Fatalf("started %d times", n)
	}
	// ...until it is removed; the log is appended to, not replaced.
	if err := rt.Remove("once"); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Status("once"); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("status after remove: %v", err)
	}
	if err := rt.Start(t.Context(), spec); err != nil {
		t.Fatal(err)
	}
	waitLog(t, rt, "once", "started\nstarted")
	if err := rt.Stop(t.Context(), "once"); err != nil {
		t.Fatal(err)
	}
}

func TestLogs(t *testing.T) {
	rt := New(t.TempDir())
	logPath := filepath.Join(t.TempDir(), "nested", "dir", "out.log")
	if err := os.MkdirAll(filepath.Dir(logPath), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(logPath, []byte("old\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	spec := runtime.Spec{InstanceID: "logs", LogPath: logPath,
		Command: sh("echo out; echo err >&2; head -c " + strconv.Itoa(MaxLogChunk+10) + " /dev/zero")}
	if err := rt.Start(t.Context(), spec); err != nil {
		t.Fatal(err)
	}
	wait(t, rt, "logs")
	tests := []struct {
		desc     string
		offset   int64
		wantLen  int
		wantNext int64
		prefix   string
		wantErr  error
	}{
		{desc: "from the start, appended to the old file, capped", offset: 0, wantLen: MaxLogChunk, wantNext: MaxLogChunk, prefix: "old\nout\nerr\n"},
		{desc: "from an offset", offset: 4, wantLen: MaxLogChunk, wantNext: 4 + MaxLogChunk, prefix: "out\nerr\n"},
		{desc: "the rest", offset: MaxLogChunk, wantLen: 22, wantNext: MaxLogChunk + 22},
		{desc: "at the end", offset: MaxLogChunk + 22, wantLen: 0, wantNext: MaxLogChunk + 22},
		{desc: "past the end resumes at the end", offset: 1 << 30, wantLen: 0, wantNext: MaxLogChunk + 22},
		{desc: "negative offset", offset: -1, wantErr: runtime.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			b, next, err := rt.Logs("logs", tt.offset)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("error %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(b) != tt.wantLen || next != tt.wantNext || !strings.HasPrefix(string(b), tt.prefix) {
				t.Fatalf("got %d bytes (%q...) next %d, want %d bytes next %d prefix %q",
					len(b), b[:min(len(b), 16)], next, tt.wantLen, tt.wantNext, tt.prefix)
			}
		})
	}
}

func TestWorkDir(t *testing.T) {
	rt := New(t.TempDir())
	work := filepath.Join(t.TempDir(), "vol", "data")
	if err := os.MkdirAll(work, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "run.sh"), []byte("#!/bin/sh\npwd\necho \"$HOME\"\n"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(t.Context(), runtime.Spec{InstanceID: "wd", WorkDir: work, Command: []string{"./run.sh"}}); err != nil {
		t.Fatal(err)
	}
	wait(t, rt, "wd")
	if got, want := logs(t, rt, "wd"), work+"\n"+work+"\n"; got != want {
		t.Fatalf("pwd and HOME %q, want %q", got, want)
	}
}

func TestErrors(t *testing.T) {
	rt := New(t.TempDir())
	ctx := t.Context()
	tests := []struct {
		desc    string
		call    func() error
		wantErr error
	}{
		{desc: "program not in PATH", call: func() error {
			return rt.Start(ctx, runtime.Spec{InstanceID: "np", Command: []string{"no-such-program-xyz"}})
		}, wantErr: runtime.ErrInvalid},
		{desc: "program not in the workload's PATH even if in the agent's", call: func() error {
			return rt.Start(ctx, runtime.Spec{InstanceID: "np2", Command: []string{"sh"}, Env: map[string]string{"PATH": "/nonexistent"}})
		}, wantErr: runtime.ErrInvalid},
		{desc: "missing program path", call: func() error {
			return rt.Start(ctx, runtime.Spec{InstanceID: "np3", Command: []string{"/no/such/file"}})
		}, wantErr: runtime.ErrInvalid},
		{desc: "unsafe id", call: func() error {
			return rt.Start(ctx, runtime.Spec{InstanceID: "../escape", Command: []string{"true"}})
		}, wantErr: runtime.ErrInvalid},
		{desc: "cancelled context", call: func() error {
			c, cancel := context.WithCancel(ctx)
			cancel()
			return rt.Start(c, runtime.Spec{InstanceID: "cx", Command: []string{"true"}})
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
	// A failed start leaves nothing behind, so a corrected retry can run.
	for _, id := range []string{"np", "np2", "np3", "cx"} {
		if _, err := rt.Status(id); !errors.Is(err, runtime.ErrNotFound) {
			t.Fatalf("failed start of %s left a record: %v", id, err)
		}
	}
}

func TestWaitHonoursContext(t *testing.T) {
	rt := New(t.TempDir())
	if err := rt.Start(t.Context(), runtime.Spec{InstanceID: "w", Command: []string{"sleep", "30"}, Grace: grace}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
	defer cancel()
	if _, err := rt.Wait(ctx, "w"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait: %v", err)
	}
	if err := rt.Stop(t.Context(), "w"); err != nil {
		t.Fatal(err)
	}
}

func TestStopAll(t *testing.T) {
	r := New(t.TempDir())
	ctx := context.Background()
	for _, id := range []string{"a", "b"} {
		if err := r.Start(ctx, runtime.Spec{InstanceID: id, Command: []string{"/bin/sh", "-c", "sleep 30"}, Grace: 200 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.StopAll(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b"} {
		if st, err := r.Status(id); err != nil || st.State != "exited" {
			t.Fatalf("%s: %+v, %v", id, st, err)
		}
	}
}
