package containerd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/containerd/v2/client"
)

// Daemon is a private containerd that StartDaemon started: its own
// configuration, root, state directory and sockets under one directory,
// as k3s runs its embedded containerd. It serves anyone who can reach its
// socket (root only: the directory is 0700).
type Daemon struct {
	dir    string
	socket string
	cmd    *exec.Cmd
	done   chan struct{}
	err    error // set before done is closed
}

// DaemonConfig tunes StartDaemon; the zero value is fine.
type DaemonConfig struct {
	// Binary is containerd's path; when empty, containerd in PATH, then
	// DefaultContainerd.
	Binary string
	// Wait bounds how long StartDaemon waits for the daemon to serve
	// (20 s when zero).
	Wait time.Duration
}

// DefaultContainerd is where Debian's containerd package puts the daemon.
const DefaultContainerd = "/usr/bin/containerd"

// daemonConfig is the daemon's configuration: its own root, state and
// sockets, no CRI (gpucloud is not a Kubernetes node), runc through the v2
// shim (the client's default runtime), overlayfs (the default
// snapshotter), and none of the plugins that would write outside dir.
const daemonConfig = `version = 2
root = %q
state = %q
disabled_plugins = [
  "io.containerd.grpc.v1.cri",
  "io.containerd.internal.v1.opt",
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing",
]

[grpc]
  address = %q

[ttrpc]
  address = %q

[debug]
  address = %q
`

// StartDaemon starts a private containerd whose configuration, root
// (dir/root), state (dir/state), sockets (dir/containerd.sock and its
// ttrpc and debug siblings) and log (dir/containerd.log) all live under
// dir, and waits until it serves. It needs root, containerd, the runc v2
// shim (containerd-shim-runc-v2) and runc. The daemon runs until Close, or
// until ctx ends (which kills it). dir should be short: unix socket paths
// are limited to 107 bytes.
func StartDaemon(ctx context.Context, dir string, cfgs ...DaemonConfig) (*Daemon, error) {
	var cfg DaemonConfig
	if len(cfgs) > 0 {
		cfg = cfgs[0]
	}
	if cfg.Wait <= 0 {
		cfg.Wait = 20 * time.Second
	}
	bin := cfg.Binary
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("containerd"); err != nil {
			bin = DefaultContainerd
			if _, serr := os.Stat(bin); serr != nil {
				return nil, fmt.Errorf("containerd is not installed (Debian: apt-get install containerd runc): %w", err)
			}
		}
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("containerd: a private containerd needs root")
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	socket := filepath.Join(dir, "containerd.sock")
	if len(socket)+len(".ttrpc") > 107 {
		return nil, fmt.Errorf("containerd: directory %s is too long for a unix socket path", dir)
	}
	conf := filepath.Join(dir, "config.toml")
	body := fmt.Sprintf(daemonConfig, filepath.Join(dir, "root"), filepath.Join(dir, "state"),
		socket, socket+".ttrpc", socket+".debug")
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(filepath.Join(dir, "containerd.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the daemon holds its own copy
	// A daemon of this directory left by an earlier process that was
	// killed (SIGKILL skips its cleanup) still serves on the socket's
	// old inode and holds the state: stop it first. Its containers' shims
	// keep them running, and the new daemon's runtime adopts them.
	stopLeftDaemon(dir, conf)
	cmd := exec.Command(bin, "--config", conf)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = dir
	// The shims and runc are found in PATH; Debian puts runc in /usr/sbin,
	// which a user's PATH may lack.
	cmd.Env = append(os.Environ(), "PATH="+daemonPath(os.Getenv("PATH")))
	// Its own process group: a Ctrl-C meant for `gpucloud up` must not
	// reach the daemon before the agent has stopped its containers.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start containerd: %w", err)
	}
	_ = os.WriteFile(filepath.Join(dir, daemonPIDFile), []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o600)
	d := &Daemon{dir: dir, socket: socket, cmd: cmd, done: make(chan struct{})}
	go func() {
		d.err = cmd.Wait()
		close(d.done)
	}()
	if err := d.waitServing(ctx, cfg.Wait); err != nil {
		_ = d.Close()
		return nil, err
	}
	go func() {
		select {
		case <-ctx.Done():
			_ = d.Close()
		case <-d.done:
		}
	}()
	return d, nil
}

// daemonPIDFile names, in a daemon's directory, the file with its
// process ID.
const daemonPIDFile = "containerd.pid"

// stopLeftDaemon stops the daemon whose process ID dir's pid file holds,
// if that process is a containerd running with conf (and so not a
// recycled ID): SIGTERM, then SIGKILL after 10 s.
func stopLeftDaemon(dir, conf string) {
	b, err := os.ReadFile(filepath.Join(dir, daemonPIDFile))
	if err != nil {
		return
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return
	}
	cmdline, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil || !strings.Contains(string(cmdline), "\x00"+conf) {
		return
	}
	p, err := os.FindProcess(pid)
	if err != nil {
		return
	}
	_ = p.Signal(syscall.SIGTERM)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if p.Signal(syscall.Signal(0)) != nil {
			return
		}
	}
	_ = p.Signal(syscall.SIGKILL)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if p.Signal(syscall.Signal(0)) != nil {
			return
		}
	}
}

// daemonPath is PATH with the system directories appended.
func daemonPath(p string) string {
	have := map[string]bool{}
	for _, d := range filepath.SplitList(p) {
		have[d] = true
	}
	for _, d := range []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"} {
		if !have[d] {
			p = strings.TrimPrefix(p+":"+d, ":")
		}
	}
	return p
}

// waitServing polls the socket until the daemon answers, it exits, or the
// wait or ctx ends.
func (d *Daemon) waitServing(ctx context.Context, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for delay := 20 * time.Millisecond; ; delay = min(2*delay, 500*time.Millisecond) {
		if _, err := os.Stat(d.socket); err == nil {
			c, err := client.New(d.socket, client.WithTimeout(time.Second))
			if err == nil {
				sctx, scancel := context.WithTimeout(ctx, time.Second)
				ok, _ := c.IsServing(sctx)
				scancel()
				_ = c.Close()
				if ok {
					return nil
				}
			}
		}
		select {
		case <-d.done:
			return fmt.Errorf("containerd exited at start (%v); see %s", d.err, filepath.Join(d.dir, "containerd.log"))
		case <-ctx.Done():
			return fmt.Errorf("containerd did not serve on %s within %v; see %s", d.socket, wait, filepath.Join(d.dir, "containerd.log"))
		case <-time.After(delay):
		}
	}
}

// Socket is the daemon's gRPC socket, for Config.Socket.
func (d *Daemon) Socket() string { return d.socket }

// Dir is the directory the daemon keeps everything in.
func (d *Daemon) Dir() string { return d.dir }

// Close stops the daemon: SIGTERM, then SIGKILL after 10 s. Containers
// keep running under their shims when the daemon stops; stop them first
// (Runtime.StopAll). Close is idempotent.
func (d *Daemon) Close() error {
	select {
	case <-d.done:
		return nil
	default:
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(10 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.done
	}
	return nil
}

// String describes the daemon for logs.
func (d *Daemon) String() string {
	return "containerd (pid " + strconv.Itoa(d.cmd.Process.Pid) + ") on " + d.socket
}
