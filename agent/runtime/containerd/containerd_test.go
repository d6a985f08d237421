package containerd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agent/gpu/sim"
	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/internal/testkit"
)

// The same contract as the process runtime (agent/runtime/process), case
// for case, and what only a container gives.

// grace is short so that the SIGKILL path costs the tests little time.
const grace = 300 * time.Millisecond

func TestEnvironmentIsExact(t *testing.T) {
	rt := newRuntime(t)
	vol := filepath.Join(t.TempDir(), "vol-data")
	tests := []struct {
		desc string
		spec runtime.Spec
	}{
		{desc: "CPU-only instance sees no GPU", spec: runtime.Spec{}},
		{desc: "whole GPUs and tenant env", spec: runtime.Spec{Devices: []string{"GPU-aaaa", "GPU-bbbb"}, GPUIndexes: []int{0, 1},
			Env: map[string]string{"MODEL": "llama", "SPACES": "a b  c"}}},
		{desc: "GPU share with MPS limits and metadata", spec: runtime.Spec{Devices: []string{"GPU-cccc"}, GPUIndexes: []int{2},
			ShareMilli: 500, ShareMemoryMiB: 20480, Metadata: handlerSaying("meta")}},
		{desc: "tenant cannot widen devices", spec: runtime.Spec{Devices: []string{"GPU-1"},
			Env: map[string]string{"CUDA_VISIBLE_DEVICES": "all", "GPUCLOUD_INSTANCE_ID": "other", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=1T"}}},
		{desc: "volumes are passed as the paths the workload sees", spec: runtime.Spec{Volumes: []string{vol}, WorkDir: vol}},
	}
	t.Setenv("CUDA_VISIBLE_DEVICES", "GPU-agent")
	t.Setenv("GPUCLOUD_TOKEN", "secret")
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			s := tt.spec
			s.InstanceID = newID(t)
			s.Command = []string{"env"}
			st, out := run(t, rt, s)
			if st.ExitCode != 0 {
				t.Fatalf("env exited %d: %q", st.ExitCode, out)
			}
			got := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			slices.Sort(got)
			lay, err := layout(withWorkDir(rt, s))
			if err != nil {
				t.Fatal(err)
			}
			if want := containerEnv(s, lay); !slices.Equal(got, want) {
				t.Fatalf("environment\n got %q\nwant %q", got, want)
			}
			if s.Metadata != nil && !slices.Contains(got, "GPUCLOUD_METADATA_URL=http://169.254.169.254") {
				t.Fatalf("the metadata URL is missing: %q", got)
			}
			if s.ShareMilli > 0 && !slices.Contains(got, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=20480M") {
				t.Fatalf("the share's MPS memory limit is missing: %q", got)
			}
			if len(s.Volumes) > 0 && !slices.Contains(got, "GPUCLOUD_VOLUMES=/volumes/vol-data") {
				t.Fatalf("volumes: %q", got)
			}
		})
	}
}

// withWorkDir fills the working directory the runtime picks.
func withWorkDir(rt *Runtime, s runtime.Spec) runtime.Spec {
	if s.WorkDir == "" {
		s.WorkDir = filepath.Join(rt.cfg.BaseDir, s.InstanceID, "work")
	}
	return s
}

func TestExitStatus(t *testing.T) {
	rt := newRuntime(t)
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
			id := newID(t)
			before := time.Now()
			st, out := run(t, rt, runtime.Spec{InstanceID: id, Command: sh(tt.script)})
			if st.State != runtime.StateExited || st.ExitCode != tt.wantCode || st.Signal != tt.wantSig {
				t.Fatalf("status %+v, want exit %d signal %q; output %q", st, tt.wantCode, tt.wantSig, out)
			}
			if st.StartedAt.Before(before.Add(-time.Second)) || st.ExitedAt.Before(st.StartedAt) {
				t.Fatalf("times %v..%v", st.StartedAt, st.ExitedAt)
			}
		})
	}
}

