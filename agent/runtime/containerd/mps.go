package containerd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gpucloud/gpucloud/agent/runtime"
)

// CUDA MPS (Multi-Process Service) enforces a GPU share's compute share and
// memory limit on a real GPU: its clients' CUDA contexts run in one MPS
// server per GPU, which honours each client's
// CUDA_MPS_ACTIVE_THREAD_PERCENTAGE and CUDA_MPS_PINNED_DEVICE_MEM_LIMIT.
// The runtime runs one control daemon (nvidia-cuda-mps-control -d) per
// shared GPU while a share workload runs on it, with the GPU alone visible
// and a pipe directory of its own, which each of the GPU's share
// containers gets mounted at the same path and named in
// CUDA_MPS_PIPE_DIRECTORY. docs/RUNTIME.md says what MPS enforces and what
// it does not.

// MPSMode says whether the runtime runs MPS control daemons.
type MPSMode string

const (
	// MPSAuto runs them on a host with real GPUs (Config.DevDir is the
	// host's /dev) and not on a simulated host, whose fake device nodes
	// have no GPU behind them: there the MPS settings only reach the
	// container's environment.
	MPSAuto MPSMode = ""
	// MPSOn runs them whatever DevDir is (tests, with a stand-in
	// Config.MPSControl).
	MPSOn MPSMode = "on"
	// MPSOff never runs them: shares get the MPS settings in their
	// environment only, unenforced unless the operator runs a daemon.
	MPSOff MPSMode = "off"
)

// Defaults of the MPS configuration.
const (
	// DefaultMPSControl is the MPS control program, looked up in the
	// agent's PATH when Config.MPSControl is empty.
	DefaultMPSControl = "nvidia-cuda-mps-control"
	// DefaultMPSDir holds a directory per shared GPU
	// (<MPSDir>/<GPU UUID>/pipe and /log). It is on a tmpfs, as the
	// daemons do not outlive a reboot either.
	DefaultMPSDir = "/run/gpucloud/mps"
)

// ErrMPSUnavailable means a GPU share cannot start because its GPU's MPS
// control daemon cannot run: the share's limits would not be enforced,
// so it does not start at all.
var ErrMPSUnavailable = errors.New("CUDA MPS is unavailable")

const (
	// mpsPidFile is where the control daemon writes its PID, in its pipe
	// directory.
	mpsPidFile = "nvidia-cuda-mps-control.pid"
	// mpsLongestSocket is the longest name the daemon makes in its pipe
	// directory: a unix socket.
	mpsLongestSocket = "control_privileged"
	// maxSocketPath is the longest path a unix socket may have (sun_path
	// holds 108 bytes with the NUL).
	maxSocketPath = 107
	// mpsTimeout bounds a daemon's start and its quit.
	mpsTimeout = 10 * time.Second
	// envMPSLog is the daemon's log directory.
	envMPSLog = "CUDA_MPS_LOG_DIRECTORY"
)

// mpsManager runs one MPS control daemon per shared GPU, counting the
// share workloads on each. It is safe for concurrent use.
type mpsManager struct {
	// control is the configured program; empty looks DefaultMPSControl
	// up in PATH when a daemon is to start.
	control string
	// dir holds <GPU UUID>/pipe and <GPU UUID>/log.
	dir string
	// uid and gid are the workloads' user: the MPS server runs as its
	// clients' user, and makes its sockets in the pipe directory.
	uid, gid int
	log      *slog.Logger
	// shm starts each daemon in a mount namespace of its own whose
	// /dev/shm is the GPU's shm directory, which the GPU's share
	// containers mount at /dev/shm too: MPS clients and their server meet
	// there as well as in the pipe directory, as NVIDIA's container
	// deployments arrange. The scheduler keeps one GPU's shares to one
	// tenant, so the directory is never shared across tenants. It needs
	// root (unshare, mount); the manager's tests without root turn it off.
	shm bool

	mu sync.Mutex
	// users are the instances using each GPU's daemon, by GPU UUID.
	users map[string]map[string]bool
}

