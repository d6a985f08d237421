package process

import (
	"context"
	"fmt"
	"net"
	"strconv"

	"github.com/gpucloud/gpucloud/agent/runtime"
)

// running returns workload id's environment and working directory, or
// an error when it is unknown or has exited.
func (r *Runtime) running(id string) (env []string, workDir string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.procs[id]
	if p == nil {
		return nil, "", fmt.Errorf("instance %s: %w", id, runtime.ErrNotFound)
	}
	if p.status.State != runtime.StateRunning {
		return nil, "", fmt.Errorf("instance %s: %w", id, runtime.ErrNotRunning)
	}
	return p.env, p.workDir, nil
}

// Dial implements runtime.Dialer: a workload shares the host's network
// namespace, so its ports are on the host's loopback.
func (r *Runtime) Dial(ctx context.Context, id string, port int) (net.Conn, error) {
	if _, _, err := r.running(id); err != nil {
		return nil, err
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
}