func TestStop(t *testing.T) {
	rt := newRuntime(t)
	tests := []struct {
		desc     string
		script   string
		wantCode int
		wantSig  string
		killed   bool
	}{
		{desc: "default SIGTERM disposition", script: "echo ready; sleep 30 & wait", wantCode: 143, wantSig: "SIGTERM"},
		{desc: "trap handles SIGTERM and exits", script: "trap 'echo bye; exit 7' TERM; echo ready; sleep 30 & wait", wantCode: 7},
		{desc: "SIGTERM ignored gets SIGKILL after grace", script: "trap '' TERM; echo ready; sleep 30", wantCode: 137, wantSig: "SIGKILL", killed: true},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			id := newID(t)
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
			if tt.killed && took < grace {
				t.Fatalf("SIGKILL after %v, before the grace period of %v", took, grace)
			}
			if tt.wantCode == 7 && !strings.Contains(logs(t, rt, id), "bye") {
				t.Fatal("trap output missing")
			}
			if err := rt.Stop(t.Context(), id); err != nil {
				t.Fatalf("second stop: %v", err)
			}
		})
	}
}

func TestStopContextEndsBeforeKill(t *testing.T) {
	rt := newRuntime(t)
	id := newID(t)
	if err := rt.Start(t.Context(), runtime.Spec{InstanceID: id, Command: sh("trap '' TERM; echo ready; sleep 30"), Grace: grace}); err != nil {
		t.Fatal(err)
	}
	waitLog(t, rt, id, "ready")
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if err := rt.Stop(ctx, id); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("stop with a short context: %v", err)
	}
	if st := wait(t, rt, id); st.Signal != "SIGKILL" {
		t.Fatalf("status %+v", st)
	}
}

// TestNoProcessSurvives starts processes that leave the workload's
// process group and session, and checks that none is left on the host
// once the instance has stopped or exited.
func TestNoProcessSurvives(t *testing.T) {
	rt := newRuntime(t)
	tests := []struct {
		desc   string
		script string
		stop   bool
	}{
		{desc: "setsid child when the instance is stopped", script: "setsid sleep %s & echo ready; wait", stop: true},
		{desc: "setsid child ignoring SIGTERM when the instance is stopped", script: "setsid sh -c \"trap '' TERM; sleep %s\" & echo ready; sleep 30", stop: true},
		{desc: "setsid child when the leader exits by itself", script: "setsid sleep %s & echo ready; sleep 0.5; exit 0"},
		{desc: "double fork into a new session", script: "(setsid sh -c 'sleep %s & exit 0') ; echo ready; sleep 30", stop: true},
	}
	for i, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Parallel()
			id := newID(t)
			// A duration no other process on the host sleeps for.
			mark := strconv.Itoa(900000+os.Getpid()%10000*10+i) + ".5"
			if err := rt.Start(t.Context(), runtime.Spec{InstanceID: id, Command: sh(fmt.Sprintf(tt.script, mark)), Grace: grace}); err != nil {
				t.Fatal(err)
			}
			waitLog(t, rt, id, "ready")
			testkit.Eventually(t, 10*time.Second, "the escaped sleep to run", func() bool { return len(hostProcesses("sleep", mark)) > 0 })
			if tt.stop {
				if err := rt.Stop(t.Context(), id); err != nil {
					t.Fatal(err)
				}
			} else {
				wait(t, rt, id)
			}
			// Stop and Wait return once the task is deleted: nothing may
			// be left at that moment, not even a moment later.
			if pids := hostProcesses("sleep", mark); len(pids) > 0 {
				t.Fatalf("processes %v outlived their instance", pids)
			}
		})
	}
}

