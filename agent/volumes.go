package agent

import "path/filepath"

// VolumePath is where an agent of cfg keeps volume id: under VolumeDir
// when set, else under DataDir/volumes. The files handler (agent/files)
// serves `volumes cp` there.
func VolumePath(cfg Config, id string) string {
	if cfg.VolumeDir != "" {
		return filepath.Join(cfg.VolumeDir, id)
	}
	return filepath.Join(cfg.DataDir, "volumes", id)
}
