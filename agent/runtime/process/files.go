package process

import (
	"fmt"

	"github.com/gpucloud/gpucloud/agent/runtime"
)

// FilesRoot is where `gpucloud instances cp` reads and writes a running
// workload's files (agent/files.InstanceRoots): its working directory,
// which is all of the host a process workload calls its own. The files
// stay the agent's user's (-1), as the workload runs as that user.
func (r *Runtime) FilesRoot(id string) (dir string, uid, gid int, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.procs[id]
	if p == nil {
		return "", 0, 0, fmt.Errorf("instance %s: %w", id, runtime.ErrNotFound)
	}
	if p.status.State != runtime.StateRunning {
		return "", 0, 0, fmt.Errorf("instance %s is not running: its files are copied only while it runs", id)
	}
	return p.workDir, -1, -1, nil
}
