// Package process is the runtime that runs each instance's workload as a
// plain process group on the host. It gives the workload exactly its GPUs
// through the environment (see runtime.Environ), captures its output to a
// file, and stops it with SIGTERM then SIGKILL.
//
// Isolation is the process group: Stop and exit kill every process of the
// group, so a workload cannot leave children holding its GPUs. A process
// that starts its own session or group escapes this; cgroups or containers
// are the stronger boundary and belong to another runtime.
//
// Images are not run: Start refuses a workload whose Spec names one with a
// runtime.ImageError rather than run a container's workload on the host.
//
// Device nodes are not confined either: a process sees every node of the
// host that its user may open, so Spec.ExtraDevices (the host's RDMA
// adapters) is ignored, as are the limits and GPU nodes a container
// runtime enforces.
package process

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/gpucloud/gpucloud/agent/runtime"
)

var (
	_ runtime.Runtime        = (*Runtime)(nil)
	_ runtime.UsageReader    = (*Runtime)(nil)
	_ runtime.ResourceReader = (*Runtime)(nil)
	_ runtime.Addresser      = (*Runtime)(nil)
	_ runtime.Execer         = (*Runtime)(nil)
	_ runtime.Dialer         = (*Runtime)(nil)
)

// MaxLogChunk caps the bytes one Logs call returns, so that a chatty
// workload cannot make the agent hold its whole output in memory.
const MaxLogChunk = runtime.MaxLogChunk

// Runtime runs workloads as process groups. It is safe for concurrent use.
type Runtime struct {
	base string
	// now is the clock for StartedAt and ExitedAt.
	now func() time.Time
	log *slog.Logger

	mu    sync.Mutex
	procs map[string]*proc

	// usageMu guards one reading of every group's CPU time and memory,
	// shared by the Usage and Resources calls of a short while so that n
	// instances do not read /proc n times.
	usageMu sync.Mutex
	usageAt time.Time
	usage   map[int]usage
}

// usage is what one process group uses.
type usage struct {
	cpuSeconds  float64
	memoryBytes uint64
}

// usageMaxAge is how long one reading of /proc serves Usage calls.
const usageMaxAge = 500 * time.Millisecond

// proc is one started workload.
type proc struct {
	// env and workDir are the workload's, which Exec gives its commands.
	env     []string
	workDir string
	grace   time.Duration
	logPath string
	pgid    int
	cmd     *exec.Cmd
	// done is closed once the workload has exited and its status is set.
	done chan struct{}
	// stop starts the SIGTERM/SIGKILL escalation at most once.
	stop sync.Once
	// status is guarded by Runtime.mu.
	status runtime.Status
}

// New returns a runtime that keeps each instance's default working
// directory and log under baseDir/<instance id>/.
func New(baseDir string) *Runtime {
	return &Runtime{base: baseDir, now: time.Now, log: slog.Default(), procs: map[string]*proc{}}
}

// SetLog sets where the runtime's warnings go (slog.Default() until set)
// and returns r.
func (r *Runtime) SetLog(l *slog.Logger) *Runtime {
	if l != nil {
		r.log = l
	}
	return r
}

// Start implements runtime.Runtime. The workload runs in its own process
// group with runtime.Environ's environment, stdin from /dev/null, and stdout
// and stderr appended to its log. It is not tied to ctx: ctx only bounds the
// start itself.
//
// A Spec that names an image is refused with a *runtime.ImageError: this
// runtime has no image to run the command in, and running it on the host
// instead would give a workload written for a container the host's files
// and the agent's user (root on most hosts). This happens when a cloud of
// containers is restarted on processes with its instances still assigned.
func (r *Runtime) Start(ctx context.Context, s runtime.Spec) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.Validate(); err != nil {
		return err
	}
	if s.Image != "" {
		return &runtime.ImageError{InstanceID: s.InstanceID, Image: s.Image}
	}
	if !supported {
		return fmt.Errorf("start %s: the process runtime needs a Unix host: %w", s.InstanceID, errors.ErrUnsupported)
	}
	// Holding the lock across the fork makes concurrent Starts of one
	// instance start it once; forking takes milliseconds.
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.procs[s.InstanceID] != nil {
		return nil
	}
	dir := filepath.Join(r.base, s.InstanceID)
	workDir, logPath := s.WorkDir, s.LogPath
	if workDir == "" {
		workDir = filepath.Join(dir, "work")
	}
	if logPath == "" {
		logPath = filepath.Join(dir, "output.log")
	}
	for _, d := range []string{workDir, filepath.Dir(logPath)} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return fmt.Errorf("start %s: %w", s.InstanceID, err)
		}
	}
	env := runtime.Environ(s, workDir)
	path, err := lookPath(s.Command[0], envValue(env, "PATH"), workDir)
	if err != nil {
		return fmt.Errorf("start %s: %w", s.InstanceID, err)
	}
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return fmt.Errorf("start %s: open log: %w", s.InstanceID, err)
	}
	// The child holds its own copy of the descriptor; ours is closed
	// whether or not the start worked.
	defer logf.Close()
	cmd := &exec.Cmd{
		Path: path, Args: s.Command, Env: env, Dir: workDir,
		Stdout: logf, Stderr: logf, SysProcAttr: groupAttr(),
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.InstanceID, err)
	}
	grace := s.Grace
	if grace <= 0 {
		grace = runtime.DefaultGrace
	}
	p := &proc{
		env: env, workDir: workDir,
		grace: grace, logPath: logPath, pgid: cmd.Process.Pid, cmd: cmd,
		done:   make(chan struct{}),
		status: runtime.Status{State: runtime.StateRunning, StartedAt: r.now()},
	}
	r.procs[s.InstanceID] = p
	go r.reap(p)
	return nil
}