func newMPSManager(control, dir string, uid, gid int, log *slog.Logger) *mpsManager {
	return &mpsManager{control: control, dir: dir, uid: uid, gid: gid, log: log, shm: true, users: map[string]map[string]bool{}}
}

func (m *mpsManager) gpuDir(gpu string) string  { return filepath.Join(m.dir, gpu) }
func (m *mpsManager) pipeDir(gpu string) string { return filepath.Join(m.dir, gpu, "pipe") }
func (m *mpsManager) logDir(gpu string) string  { return filepath.Join(m.dir, gpu, "log") }
func (m *mpsManager) shmDir(gpu string) string  { return filepath.Join(m.dir, gpu, "shm") }

// checkGPU checks that a GPU UUID is safe as a directory name.
func checkGPU(gpu string) error {
	if gpu == "" || gpu[0] == '.' || strings.ContainsAny(gpu, "/\x00") {
		return fmt.Errorf("GPU %q: not a GPU UUID: %w", gpu, runtime.ErrInvalid)
	}
	return nil
}

// acquire makes sure the control daemon of a GPU runs, starting it when
// none does, and counts the instance as one of its clients. It returns
// the pipe directory the instance's container mounts at the same path,
// and the shm directory it mounts at /dev/shm ("" when the daemon has no
// shm directory of its own). It is idempotent per GPU and instance.
func (m *mpsManager) acquire(ctx context.Context, gpu, instance string) (pipe, shm string, err error) {
	if err := checkGPU(gpu); err != nil {
		return "", "", err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	pipe = m.pipeDir(gpu)
	if !m.running(gpu) {
		if err := m.start(ctx, gpu); err != nil {
			return "", "", err
		}
	}
	if m.users[gpu] == nil {
		m.users[gpu] = map[string]bool{}
	}
	m.users[gpu][instance] = true
	if fi, err := os.Stat(m.shmDir(gpu)); err == nil && fi.IsDir() {
		shm = m.shmDir(gpu)
	}
	return pipe, shm, nil
}

// release forgets an instance as a client of a GPU's daemon; once the
// last one is gone it quits the daemon and removes its directories. An
// instance that is not a client changes nothing.
func (m *mpsManager) release(gpu, instance string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	users := m.users[gpu]
	if !users[instance] {
		return nil
	}
	delete(users, instance)
	if len(users) > 0 {
		return nil
	}
	delete(m.users, gpu)
	return m.stop(gpu)
}

// adoptClient counts a running instance of an earlier runtime (an agent
// restart) as a client of its GPU's daemon, which keeps running.
func (m *mpsManager) adoptClient(gpu, instance string) {
	if checkGPU(gpu) != nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.users[gpu] == nil {
		m.users[gpu] = map[string]bool{}
	}
	m.users[gpu][instance] = true
}

// reconcile quits every daemon under the directory that no instance uses
// (its workloads exited while no agent ran), and removes its directories.
func (m *mpsManager) reconcile() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	ents, err := os.ReadDir(m.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("MPS: %w", err)
	}
	var errs []error
	for _, e := range ents {
		gpu := e.Name()
		if !e.IsDir() || checkGPU(gpu) != nil || len(m.users[gpu]) > 0 {
			continue
		}
		errs = append(errs, m.stop(gpu))
	}
	return errors.Join(errs...)
}

// clients returns the instances using each GPU's daemon.
func (m *mpsManager) clients() map[string][]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string][]string{}
	for gpu, users := range m.users {
		for id := range users {
			out[gpu] = append(out[gpu], id)
		}
		slices.Sort(out[gpu])
	}
	return out
}

// program resolves the control program.
func (m *mpsManager) program() (string, error) {
	name := m.control
	if name == "" {
		name = DefaultMPSControl
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%w: the MPS control program %s is not installed (it comes with the NVIDIA driver's utilities: "+
			"Debian's nvidia-cuda-mps, Ubuntu's nvidia-utils-<driver version>, or the CUDA toolkit; "+
			"install it, or name it with --mps-control): %v", ErrMPSUnavailable, name, err)
	}
	return p, nil
}