func TestStartIsIdempotent(t *testing.T) {
	rt := newRuntime(t)
	id := newID(t)
	spec := runtime.Spec{InstanceID: id, Command: sh("echo started; exec sleep 30"), Grace: grace}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if err := rt.Start(t.Context(), spec); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	waitLog(t, rt, id, "started")
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
	if err := rt.Start(t.Context(), spec); err != nil {
		t.Fatal(err)
	}
	if st, _ := rt.Status(id); st.State != runtime.StateExited {
		t.Fatalf("start after exit changed status: %+v", st)
	}
	if n := strings.Count(logs(t, rt, id), "started"); n != 1 {
		t.Fatalf("started %d times", n)
	}
	if err := rt.Remove(id); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Status(id); !errors.Is(err, runtime.ErrNotFound) {
		t.Fatalf("status after remove: %v", err)
	}
	if err := rt.Start(t.Context(), spec); err != nil {
		t.Fatal(err)
	}
	waitLog(t, rt, id, "started\nstarted")
	if err := rt.Stop(t.Context(), id); err != nil {
		t.Fatal(err)
	}
}

func TestLogs(t *testing.T) {
	rt := newRuntime(t)
	id := newID(t)
	logPath := filepath.Join(t.TempDir(), "nested", "dir", "out.log")
	if err := os.MkdirAll(filepath.Dir(logPath), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(logPath, []byte("old\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	spec := runtime.Spec{InstanceID: id, LogPath: logPath,
		Command: sh("echo out; echo err >&2; head -c " + strconv.Itoa(MaxLogChunk+10) + " /dev/zero")}
	run(t, rt, spec)
	// stdout and stderr are two streams into one file: their order is
	// not fixed.
	b, _, err := rt.Logs(id, 0)
	if err != nil {
		t.Fatal(err)
	}
	if all := logs(t, rt, id); len(b) != MaxLogChunk || !strings.HasPrefix(all, "old\n") ||
		!strings.Contains(all, "out\n") || !strings.Contains(all, "err\n") {
		t.Fatalf("first chunk: %d bytes starting %q", len(b), b[:min(len(b), 16)])
	}
	tests := []struct {
		desc     string
		offset   int64
		wantLen  int
		wantNext int64
		wantErr  error
	}{
		{desc: "the rest", offset: MaxLogChunk, wantLen: 22, wantNext: MaxLogChunk + 22},
		{desc: "at the end", offset: MaxLogChunk + 22, wantLen: 0, wantNext: MaxLogChunk + 22},
		{desc: "past the end resumes at the end", offset: 1 << 30, wantLen: 0, wantNext: MaxLogChunk + 22},
		{desc: "negative offset", offset: -1, wantErr: runtime.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			b, next, err := rt.Logs(id, tt.offset)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("error %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(b) != tt.wantLen || next != tt.wantNext {
				t.Fatalf("got %d bytes next %d, want %d bytes next %d", len(b), next, tt.wantLen, tt.wantNext)
			}
		})
	}
}

func TestWorkDirAndVolumes(t *testing.T) {
	rt := newRuntime(t)
	work := filepath.Join(t.TempDir(), "instances", "wd")
	volA := filepath.Join(t.TempDir(), "vol-a")
	volB := filepath.Join(t.TempDir(), "vol-b")
	for _, d := range []string{work, volA, volB} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(work, "run.sh"), []byte("#!/bin/sh\npwd\necho \"$HOME\"\necho hi > $HOME/out\necho a > /volumes/vol-a/f\necho b > /volumes/vol-b/f\nls /volumes\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	id := newID(t)
	st, out := run(t, rt, runtime.Spec{InstanceID: id, WorkDir: work, Volumes: []string{volA, volB}, Command: []string{"./run.sh"}})
	if want := "/work\n/work\nvol-a\nvol-b\n"; st.ExitCode != 0 || out != want {
		t.Fatalf("exit %d, output %q, want %q", st.ExitCode, out, want)
	}
	for _, f := range []struct{ path, want string }{
		{filepath.Join(work, "out"), "hi\n"}, {filepath.Join(volA, "f"), "a\n"}, {filepath.Join(volB, "f"), "b\n"},
	} {
		if b, err := os.ReadFile(f.path); err != nil || string(b) != f.want {
			t.Fatalf("%s: %q, %v", f.path, b, err)
		}
	}
	// The working directory may be a volume: then it is seen there.
	id2 := newID(t)
	st, out = run(t, rt, runtime.Spec{InstanceID: id2, WorkDir: volA, Volumes: []string{volA}, Command: sh("pwd; ls")})
	if st.ExitCode != 0 || out != "/volumes/vol-a\nf\n" {
		t.Fatalf("exit %d, output %q", st.ExitCode, out)
	}
}

func TestErrors(t *testing.T) {
	rt := newRuntime(t)
	ctx := t.Context()
	work := t.TempDir()
	ids := map[string]string{}
	for _, k := range []string{"np", "np2", "np3", "np4", "cx"} {
		ids[k] = newID(t) + "-" + k
	}
	tests := []struct {
		desc    string
		call    func() error
		wantErr error
	}{
		{desc: "program not in PATH", call: func() error {
			return rt.Start(ctx, runtime.Spec{InstanceID: ids["np"], Command: []string{"no-such-program-xyz"}})
		}, wantErr: runtime.ErrInvalid},
		{desc: "program not in the workload's PATH even if in the image", call: func() error {
			return rt.Start(ctx, runtime.Spec{InstanceID: ids["np2"], Command: []string{"sh"}, Env: map[string]string{"PATH": "/nonexistent"}})
		}, wantErr: runtime.ErrInvalid},
		{desc: "missing program path", call: func() error {
			return rt.Start(ctx, runtime.Spec{InstanceID: ids["np3"], Command: []string{"/no/such/file"}})
		}, wantErr: runtime.ErrInvalid},
		{desc: "program on the host but not in the container", call: func() error {
			return rt.Start(ctx, runtime.Spec{InstanceID: ids["np4"], WorkDir: work, Command: []string{DefaultContainerd}})
		}, wantErr: runtime.ErrInvalid},
		{desc: "unsafe id", call: func() error {
			return rt.Start(ctx, runtime.Spec{InstanceID: "../escape", Command: []string{"true"}})
		}, wantErr: runtime.ErrInvalid},
		{desc: "cancelled context", call: func() error {
			c, cancel := context.WithCancel(ctx)
			cancel()
			return rt.Start(c, runtime.Spec{InstanceID: ids["cx"], Command: []string{"true"}})
		}, wantErr: context.Canceled},
		{desc: "image not on the host and pulling off", call: func() error {
			return rt.Start(ctx, runtime.Spec{InstanceID: newID(t), Image: "docker.io/library/no-such-image:0", Command: []string{"true"}})
		}},
		{desc: "stop unknown", call: func() error { return rt.Stop(ctx, "nope") }, wantErr: runtime.ErrNotFound},
		{desc: "status unknown", call: func() error { _, err := rt.Status("nope"); return err }, wantErr: runtime.ErrNotFound},
		{desc: "wait unknown", call: func() error { _, err := rt.Wait(ctx, "nope"); return err }, wantErr: runtime.ErrNotFound},
		{desc: "logs unknown", call: func() error { _, _, err := rt.Logs("nope", 0); return err }, wantErr: runtime.ErrNotFound},
		{desc: "remove unknown", call: func() error { return rt.Remove("nope") }, wantErr: runtime.ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			err := tt.call()
			if tt.wantErr == nil {
				if err == nil {
					t.Fatal("no error")
				}
				return
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("error %v, want %v", err, tt.wantErr)
			}
		})
	}
	// A failed start leaves nothing behind: no record, no container.
	for _, id := range ids {
		if _, err := rt.Status(id); !errors.Is(err, runtime.ErrNotFound) {
			t.Fatalf("failed start of %s left a record: %v", id, err)
		}
		if _, err := rt.client.LoadContainer(rt.nsCtx(ctx), id); err == nil {
			t.Fatalf("failed start of %s left a container", id)
		}
	}
}

func TestWaitHonoursContext(t *testing.T) {
	rt := newRuntime(t)
	id := newID(t)
	if err := rt.Start(t.Context(), runtime.Spec{InstanceID: id, Command: []string{"sleep", "30"}, Grace: grace}); err != nil {
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

// TestIsolation checks what the workload sees of the host: namespaces of
// its own, its user, its processes only, no network but loopback, none of
// the host's files.
func TestIsolation(t *testing.T) {
	t.Setenv("GPUCLOUD_TOKEN", "secret")
	rt := newRuntime(t)
	id := newID(t)
	script := `for n in pid mnt ipc uts net; do echo "ns $n $(readlink /proc/self/ns/$n)"; done
echo "id $(id -u):$(id -g)"
echo "host $(hostname)"
echo "procs $(ls /proc | grep -c '^[0-9]')"
echo "init $(tr '\0\n' '  ' < /proc/1/cmdline | cut -c1-30)"
echo "ifaces $(ls /sys/class/net | tr '\n' ' ')"
echo "lo $(cat /sys/class/net/lo/operstate)"
echo "caps $(grep CapEff /proc/self/status)"
echo "nnp $(grep NoNewPrivs /proc/self/status)"
ls /work/main 2>/dev/null && echo LEAK sees the repository
ls ` + env.tmp + ` 2>/dev/null && echo LEAK sees the test directory
touch /etc/x 2>/dev/null && echo LEAK wrote /etc
cat /proc/1/environ 2>/dev/null | grep -q GPUCLOUD_TOKEN && echo LEAK sees the agent environment
echo done`
	st, out := run(t, rt, runtime.Spec{InstanceID: id, Command: sh(script)})
	if st.ExitCode != 0 {
		t.Fatalf("exit %d: %s", st.ExitCode, out)
	}
	lines := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		k, v, _ := strings.Cut(l, " ")
		lines[k] += v + ";"
	}
	for _, n := range []string{"pid", "mnt", "ipc", "uts", "net"} {
		if strings.Contains(out, "ns "+n+" "+hostNamespace(n)) {
			t.Errorf("the workload shares the host's %s namespace", n)
		}
	}
	checks := []struct{ key, want string }{
		{"id", "65534:65534;"},
		{"host", id + ";"},
		{"init", InitPath + " -g -- /bin/sh -c "},
		{"ifaces", "lo ;"},
		{"caps", "CapEff:\t0000000000000000;"},
		{"nnp", "NoNewPrivs:\t1;"},
	}
	for _, c := range checks {
		if !strings.HasPrefix(lines[c.key], c.want) {
			t.Errorf("%s: %q, want %q", c.key, lines[c.key], c.want)
		}
	}
	if lines["LEAK"] != "" {
		t.Errorf("the workload %s", lines["LEAK"])
	}
	// init, the shells and the pipeline: not the host's hundreds.
	if n, err := strconv.Atoi(strings.TrimSuffix(lines["procs"], ";")); err != nil || n > 6 {
		t.Errorf("the workload sees %q processes", lines["procs"])
	}
	if !strings.Contains(out, "done") {
		t.Fatalf("output %q", out)
	}
}

// TestLimits checks the cgroup limits on the host and that the kernel
// enforces them inside.
func TestLimits(t *testing.T) {
	rt := newRuntime(t)
	id := newID(t)
	if err := rt.Start(t.Context(), runtime.Spec{InstanceID: id, CPUMilli: 1500, MemoryMiB: 64, PidsLimit: 20,
		Command: sh("echo ready; sleep 30"), Grace: grace}); err != nil {
		t.Fatal(err)
	}
	waitLog(t, rt, id, "ready")
	cg := rt.insts[id].cgroup
	v2 := false
	if _, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers")); err == nil {
		v2 = true
	}
	files := map[string]string{
		filepath.Join("memory", cg, "memory.limit_in_bytes"): strconv.Itoa(64 << 20),
		filepath.Join("cpu", cg, "cpu.cfs_quota_us"):         "150000",
		filepath.Join("cpu", cg, "cpu.cfs_period_us"):        "100000",
		filepath.Join("pids", cg, "pids.max"):                "20",
	}
	if v2 {
		files = map[string]string{
			filepath.Join(cg, "memory.max"): strconv.Itoa(64 << 20), filepath.Join(cg, "cpu.max"): "150000 100000",
			filepath.Join(cg, "pids.max"): "20",
		}
	}
	for f, want := range files {
		b, err := os.ReadFile(filepath.Join(cgroupRoot, f))
		if err != nil || strings.TrimSpace(string(b)) != want {
			t.Errorf("%s: %q (%v), want %q", f, b, err, want)
		}
	}
	res, ok := rt.Resources(id)
	if !ok || res.MemoryBytes == 0 {
		t.Errorf("resources %+v, %v", res, ok)
	}
	if err := rt.Stop(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if _, ok := rt.Resources(id); ok {
		t.Error("resources of an exited workload")
	}

	tests := []struct {
		desc   string
		spec   runtime.Spec
		script string
		check  func(runtime.Status, string) bool
	}{
		{desc: "memory beyond the limit is OOM-killed", spec: runtime.Spec{MemoryMiB: 32},
			// dd holds a block of bs bytes in memory.
			script: "dd if=/dev/zero of=/dev/null bs=100M count=1 && echo survived",
			check: func(st runtime.Status, out string) bool {
				return !strings.Contains(out, "survived") || st.ExitCode != 0
			}},
		{desc: "forks beyond the pids limit fail", spec: runtime.Spec{PidsLimit: 8},
			script: "i=0; while [ $i -lt 20 ]; do sleep 5 & i=$((i+1)); done 2>&1; echo spawned",
			check:  func(st runtime.Status, out string) bool { return strings.Contains(out, "can't fork") }},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			s := tt.spec
			s.InstanceID, s.Command, s.Grace = newID(t), sh(tt.script), grace
			st, out := run(t, rt, s)
			if !tt.check(st, out) {
				t.Fatalf("status %+v, output %q", st, out)
			}
		})
	}
}

