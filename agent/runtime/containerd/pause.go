package containerd

import (
	"context"
	"errors"
	"fmt"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"

	"github.com/gpucloud/gpucloud/agent/runtime"
)

// Pause, Resume and Paused implement runtime.Pauser: containerd's task
// pause freezes every process of the container (the cgroup freezer) where
// it stands, memory kept, and resume thaws them; an endpoint's warm pool
// is made of such containers (docs/ENDPOINTS.md). A Stop of a paused
// container thaws it first, so that its workload gets its SIGTERM.

var _ runtime.Pauser = (*Runtime)(nil)

// pausableTask is the running workload's task, or ErrNotFound (unknown, exited).
func (r *Runtime) pausableTask(id string) (client.Task, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	in := r.insts[id]
	if in == nil || in.task == nil {
		return nil, fmt.Errorf("instance %s: %w", id, runtime.ErrNotFound)
	}
	select {
	case <-in.done:
		return nil, fmt.Errorf("instance %s has exited: %w", id, runtime.ErrNotFound)
	default:
	}
	return in.task, nil
}

// Pause implements runtime.Pauser.
func (r *Runtime) Pause(ctx context.Context, id string) error {
	t, err := r.pausableTask(id)
	if err != nil {
		return err
	}
	ctx = r.nsCtx(ctx)
	if st, err := t.Status(ctx); err == nil && (st.Status == client.Paused || st.Status == client.Pausing) {
		return nil
	}
	if err := t.Pause(ctx); err != nil {
		return fmt.Errorf("pause %s: %w", id, notFound(err))
	}
	return nil
}

// Resume implements runtime.Pauser.
func (r *Runtime) Resume(ctx context.Context, id string) error {
	t, err := r.pausableTask(id)
	if err != nil {
		return err
	}
	ctx = r.nsCtx(ctx)
	st, err := t.Status(ctx)
	if err != nil {
		return fmt.Errorf("resume %s: %w", id, notFound(err))
	}
	if st.Status != client.Paused && st.Status != client.Pausing {
		return nil
	}
	if err := t.Resume(ctx); err != nil {
		return fmt.Errorf("resume %s: %w", id, notFound(err))
	}
	return nil
}

// Paused implements runtime.Pauser.
func (r *Runtime) Paused(ctx context.Context, id string) (bool, error) {
	t, err := r.pausableTask(id)
	if err != nil {
		return false, err
	}
	st, err := t.Status(r.nsCtx(ctx))
	if err != nil {
		return false, fmt.Errorf("status of %s: %w", id, notFound(err))
	}
	return st.Status == client.Paused || st.Status == client.Pausing, nil
}

// notFound maps containerd's not-found to runtime.ErrNotFound.
func notFound(err error) error {
	if errdefs.IsNotFound(err) && !errors.Is(err, runtime.ErrNotFound) {
		return fmt.Errorf("%w: %w", runtime.ErrNotFound, err)
	}
	return err
}
