package containerd

import (
	"fmt"

	"github.com/gpucloud/gpucloud/agent/runtime"
)

// FilesRoot is where `gpucloud instances cp` reads and writes a running
// container's files (agent/files.InstanceRoots): its root as its init
// process sees it, /proc/PID/root, through which the container's own
// mounts (its volumes among them) are seen and nothing of the host's is;
// and the workload's uid and gid, who owns what a copy creates.
func (r *Runtime) FilesRoot(id string) (dir string, uid, gid int, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	in := r.insts[id]
	if in == nil {
		return "", 0, 0, fmt.Errorf("instance %s: %w", id, runtime.ErrNotFound)
	}
	if in.task == nil || in.status.State != runtime.StateRunning {
		return "", 0, 0, fmt.Errorf("instance %s is not running: its files are copied only while it runs", id)
	}
	return fmt.Sprintf("/proc/%d/root", in.task.Pid()), int(in.uid), int(in.gid), nil
}
