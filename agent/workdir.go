package agent

import (
	"os"
)

// DefaultWorkSize is the most an instance without volumes writes to its
// working directory (/work, its HOME) when Config.WorkSize is zero.
const DefaultWorkSize = 10 << 30

// workDir makes instance id's working directory ready and returns it:
// DataDir/instances/<id>, with VolumeImages the mount point of a
// filesystem of WorkSize (DataDir/instances/<id>.img beside it), so that a
// workload fills no more of the host's disk through its working directory
// than through its root or a volume. An instance with volumes works in its
// first volume instead and gets none.
func (a *Agent) workDir(id string) (string, error) {
	dir, _ := a.imagePaths(kindWork, id)
	size := a.cfg.WorkSize
	if size == 0 {
		size = DefaultWorkSize
	}
	if !a.cfg.VolumeImages || size < 0 {
		return dir, os.MkdirAll(dir, 0o750)
	}
	return a.mountedImage(kindWork, id, size)
}