// daemonEnv is the environment of a GPU's daemon and of the commands sent
// to it: the GPU alone visible, its pipe and log directories, and the
// agent's PATH, along which the daemon finds nvidia-cuda-mps-server.
func (m *mpsManager) daemonEnv(gpu string) []string {
	path := os.Getenv("PATH")
	if path == "" {
		path = runtime.DefaultPath
	}
	return []string{
		"PATH=" + path,
		runtime.EnvCUDAVisible + "=" + gpu,
		runtime.EnvMPSPipe + "=" + m.pipeDir(gpu),
		envMPSLog + "=" + m.logDir(gpu),
	}
}

// running reports whether the GPU's daemon runs: its pid file names a
// live process started with the GPU's pipe directory (so that a PID
// reused by another process, or a zombie, does not count).
func (m *mpsManager) running(gpu string) bool {
	_, ok := m.daemonPID(gpu)
	return ok
}

// daemonPID returns the PID of the GPU's running daemon.
func (m *mpsManager) daemonPID(gpu string) (int, bool) {
	b, err := os.ReadFile(filepath.Join(m.pipeDir(gpu), mpsPidFile))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, false
	}
	env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return 0, false
	}
	want := []byte(runtime.EnvMPSPipe + "=" + m.pipeDir(gpu))
	for _, kv := range bytes.Split(env, []byte{0}) {
		if bytes.Equal(kv, want) {
			return pid, true
		}
	}
	return 0, false
}

