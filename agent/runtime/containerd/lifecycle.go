package containerd

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"

	"github.com/gpucloud/gpucloud/agent/runtime"
)

// A workload after its start: its exit, Stop's escalation, and the
// calls that read or forget it.

// reap waits for the container's init to exit, deletes the task (runc's
// container: nothing of it runs after this) and records the exit.
func (r *Runtime) reap(in *inst, exitC <-chan client.ExitStatus) {
	var es client.ExitStatus
	select {
	case es = <-exitC:
	case <-r.bg.Done():
		return // the runtime is closed; a new one adopts the container
	}
	code, exitedAt, err := es.Result()
	if err != nil {
		r.cfg.Log.Warn("containerd runtime: exit status", "instance", in.id, "err", err)
	}
	r.finish(in, int(code), exitedAt)
}

// finish deletes the exited task, releases what the instance held, and
// records its exit.
func (r *Runtime) finish(in *inst, code int, exitedAt time.Time) {
	if exitedAt.IsZero() {
		exitedAt = time.Now()
	}
	if in.task != nil {
		ctx, cancel := context.WithTimeout(r.bg, 30*time.Second)
		// The exit is kept on the container, for a runtime that adopts
		// it after the task is gone.
		if _, err := in.ctr.SetLabels(ctx, map[string]string{
			labelExit: strconv.Itoa(code), labelExited: exitedAt.UTC().Format(time.RFC3339Nano),
		}); err != nil {
			r.cfg.Log.Warn("containerd runtime: record the exit", "instance", in.id, "err", err)
		}
		if _, err := in.task.Delete(ctx, client.WithProcessKill); err != nil && !errdefs.IsNotFound(err) {
			r.cfg.Log.Warn("containerd runtime: delete task", "instance", in.id, "err", err)
		}
		cancel()
	}
	r.mu.Lock()
	meta := in.meta
	in.meta, in.metaOff = nil, true
	r.mu.Unlock()
	if meta != nil {
		meta.Close()
	}
	r.stopDNS(in)
	r.teardownNetwork(in)
	r.releaseMPS(in)
	// Nothing reads an exited container's root: its image goes now, so
	// that a host whose containers are all stopped holds no mounts of
	// theirs (gpucloud up after Ctrl-C). Remove tries again.
	if err := r.releaseRoot(in.id, ""); err != nil {
		r.cfg.Log.Warn("containerd runtime: root filesystem of an exited container", "instance", in.id, "err", err)
	}
	r.mu.Lock()
	in.status.State = runtime.StateExited
	in.status.ExitCode, in.status.Signal = code, signalOf(code)
	in.status.ExitedAt = exitedAt
	r.mu.Unlock()
	close(in.done)
}