// reap waits for the group leader, kills what is left of its group, and
// records the exit.
func (r *Runtime) reap(p *proc) {
	_ = p.cmd.Wait() // the exit is read from ProcessState below
	// Children the workload left behind would keep its GPUs busy after the
	// instance is gone, so they die with it.
	killGroup(p.pgid)
	code, sig := exitStatus(p.cmd.ProcessState)
	r.mu.Lock()
	p.status.State = runtime.StateExited
	p.status.ExitCode, p.status.Signal = code, sig
	p.status.ExitedAt = r.now()
	r.mu.Unlock()
	close(p.done)
}

func (r *Runtime) lookup(id string) (*proc, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.procs[id]
	if p == nil {
		return nil, fmt.Errorf("instance %s: %w", id, runtime.ErrNotFound)
	}
	return p, nil
}

// Stop implements runtime.Runtime.
func (r *Runtime) Stop(ctx context.Context, id string) error {
	p, err := r.lookup(id)
	if err != nil {
		return err
	}
	p.stop.Do(func() { go terminate(p) })
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stop %s: %w", id, ctx.Err())
	}
}

// terminate asks the group to exit and kills it after the grace period.
// It checks done before each signal so that a group which has already
// exited is not signalled (its ID may belong to someone else by then).
func terminate(p *proc) {
	select {
	case <-p.done:
		return
	default:
	}
	termGroup(p.pgid)
	t := time.NewTimer(p.grace)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		killGroup(p.pgid)
	}
}

// Status implements runtime.Runtime.
// Kind is runtime.KindProcess.
func (r *Runtime) Kind() string { return runtime.KindProcess }

func (r *Runtime) Status(id string) (runtime.Status, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.procs[id]
	if p == nil {
		return runtime.Status{}, fmt.Errorf("instance %s: %w", id, runtime.ErrNotFound)
	}
	return p.status, nil
}

// Wait implements runtime.Runtime.
func (r *Runtime) Wait(ctx context.Context, id string) (runtime.Status, error) {
	p, err := r.lookup(id)
	if err != nil {
		return runtime.Status{}, err
	}
	select {
	case <-p.done:
		return r.Status(id)
	case <-ctx.Done():
		return runtime.Status{}, fmt.Errorf("wait %s: %w", id, ctx.Err())
	}
}

// Logs implements runtime.Runtime.
func (r *Runtime) Logs(id string, offset int64) ([]byte, int64, error) {
	p, err := r.lookup(id)
	if err != nil {
		return nil, 0, err
	}
	if offset < 0 {
		return nil, 0, fmt.Errorf("logs %s: negative offset %d: %w", id, offset, runtime.ErrInvalid)
	}
	f, err := os.Open(p.logPath)
	if err != nil {
		return nil, 0, fmt.Errorf("logs %s: %w", id, err)
	}
	defer f.Close()
	data, next, err := runtime.ReadLog(f, offset)
	if err != nil {
		return nil, 0, fmt.Errorf("logs %s: %w", id, err)
	}
	return data, next, nil
}

// Remove implements runtime.Runtime.
func (r *Runtime) Remove(id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.procs[id]
	if p == nil {
		return fmt.Errorf("instance %s: %w", id, runtime.ErrNotFound)
	}
	if p.status.State != runtime.StateExited {
		return fmt.Errorf("remove %s: %w", id, runtime.ErrRunning)
	}
	delete(r.procs, id)
	return nil
}

// Address implements runtime.Addresser: a workload runs in the host's
// network namespace, so 127.0.0.1 reaches it from the host's other
// workloads (the single-tenant development mode runs every simulated host
// on one machine). It is false for an unknown or exited workload.
func (r *Runtime) Address(id string) (netip.Addr, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.procs[id]
	if p == nil || p.status.State != runtime.StateRunning {
		return netip.Addr{}, false
	}
	return netip.AddrFrom4([4]byte{127, 0, 0, 1}), true
}