// start starts the GPU's daemon in fresh directories and waits for its
// pid file.
func (m *mpsManager) start(ctx context.Context, gpu string) error {
	prog, err := m.program()
	if err != nil {
		return fmt.Errorf("GPU %s: %w", gpu, err)
	}
	pipe, logs := m.pipeDir(gpu), m.logDir(gpu)
	if n := len(filepath.Join(pipe, mpsLongestSocket)); n > maxSocketPath {
		return fmt.Errorf("%w: GPU %s: the MPS pipe directory %s is too long for its unix sockets (%d bytes, at most %d): choose a shorter MPS directory",
			ErrMPSUnavailable, gpu, pipe, n, maxSocketPath)
	}
	// What a daemon that died left (stale sockets, pid file) goes.
	if err := os.RemoveAll(m.gpuDir(gpu)); err != nil {
		return fmt.Errorf("GPU %s: MPS directories: %w", gpu, err)
	}
	// The MPS server runs as the workloads' user, on the host: it must
	// reach the pipe directory, which is its own; the directories above
	// are traversable only. The logs are the daemon's (root's).
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{{m.dir, 0o711}, {m.gpuDir(gpu), 0o711}, {pipe, 0o700}, {logs, 0o700}, {m.shmDir(gpu), 0o700}} {
		if err := os.MkdirAll(d.path, d.mode); err != nil {
			return fmt.Errorf("GPU %s: MPS directories: %w", gpu, err)
		}
		if err := os.Chmod(d.path, d.mode); err != nil {
			return fmt.Errorf("GPU %s: MPS directories: %w", gpu, err)
		}
	}
	for _, d := range []string{pipe, m.shmDir(gpu)} {
		if err := os.Chown(d, m.uid, m.gid); err != nil {
			return fmt.Errorf("GPU %s: MPS directory: %w", gpu, err)
		}
	}
	sctx, cancel := context.WithTimeout(ctx, mpsTimeout)
	defer cancel()
	cmd := exec.CommandContext(sctx, prog, "-d")
	if m.shm {
		// The daemon, and the servers it forks, see the GPU's shm
		// directory as /dev/shm, in a mount namespace of their own.
		unshare, err := systemProgram("unshare")
		mount, merr := systemProgram("mount")
		if err = errors.Join(err, merr); err != nil {
			_ = os.RemoveAll(m.gpuDir(gpu))
			return fmt.Errorf("%w: GPU %s: unshare and mount (Debian packages util-linux and mount) are needed to give the MPS daemon its own /dev/shm: %v",
				ErrMPSUnavailable, gpu, err)
		}
		cmd = exec.CommandContext(sctx, unshare, "--mount", "--propagation", "private", "--", "/bin/sh", "-c",
			`"$2" --bind "$0" /dev/shm && exec "$1" -d`, m.shmDir(gpu), prog, mount)
	}
	cmd.Env = m.daemonEnv(gpu)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// The daemon forks away; a child that keeps the output open does not
	// hold the start up.
	cmd.WaitDelay = time.Second
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Run(); err != nil && !errors.Is(err, exec.ErrWaitDelay) {
		_ = os.RemoveAll(m.gpuDir(gpu))
		return fmt.Errorf("%w: GPU %s: %s -d: %v: %s", ErrMPSUnavailable, gpu, prog, err, strings.TrimSpace(out.String()))
	}
	for !m.running(gpu) {
		select {
		case <-sctx.Done():
			_ = os.RemoveAll(m.gpuDir(gpu))
			return fmt.Errorf("%w: GPU %s: the MPS control daemon did not start within %s (its log: %s): %v",
				ErrMPSUnavailable, gpu, mpsTimeout, logs, sctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	m.log.Info("containerd runtime: MPS control daemon started", "gpu", gpu, "pipe", pipe)
	return nil
}

// systemProgram finds one of util-linux's programs (unshare, mount): in
// PATH, else where Debian puts them (an agent's service environment may
// have a short PATH).
func systemProgram(name string) (string, error) {
	p, err := exec.LookPath(name)
	if err == nil {
		return p, nil
	}
	for _, c := range []string{"/usr/bin/" + name, "/bin/" + name} {
		if fi, serr := os.Stat(c); serr == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return c, nil
		}
	}
	return "", err
}

// stop quits the GPU's daemon (echo quit | nvidia-cuda-mps-control, with
// its environment), killing it if it does not go, and removes its
// directories.
func (m *mpsManager) stop(gpu string) error {
	pid, ok := m.daemonPID(gpu)
	var err error
	if ok {
		err = m.quit(gpu, pid)
	}
	if rerr := os.RemoveAll(m.gpuDir(gpu)); rerr != nil {
		err = errors.Join(err, fmt.Errorf("GPU %s: MPS directories: %w", gpu, rerr))
	}
	if err == nil && ok {
		m.log.Info("containerd runtime: MPS control daemon stopped", "gpu", gpu)
	}
	return err
}

func (m *mpsManager) quit(gpu string, pid int) error {
	ctx, cancel := context.WithTimeout(context.Background(), mpsTimeout)
	defer cancel()
	var qerr error
	if prog, err := m.program(); err != nil {
		qerr = err
	} else {
		cmd := exec.CommandContext(ctx, prog)
		cmd.Env = m.daemonEnv(gpu)
		cmd.Stdin = strings.NewReader("quit\n")
		cmd.WaitDelay = time.Second
		if out, err := cmd.CombinedOutput(); err != nil {
			qerr = fmt.Errorf("%s quit: %v: %s", prog, err, strings.TrimSpace(string(out)))
		}
	}
	if qerr != nil {
		_ = syscall.Kill(pid, syscall.SIGTERM)
	}
	for m.running(gpu) {
		select {
		case <-ctx.Done():
			// It did not go: kill it, so that its directories can go.
			_ = syscall.Kill(pid, syscall.SIGKILL)
			return fmt.Errorf("GPU %s: the MPS control daemon (pid %d) did not quit within %s, killed: %w",
				gpu, pid, mpsTimeout, errors.Join(qerr, ctx.Err()))
		case <-time.After(20 * time.Millisecond):
		}
	}
	if qerr != nil {
		m.log.Warn("containerd runtime: MPS quit", "gpu", gpu, "err", qerr)
	}
	return nil
}