// TestDevices checks the device cgroup against the simulated host's fake
// nodes: a node the instance was given opens with ENXIO (allowed, no
// driver behind it), any other with EPERM, even when present.
func TestDevices(t *testing.T) {
	rt := newRuntime(t)
	ctx := t.Context()
	if err := env.host.SetMIGMode(ctx, 2, true); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.host.SetMIGMode(context.Background(), 2, false) }()
	if _, err := env.host.CreateMIG(ctx, 2, 9, 4); err != nil { // 3g.40gb at slot 4
		t.Fatal(err)
	}
	defer func() { _ = env.host.DestroyMIG(context.Background(), 2, 4) }()
	gi, ci, err := env.host.MIGIDs(ctx, 2, 4)
	if err != nil {
		t.Fatal(err)
	}
	mine := "/dev/nvidia-caps/nvidia-cap" + strconv.Itoa(sim.MIGCapMinor(2, gi, -1))
	mineCI := "/dev/nvidia-caps/nvidia-cap" + strconv.Itoa(sim.MIGCapMinor(2, gi, ci))
	open := func(p string) string {
		return fmt.Sprintf("(: < %s) 2>&1 | sed 's/^/%s: /'; ", p, strings.ReplaceAll(p, "/", "_"))
	}
	tests := []struct {
		desc  string
		spec  runtime.Spec
		probe []string
		want  map[string]string
	}{
		{desc: "whole GPU 1", spec: runtime.Spec{GPUIndexes: []int{1}},
			probe: []string{"/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia0", "/testdev/nvidia0"},
			want: map[string]string{
				"/dev/nvidia1": "No such device or address", "/dev/nvidiactl": "No such device or address",
				"/dev/nvidia-uvm": "No such device or address", "/dev/nvidia-uvm-tools": "No such device or address",
				"/dev/nvidia0": "o such file", "/testdev/nvidia0": "Operation not permitted",
			}},
		{desc: "MIG slice on GPU 2", spec: runtime.Spec{MIG: []runtime.MIGDevice{{GPU: 2, GI: gi, CI: ci}}},
			probe: []string{"/dev/nvidia2", mine, mineCI, "/testdev/nvidia-cap", "/testdev/nvidia0"},
			want: map[string]string{
				"/dev/nvidia2": "No such device or address", mine: "No such device or address", mineCI: "No such device or address",
				"/testdev/nvidia-cap": "Operation not permitted", "/testdev/nvidia0": "Operation not permitted",
			}},
		{desc: "CPU only", spec: runtime.Spec{},
			probe: []string{"/dev/nvidiactl", "/testdev/nvidia0"},
			want:  map[string]string{"/dev/nvidiactl": "o such file", "/testdev/nvidia0": "Operation not permitted"}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			s := tt.spec
			var script strings.Builder
			for _, p := range tt.probe {
				script.WriteString(open(p))
			}
			s.InstanceID, s.Command = newID(t), sh(script.String())
			_, out := run(t, rt, s)
			for p, want := range tt.want {
				prefix := strings.ReplaceAll(p, "/", "_") + ": "
				line := ""
				for _, l := range strings.Split(out, "\n") {
					if strings.HasPrefix(l, prefix) {
						line = l
					}
				}
				if !strings.Contains(line, want) {
					t.Errorf("opening %s: %q, want %q (output %q)", p, line, want, out)
				}
			}
		})
	}
}