// running returns the IDs of the instances whose workload runs.
func (r *Runtime) running() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ids []string
	for id, in := range r.insts {
		if in.status.State == runtime.StateRunning {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// signalOf names the signal of an exit code above 128: the shim reports a
// workload killed by signal N as 128+N, as shells do. A workload that
// exits with such a code by itself reads the same.
func signalOf(code int) string {
	if code <= 128 || code > 128+64 {
		return ""
	}
	return signalName(syscall.Signal(code - 128))
}

var signalNames = map[syscall.Signal]string{
	syscall.SIGHUP: "SIGHUP", syscall.SIGINT: "SIGINT", syscall.SIGQUIT: "SIGQUIT",
	syscall.SIGILL: "SIGILL", syscall.SIGTRAP: "SIGTRAP", syscall.SIGABRT: "SIGABRT",
	syscall.SIGBUS: "SIGBUS", syscall.SIGFPE: "SIGFPE", syscall.SIGKILL: "SIGKILL",
	syscall.SIGUSR1: "SIGUSR1", syscall.SIGSEGV: "SIGSEGV", syscall.SIGUSR2: "SIGUSR2",
	syscall.SIGPIPE: "SIGPIPE", syscall.SIGALRM: "SIGALRM", syscall.SIGTERM: "SIGTERM",
	syscall.SIGXCPU: "SIGXCPU", syscall.SIGXFSZ: "SIGXFSZ",
}

func signalName(s syscall.Signal) string {
	if n, ok := signalNames[s]; ok {
		return n
	}
	return "SIG" + strconv.Itoa(int(s))
}

// ImageTime is how long workload id's image took to be ready on its
// start (runtime.ImageTimer): found in containerd's content store, or
// pulled.
func (r *Runtime) ImageTime(id string) (time.Duration, bool) {
	in, err := r.lookup(id)
	if err != nil || in.imageTook <= 0 {
		return 0, false
	}
	return in.imageTook, true
}

func (r *Runtime) lookup(id string) (*inst, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	in := r.insts[id]
	if in == nil {
		return nil, fmt.Errorf("instance %s: %w", id, runtime.ErrNotFound)
	}
	return in, nil
}

// Stop implements runtime.Runtime: SIGTERM to the container's init, which
// passes it to the workload's process group (to every process of the
// container without an init), then SIGKILL to every process of the
// container after the grace period. It returns once the task is deleted:
// no process of the instance is left.
func (r *Runtime) Stop(ctx context.Context, id string) error {
	in, err := r.lookup(id)
	if err != nil {
		return err
	}
	in.stop.Do(func() { go r.terminate(in) })
	select {
	case <-in.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stop %s: %w", id, ctx.Err())
	}
}

// terminate is the escalation of one Stop.
func (r *Runtime) terminate(in *inst) {
	select {
	case <-in.done:
		return
	default:
	}
	// A paused container (a warm pool's) is thawed first: a frozen
	// workload would not see its SIGTERM.
	if err := r.Resume(r.bg, in.id); err != nil && !errors.Is(err, runtime.ErrNotFound) {
		r.cfg.Log.Warn("containerd runtime: resume before stop", "instance", in.id, "err", err)
	}
	var opts []client.KillOpts
	if r.init == "" {
		opts = append(opts, client.WithKillAll)
	}
	if err := in.task.Kill(r.bg, syscall.SIGTERM, opts...); err != nil && !errdefs.IsNotFound(err) {
		r.cfg.Log.Warn("containerd runtime: SIGTERM", "instance", in.id, "err", err)
	}
	t := time.NewTimer(in.grace)
	defer t.Stop()
	select {
	case <-in.done:
		return
	case <-r.bg.Done():
		return
	case <-t.C:
	}
	// Killing init ends the PID namespace, and with it every process in
	// it; WithKillAll also reaches any that a shared namespace would keep.
	for attempt := 0; attempt < 5; attempt++ {
		err := in.task.Kill(r.bg, syscall.SIGKILL, client.WithKillAll)
		if err == nil || errdefs.IsNotFound(err) {
			return
		}
		r.cfg.Log.Warn("containerd runtime: SIGKILL", "instance", in.id, "err", err)
		select {
		case <-in.done:
			return
		case <-time.After(time.Second):
		}
	}
}

// Kind is runtime.KindContainerd.
func (r *Runtime) Kind() string { return runtime.KindContainerd }

// Status implements runtime.Runtime.
func (r *Runtime) Status(id string) (runtime.Status, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	in := r.insts[id]
	if in == nil {
		return runtime.Status{}, fmt.Errorf("instance %s: %w", id, runtime.ErrNotFound)
	}
	return in.status, nil
}

// Wait implements runtime.Runtime.
func (r *Runtime) Wait(ctx context.Context, id string) (runtime.Status, error) {
	in, err := r.lookup(id)
	if err != nil {
		return runtime.Status{}, err
	}
	select {
	case <-in.done:
		return r.Status(id)
	case <-ctx.Done():
		return runtime.Status{}, fmt.Errorf("wait %s: %w", id, ctx.Err())
	}
}

// Logs implements runtime.Runtime.
func (r *Runtime) Logs(id string, offset int64) ([]byte, int64, error) {
	in, err := r.lookup(id)
	if err != nil {
		return nil, 0, err
	}
	if offset < 0 {
		return nil, 0, fmt.Errorf("logs %s: negative offset %d: %w", id, offset, runtime.ErrInvalid)
	}
	// The log may be rotated (logwriter.go): offsets count all the
	// output the workload wrote.
	data, next, err := runtime.ReadLogFile(in.logPath, offset)
	if err != nil {
		return nil, 0, fmt.Errorf("logs %s: %w", id, err)
	}
	return data, next, nil
}

// Remove implements runtime.Runtime: it deletes the exited container and
// its root filesystem, keeping the log, working directory and volumes.
func (r *Runtime) Remove(id string) error {
	r.mu.Lock()
	in := r.insts[id]
	if in == nil {
		r.mu.Unlock()
		return fmt.Errorf("instance %s: %w", id, runtime.ErrNotFound)
	}
	if in.status.State != runtime.StateExited {
		r.mu.Unlock()
		return fmt.Errorf("remove %s: %w", id, runtime.ErrRunning)
	}
	delete(r.insts, id)
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(r.bg, 30*time.Second)
	defer cancel()
	if err := r.releaseRoot(id, ""); err != nil {
		// Known again, so that the agent's next Remove tries again.
		r.mu.Lock()
		r.insts[id] = in
		r.mu.Unlock()
		return fmt.Errorf("remove %s: %w", id, err)
	}
	if err := in.ctr.Delete(ctx, client.WithSnapshotCleanup); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("remove %s: %w", id, err)
	}
	if in.ownUID {
		r.uids.release(in.uid, id)
	}
	return nil
}

// StopAll stops every workload the runtime knows and waits for them, up
// to ctx; a host process that exits (`gpucloud up` on Ctrl-C) calls it.
func (r *Runtime) StopAll(ctx context.Context) error {
	r.mu.Lock()
	ids := slices.Sorted(maps.Keys(r.insts))
	r.mu.Unlock()
	errs := make(chan error, len(ids))
	for _, id := range ids {
		go func() { errs <- r.Stop(ctx, id) }()
	}
	var all []error
	for range ids {
		if err := <-errs; err != nil && !errors.Is(err, runtime.ErrNotFound) {
			all = append(all, err)
		}
	}
	return errors.Join(all...)
}
