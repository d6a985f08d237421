package containerd

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/containerd/containerd/v2/client"

	"github.com/gpucloud/gpucloud/agent/runtime"
)

// adopt loads the containers an earlier runtime left in the namespace.
func (r *Runtime) adopt(ctx context.Context) error {
	ctx = r.nsCtx(ctx)
	ctrs, err := r.client.Containers(ctx)
	if err != nil {
		return fmt.Errorf("containerd at %s: list containers: %w", r.cfg.Socket, err)
	}
	for _, ctr := range ctrs {
		labels, err := ctr.Labels(ctx)
		if err != nil || labels[labelInstance] != ctr.ID() || labels[labelHost] != r.cfg.Host {
			continue // not one of ours, or another host's
		}
		grace, _ := time.ParseDuration(labels[labelGrace])
		started, _ := time.Parse(time.RFC3339Nano, labels[labelStarted])
		in := &inst{
			id: ctr.ID(), ctr: ctr, logPath: labels[labelLog], grace: max(grace, time.Second),
			cgroup: "/" + r.cfg.Namespace + "/" + ctr.ID(), done: make(chan struct{}),
			status: runtime.Status{State: runtime.StateRunning, StartedAt: started},
			netns:  r.cfg.Network != nil, // the earlier runtime set it up
		}
		if r.mps != nil {
			in.mpsGPU = labels[labelMPS]
		}
		r.adoptUser(in, labels[labelUID])
		r.insts[in.id] = in
		task, err := ctr.Task(ctx, nil)
		if err != nil {
			// Its task is gone: it exited, and the exit was recorded;
			// or it was created but never started (255: no status).
			code, cerr := strconv.Atoi(labels[labelExit])
			if cerr != nil {
				code = 255
				r.cfg.Log.Warn("containerd runtime: container without a task or exit status", "instance", in.id, "err", err)
			}
			exited, _ := time.Parse(time.RFC3339Nano, labels[labelExited])
			r.finish(in, code, exited)
			continue
		}
		in.task = task
		st, err := task.Status(ctx)
		if err != nil {
			return fmt.Errorf("containerd: status of %s: %w", in.id, err)
		}
		if st.Status == client.Stopped {
			r.finish(in, int(st.ExitStatus), st.ExitTime)
			continue
		}
		// The exec sessions of the agent before this one ended with it.
		r.killExecs(ctx, task)
		exitC, err := task.Wait(r.bg)
		if err != nil {
			return fmt.Errorf("containerd: wait for %s: %w", in.id, err)
		}
		if in.mpsGPU != "" {
			r.mps.adoptClient(in.mpsGPU, in.id)
		}
		go r.reap(in, exitC)
	}
	return nil
}
