package containerd

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agent/runtime"
)

// fakeMPSControl is a stand-in for nvidia-cuda-mps-control: it records
// each call (with the environment the daemon gets) in calls, and with -d
// leaves a background process behind, as the daemon does, with its PID in
// the pipe directory's pid file; "quit" on its input kills that process.
const fakeMPSControl = `#!/bin/sh
calls=%q
if [ "$1" = "-d" ]; then
	echo "start visible=$CUDA_VISIBLE_DEVICES pipe=$CUDA_MPS_PIPE_DIRECTORY log=$CUDA_MPS_LOG_DIRECTORY" >> "$calls"
	[ -d "$CUDA_MPS_PIPE_DIRECTORY" ] && [ -d "$CUDA_MPS_LOG_DIRECTORY" ] || { echo "no directories" >&2; exit 1; }
	# What the daemon writes in its /dev/shm (the GPU's shm directory
	# when the manager gives it one).
	echo daemon > /dev/shm/gpucloud-mps-test-$$ 2>/dev/null && echo "$$" > "$CUDA_MPS_PIPE_DIRECTORY/shm-marker"
	sleep 600 </dev/null >/dev/null 2>&1 &
	echo $! > "$CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid"
	exit 0
fi
read cmd
echo "$cmd visible=$CUDA_VISIBLE_DEVICES pipe=$CUDA_MPS_PIPE_DIRECTORY" >> "$calls"
if [ "$cmd" = quit ]; then
	kill "$(cat "$CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid")"
fi
`

// mpsFixture is a manager with the fake control program.
type mpsFixture struct {
	dir, control, calls string
}

func newMPSFixture(t *testing.T) *mpsFixture {
	t.Helper()
	tmp := t.TempDir()
	f := &mpsFixture{control: filepath.Join(tmp, "nvidia-cuda-mps-control"), calls: filepath.Join(tmp, "calls")}
	if err := os.WriteFile(f.control, []byte(fmt.Sprintf(fakeMPSControl, f.calls)), 0o755); err != nil {
		t.Fatal(err)
	}
	// Short: the daemon's unix sockets live in it.
	var err error
	if f.dir, err = os.MkdirTemp("", "mps"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Kill what a failed test left running.
		m := f.manager()
		if ents, err := os.ReadDir(f.dir); err == nil {
			for _, e := range ents {
				if pid, ok := m.daemonPID(e.Name()); ok {
					p, _ := os.FindProcess(pid)
					_ = p.Kill()
				}
			}
		}
		os.RemoveAll(f.dir)
	})
	return f
}