// TestAdopt checks that a new runtime (an agent restart) finds the
// containers of the old one, running and exited.
func TestAdopt(t *testing.T) {
	old := newRuntime(t)
	running, exited := newID(t), newID(t)
	if err := old.Start(t.Context(), runtime.Spec{InstanceID: running, Command: sh("echo ready; sleep 30"), Grace: grace}); err != nil {
		t.Fatal(err)
	}
	if st, _ := run(t, old, runtime.Spec{InstanceID: exited, Command: sh("exit 5")}); st.ExitCode != 5 {
		t.Fatalf("exit %d", st.ExitCode)
	}
	waitLog(t, old, running, "ready")
	// The old runtime goes away without stopping anything.
	old.mu.Lock()
	old.insts = map[string]*inst{}
	old.mu.Unlock()
	_ = old.Close()
	rt := newRuntime(t)
	if st, err := rt.Status(running); err != nil || st.State != runtime.StateRunning {
		t.Fatalf("adopted running instance: %+v, %v", st, err)
	}
	if st, err := rt.Status(exited); err != nil || st.State != runtime.StateExited || st.ExitCode != 5 {
		t.Fatalf("adopted exited instance: %+v, %v", st, err)
	}
	if out := logs(t, rt, running); out != "ready\n" {
		t.Fatalf("adopted output %q", out)
	}
	if err := rt.Stop(t.Context(), running); err != nil {
		t.Fatal(err)
	}
	if st, _ := rt.Status(running); st.Signal != "SIGTERM" {
		t.Fatalf("stopped adopted instance: %+v", st)
	}
}

func TestNewErrors(t *testing.T) {
	need(t)
	tests := []struct {
		desc string
		cfg  Config
		want string
	}{
		{desc: "no containerd at the socket", cfg: Config{Socket: filepath.Join(t.TempDir(), "none.sock"), BaseDir: t.TempDir()}, want: "containerd is not reachable at"},
		{desc: "bad user", cfg: Config{Socket: env.daemon.Socket(), BaseDir: t.TempDir(), User: "nobody"}, want: "want uid:gid"},
		{desc: "dynamic init", cfg: Config{Socket: env.daemon.Socket(), BaseDir: t.TempDir(), Init: "/usr/bin/tini"}, want: "not statically linked"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			_, err := New(t.Context(), tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want %q", err, tt.want)
			}
		})
	}
}