// Usage implements runtime.UsageReader on Linux: the CPU time of the
// workload's process group, read from /proc (utime + stime of every
// process in the group, plus cutime + cstime: the time of the group's
// children that exited and were waited for). Limitations: a process that
// left the group (a new session or group) is not counted, nor one reaped
// by a process outside the group, and the sum drops when a process ends
// unwaited-for. It is false for an exited workload (its group ID may
// belong to someone else by then) and on systems without /proc.
func (r *Runtime) Usage(id string) (float64, bool) {
	u, ok := r.groupOf(id)
	return u.cpuSeconds, ok
}

// Resources implements runtime.ResourceReader on Linux. A process workload
// has no cgroup of its own (it shares the agent's), so its figures are its
// process group's, read from /proc/<pid>/stat: CPUSeconds as Usage says,
// MemoryBytes the sum of the resident sets (rss) of the group's processes,
// where pages that processes share count once per process. It is false
// when Usage is.
func (r *Runtime) Resources(id string) (runtime.Resources, bool) {
	u, ok := r.groupOf(id)
	return runtime.Resources{CPUSeconds: u.cpuSeconds, MemoryBytes: u.memoryBytes}, ok
}

// groupOf is what the process group of a running workload uses, from a
// reading of /proc at most usageMaxAge old.
func (r *Runtime) groupOf(id string) (usage, bool) {
	if !usageSupported {
		return usage{}, false
	}
	r.mu.Lock()
	p := r.procs[id]
	running := p != nil && p.status.State == runtime.StateRunning
	r.mu.Unlock()
	if !running {
		return usage{}, false
	}
	r.usageMu.Lock()
	defer r.usageMu.Unlock()
	if now := time.Now(); r.usage == nil || now.Sub(r.usageAt) > usageMaxAge || now.Before(r.usageAt) {
		r.usage, r.usageAt = groupUsage(), now
	}
	u, ok := r.usage[p.pgid]
	return u, ok
}

// lookPath finds a program in the workload's PATH rather than the agent's:
// exec.LookPath would search the agent's own PATH, which the workload does
// not have. Names with a '/' are taken relative to the working directory,
// and relative PATH entries are skipped, as a careful shell would.
//
// A program in the working directory (a relative name, or an absolute one
// under it) is looked up within it, and a symlink that leads out of it (or
// is absolute) is not followed, wherever it points: what the instance's own
// directory holds says nothing about the host's files. Other absolute
// names and PATH entries are the host's, which is what the workload of
// this single-tenant runtime runs on.
func lookPath(name, pathEnv, workDir string) (string, error) {
	if strings.Contains(name, "/") {
		p := name
		if !filepath.IsAbs(p) {
			p = filepath.Join(workDir, p)
		}
		if !executable(p, workDir) {
			where := ""
			if inDir(p, workDir) {
				hint := "a symlink out of it is not followed"
				if !filepath.IsAbs(name) {
					hint = "a relative path starts there; " + hint
				}
				where = fmt.Sprintf(" in the instance's working directory %s (%s)", workDir, hint)
			}
			return "", fmt.Errorf("program %q is not an executable file%s: %w", name, where, runtime.ErrInvalid)
		}
		return p, nil
	}
	for _, dir := range filepath.SplitList(pathEnv) {
		if !filepath.IsAbs(dir) {
			continue
		}
		if p := filepath.Join(dir, name); executable(p, workDir) {
			return p, nil
		}
	}
	return "", fmt.Errorf("program %q not found in PATH %q: %w", name, pathEnv, runtime.ErrInvalid)
}

// executable reports whether path is a regular file with an execute bit.
// A path in workDir is resolved within it (os.Root), so that a symlink out
// of it makes the answer false whatever it points at.
func executable(path, workDir string) bool {
	var fi os.FileInfo
	var err error
	if inDir(path, workDir) {
		var root *os.Root
		if root, err = os.OpenRoot(workDir); err != nil {
			return false
		}
		defer root.Close()
		rel, _ := filepath.Rel(workDir, path)
		fi, err = root.Stat(rel)
	} else {
		fi, err = os.Stat(path)
	}
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// inDir reports whether path is dir or lies under it, by name.
func inDir(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && filepath.IsLocal(rel)
}

func envValue(env []string, key string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, key+"="); ok {
			return v
		}
	}
	return ""
}

// StopAll stops every workload the runtime started (SIGTERM, then SIGKILL
// after each one's grace period) and waits for them, up to ctx. A host
// process that exits, such as `gpucloud up` on Ctrl-C, calls it so that no
// workload outlives it in its own process group.
func (r *Runtime) StopAll(ctx context.Context) error {
	r.mu.Lock()
	ids := make([]string, 0, len(r.procs))
	for id := range r.procs {
		ids = append(ids, id)
	}
	r.mu.Unlock()
	var first error
	for _, id := range ids {
		if err := r.Stop(ctx, id); err != nil && first == nil {
			first = err
		}
	}
	return first
}