func (f *mpsFixture) manager() *mpsManager {
	m := newMPSManager(f.control, f.dir, os.Getuid(), os.Getgid(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	// The daemon's own /dev/shm needs root (unshare, mount); CI runs as
	// root, so the tests cover it there.
	m.shm = os.Geteuid() == 0
	return m
}

// log returns the recorded calls.
func (f *mpsFixture) log(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(f.calls)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

func (f *mpsFixture) started(gpu string) string {
	return fmt.Sprintf("start visible=%s pipe=%s log=%s", gpu, filepath.Join(f.dir, gpu, "pipe"), filepath.Join(f.dir, gpu, "log"))
}

func (f *mpsFixture) quit(gpu string) string {
	return fmt.Sprintf("quit visible=%s pipe=%s", gpu, filepath.Join(f.dir, gpu, "pipe"))
}

func TestMPSManager(t *testing.T) {
	type step struct {
		acquire, release bool
		// restart replaces the manager by a new one (an agent restart)
		// that adopts the running instances in clients and reconciles.
		restart bool
		clients map[string][]string
		gpu, id string
	}
	acq := func(gpu, id string) step { return step{acquire: true, gpu: gpu, id: id} }
	rel := func(gpu, id string) step { return step{release: true, gpu: gpu, id: id} }
	restart := func(clients map[string][]string) step { return step{restart: true, clients: clients} }
	tests := []struct {
		desc  string
		steps []step
		// running are the GPUs whose daemon runs at the end.
		running []string
		// calls are the calls of the control program, by a function of
		// the fixture.
		calls func(f *mpsFixture) []string
	}{
		{desc: "two shares on one GPU start one daemon",
			steps:   []step{acq("GPU-a", "i-1"), acq("GPU-a", "i-2"), acq("GPU-a", "i-2")},
			running: []string{"GPU-a"},
			calls:   func(f *mpsFixture) []string { return []string{f.started("GPU-a")} }},
		{desc: "shares on two GPUs start two daemons",
			steps:   []step{acq("GPU-a", "i-1"), acq("GPU-b", "i-2")},
			running: []string{"GPU-a", "GPU-b"},
			calls:   func(f *mpsFixture) []string { return []string{f.started("GPU-a"), f.started("GPU-b")} }},
		{desc: "stopping one of two shares keeps the daemon",
			steps:   []step{acq("GPU-a", "i-1"), acq("GPU-a", "i-2"), rel("GPU-a", "i-1")},
			running: []string{"GPU-a"},
			calls:   func(f *mpsFixture) []string { return []string{f.started("GPU-a")} }},
		{desc: "stopping the last share quits the daemon",
			steps: []step{acq("GPU-a", "i-1"), acq("GPU-a", "i-2"), rel("GPU-a", "i-1"), rel("GPU-a", "i-2"), rel("GPU-a", "i-2")},
			calls: func(f *mpsFixture) []string { return []string{f.started("GPU-a"), f.quit("GPU-a")} }},
		{desc: "releasing an instance that is no client changes nothing",
			steps:   []step{acq("GPU-a", "i-1"), rel("GPU-a", "i-9"), rel("GPU-b", "i-1")},
			running: []string{"GPU-a"},
			calls:   func(f *mpsFixture) []string { return []string{f.started("GPU-a")} }},
		{desc: "a share after the daemon quit starts a new one",
			steps:   []step{acq("GPU-a", "i-1"), rel("GPU-a", "i-1"), acq("GPU-a", "i-2")},
			running: []string{"GPU-a"},
			calls: func(f *mpsFixture) []string {
				return []string{f.started("GPU-a"), f.quit("GPU-a"), f.started("GPU-a")}
			}},
		{desc: "a restarted agent adopts the running daemon and starts no second one",
			steps: []step{acq("GPU-a", "i-1"), restart(map[string][]string{"GPU-a": {"i-1"}}),
				acq("GPU-a", "i-2"), rel("GPU-a", "i-1")},
			running: []string{"GPU-a"},
			calls:   func(f *mpsFixture) []string { return []string{f.started("GPU-a")} }},
		{desc: "a restarted agent quits its adopted daemon with the last share",
			steps: []step{acq("GPU-a", "i-1"), restart(map[string][]string{"GPU-a": {"i-1"}}), rel("GPU-a", "i-1")},
			calls: func(f *mpsFixture) []string { return []string{f.started("GPU-a"), f.quit("GPU-a")} }},
		{desc: "a restarted agent quits the daemons of shares that exited meanwhile",
			steps:   []step{acq("GPU-a", "i-1"), acq("GPU-b", "i-2"), restart(map[string][]string{"GPU-b": {"i-2"}})},
			running: []string{"GPU-b"},
			calls: func(f *mpsFixture) []string {
				return []string{f.started("GPU-a"), f.started("GPU-b"), f.quit("GPU-a")}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			f := newMPSFixture(t)
			m := f.manager()
			for _, s := range tt.steps {
				switch {
				case s.acquire:
					pipe, shm, err := m.acquire(t.Context(), s.gpu, s.id)
					if err != nil {
						t.Fatal(err)
					}
					if want := filepath.Join(f.dir, s.gpu, "pipe"); pipe != want {
						t.Fatalf("pipe directory %s, want %s", pipe, want)
					}
					if want := filepath.Join(f.dir, s.gpu, "shm"); shm != want {
						t.Fatalf("shm directory %q, want %s", shm, want)
					}
				case s.release:
					if err := m.release(s.gpu, s.id); err != nil {
						t.Fatal(err)
					}
				case s.restart:
					m = f.manager()
					for gpu, ids := range s.clients {
						for _, id := range ids {
							m.adoptClient(gpu, id)
						}
					}
					if err := m.reconcile(); err != nil {
						t.Fatal(err)
					}
				}
			}
			if got, want := f.log(t), tt.calls(f); !slices.Equal(got, want) {
				t.Fatalf("calls of the control program\n got %q\nwant %q", got, want)
			}
			for _, gpu := range []string{"GPU-a", "GPU-b"} {
				want := slices.Contains(tt.running, gpu)
				if got := m.running(gpu); got != want {
					t.Errorf("daemon of %s running: %v, want %v", gpu, got, want)
				}
				if _, err := os.Stat(filepath.Join(f.dir, gpu)); want != (err == nil) {
					t.Errorf("directory of %s: %v, want it there: %v", gpu, err, want)
				}
			}
		})
	}
}

// The directories: the pipe directory is the workloads' user's, whose MPS
// server makes its sockets there; the log directory root's; those above
// let the server through and nothing more.
func TestMPSDirectories(t *testing.T) {
	f := newMPSFixture(t)
	m := f.manager()
	if _, _, err := m.acquire(t.Context(), "GPU-a", "i-1"); err != nil {
		t.Fatal(err)
	}
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{
		{f.dir, 0o711}, {filepath.Join(f.dir, "GPU-a"), 0o711},
		{filepath.Join(f.dir, "GPU-a", "pipe"), 0o700}, {filepath.Join(f.dir, "GPU-a", "log"), 0o700},
		{filepath.Join(f.dir, "GPU-a", "shm"), 0o700},
	} {
		fi, err := os.Stat(d.path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != d.mode {
			t.Errorf("%s: mode %v, want %v", d.path, fi.Mode().Perm(), d.mode)
		}
	}
	if err := m.release("GPU-a", "i-1"); err != nil {
		t.Fatal(err)
	}
}

func TestMPSErrors(t *testing.T) {
	tests := []struct {
		desc    string
		control func(f *mpsFixture) string
		gpu     string
		dir     func(f *mpsFixture) string
		want    error
		wantMsg string
	}{
		{desc: "missing program names the package", control: func(*mpsFixture) string { return "/nonexistent/nvidia-cuda-mps-control" },
			gpu: "GPU-a", want: ErrMPSUnavailable, wantMsg: "nvidia-utils"},
		{desc: "program not in PATH", control: func(*mpsFixture) string { return "" },
			gpu: "GPU-a", want: ErrMPSUnavailable, wantMsg: "nvidia-cuda-mps-control is not installed"},
		{desc: "daemon that fails", control: func(f *mpsFixture) string {
			p := filepath.Join(filepath.Dir(f.calls), "failing")
			_ = os.WriteFile(p, []byte("#!/bin/sh\necho cannot start >&2\nexit 3\n"), 0o755)
			return p
		}, gpu: "GPU-a", want: ErrMPSUnavailable, wantMsg: "cannot start"},
		{desc: "pipe directory too long for a socket", control: func(f *mpsFixture) string { return f.control },
			gpu: "GPU-a", dir: func(f *mpsFixture) string { return filepath.Join(f.dir, strings.Repeat("x", 100)) },
			want: ErrMPSUnavailable, wantMsg: "too long"},
		{desc: "GPU that is no directory name", control: func(f *mpsFixture) string { return f.control },
			gpu: "../x", want: runtime.ErrInvalid, wantMsg: "not a GPU UUID"},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			t.Setenv("PATH", t.TempDir())
			f := newMPSFixture(t)
			m := f.manager()
			m.control = tt.control(f)
			if tt.dir != nil {
				m.dir = tt.dir(f)
			}
			_, _, err := m.acquire(t.Context(), tt.gpu, "i-1")
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("acquire = %v, want %v mentioning %q", err, tt.want, tt.wantMsg)
			}
			if len(m.clients()) != 0 {
				t.Fatalf("a failed start left clients: %v", m.clients())
			}
			if ents, _ := os.ReadDir(f.dir); len(ents) != 0 {
				t.Fatalf("a failed start left %d directories", len(ents))
			}
		})
	}
}

// A daemon that ignores quit is killed, so that its directories go.
func TestMPSQuitIgnored(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the quit timeout")
	}
	f := newMPSFixture(t)
	m := f.manager()
	if _, _, err := m.acquire(t.Context(), "GPU-a", "i-1"); err != nil {
		t.Fatal(err)
	}
	stubborn := filepath.Join(filepath.Dir(f.calls), "stubborn")
	if err := os.WriteFile(stubborn, []byte("#!/bin/sh\ncat >/dev/null\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	m.control = stubborn
	start := time.Now()
	err := m.release("GPU-a", "i-1")
	if err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("release = %v, want the daemon killed", err)
	}
	if m.running("GPU-a") || time.Since(start) > 2*mpsTimeout {
		t.Fatalf("daemon running %v after %s", m.running("GPU-a"), time.Since(start))
	}
}

// TestMPSContainer runs GPU shares on the sim host with the MPS daemons on
// (the fake control program): the container sees CUDA_MPS_PIPE_DIRECTORY
// and the daemon's pipe directory mounted there, two shares of a GPU share
// one daemon, and it quits with the last of them.
func TestMPSContainer(t *testing.T) {
	need(t)
	f := newMPSFixture(t)
	mpsOn := func(c *Config) { c.MPS, c.MPSControl, c.MPSDir = MPSOn, f.control, f.dir }
	// The first runtime is closed by hand, as an agent that exits: the
	// second adopts its containers and removes them.
	cfg := Config{
		Socket: env.daemon.Socket(), Namespace: env.ns, BaseDir: t.TempDir(),
		DefaultImage: testImage, NoPull: true, DevDir: env.devDir,
	}
	mpsOn(&cfg)
	rt, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	const gpu = "GPU-sim-2"
	pipe := filepath.Join(f.dir, gpu, "pipe")
	share := func(t *testing.T, script string) runtime.Spec {
		return runtime.Spec{InstanceID: newID(t), Command: sh(script), Devices: []string{gpu}, GPUIndexes: []int{2},
			ShareMilli: 500, ShareMemoryMiB: 1024, Grace: grace}
	}
	long := share(t, "echo ready; exec sleep 600")
	if err := rt.Start(t.Context(), long); err != nil {
		t.Fatal(err)
	}
	waitLog(t, rt, long.InstanceID, "ready")
	probe := share(t, `echo "pipe=$CUDA_MPS_PIPE_DIRECTORY threads=$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE mem=$CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"; `+
		`test -f "$CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid" && echo mounted; touch "$CUDA_MPS_PIPE_DIRECTORY/client" && echo writable; `+
		`ls /dev/shm | grep -q gpucloud-mps-test- && echo "shared shm"; touch /dev/shm/from-client && echo "shm writable"`)
	st, out := run(t, rt, probe)
	if st.ExitCode != 0 {
		t.Fatalf("probe exited %d: %q", st.ExitCode, out)
	}
	for _, want := range []string{"pipe=" + pipe + " threads=50 mem=0=1024M", "mounted", "writable", "shared shm", "shm writable"} {
		if !strings.Contains(out, want) {
			t.Errorf("output %q lacks %q", out, want)
		}
	}
	if _, err := os.Stat(filepath.Join(f.dir, gpu, "shm", "from-client")); err != nil {
		t.Errorf("the client's /dev/shm is not the daemon's: %v", err)
	}
	if got, want := f.log(t), []string{f.started(gpu)}; !slices.Equal(got, want) {
		t.Fatalf("with two shares: calls %q, want %q", got, want)
	}
	// A new runtime (an agent restart) adopts the running share and its
	// daemon.
	rt.Close()
	rt2 := newRuntime(t, mpsOn)
	if !rt2.mps.running(gpu) || !slices.Equal(rt2.mps.clients()[gpu], []string{long.InstanceID}) {
		t.Fatalf("after a restart: daemon running %v, clients %v", rt2.mps.running(gpu), rt2.mps.clients())
	}
	if err := rt2.Stop(t.Context(), long.InstanceID); err != nil {
		t.Fatal(err)
	}
	if got, want := f.log(t), []string{f.started(gpu), f.quit(gpu)}; !slices.Equal(got, want) {
		t.Fatalf("after the last share: calls %q, want %q", got, want)
	}
	if _, err := os.Stat(filepath.Join(f.dir, gpu)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the daemon's directories are left: %v", err)
	}
}

// On a simulated host (auto mode, DevDir not /dev) a share gets its MPS
// limits in its environment but no daemon and no pipe directory.
func TestMPSSimulatedHost(t *testing.T) {
	need(t)
	f := newMPSFixture(t)
	rt := newRuntime(t, func(c *Config) { c.MPSControl, c.MPSDir = f.control, f.dir })
	if rt.mps != nil {
		t.Fatal("a simulated host runs MPS daemons")
	}
	s := runtime.Spec{InstanceID: newID(t), Command: sh(`echo "pipe=$CUDA_MPS_PIPE_DIRECTORY threads=$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"`),
		Devices: []string{"GPU-sim-1"}, GPUIndexes: []int{1}, ShareMilli: 300, ShareMemoryMiB: 512,
		Env: map[string]string{runtime.EnvMPSPipe: "/tmp/elsewhere"}}
	_, out := run(t, rt, s)
	if !strings.Contains(out, "pipe= threads=30") {
		t.Fatalf("output %q, want no pipe directory and 30%% of the threads", out)
	}
	if calls := f.log(t); len(calls) != 0 {
		t.Fatalf("the control program ran: %q", calls)
	}
}

// TestMPSDaemonShm: the daemon runs with the GPU's shm directory as its
// /dev/shm (in a mount namespace of its own): what it writes there is in
// that directory, and nothing of it reaches the host's /dev/shm.
func TestMPSDaemonShm(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("this test must run in CI: it needs root (unshare, mount)")
		}
		t.Skip("the daemon's own /dev/shm needs root")
	}
	f := newMPSFixture(t)
	m := f.manager()
	_, shm, err := m.acquire(t.Context(), "GPU-a", "i-1")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(f.dir, "GPU-a", "pipe", "shm-marker"))
	if err != nil {
		t.Fatalf("the fake daemon could not write its /dev/shm: %v", err)
	}
	marker := "gpucloud-mps-test-" + strings.TrimSpace(string(b))
	if _, err := os.Stat(filepath.Join(shm, marker)); err != nil {
		t.Errorf("the daemon's /dev/shm is not the GPU's shm directory %s: %v", shm, err)
	}
	if _, err := os.Stat(filepath.Join("/dev/shm", marker)); !errors.Is(err, os.ErrNotExist) {
		_ = os.Remove(filepath.Join("/dev/shm", marker))
		t.Errorf("the daemon wrote the host's /dev/shm: %v", err)
	}
	if err := m.release("GPU-a", "i-1"); err != nil {
		t.Fatal(err)
	}
}
