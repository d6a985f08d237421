package files

import (
	"github.com/gpucloud/gpucloud/agent"
	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/agentapi"
)

// ForAgent is the files handler of an agent of cfg: volumes where the
// agent keeps them (agent.AcquireVolume: a detached volume's image is
// mounted for the session), instances as its runtime roots
// them (nil when the runtime does not), and ports inside instances as
// its runtime dials them, for direct port forwards (nil likewise).
func ForAgent(cfg agent.Config) *Handler {
	rt, _ := cfg.Runtime.(InstanceRoots)
	dl, _ := cfg.Runtime.(runtime.Dialer)
	return &Handler{VolumeDir: func(id string, shared bool, sizeGiB int64) (string, func(), error) {
		return agent.AcquireVolume(cfg, id, shared, sizeGiB)
	},
		Runtime: rt, Dialer: dl, Log: cfg.Log}
}

// Sessions is cfg's session handlers with this one added for files.
func Sessions(cfg agent.Config) map[string]agent.SessionHandler {
	m := map[string]agent.SessionHandler{}
	for k, h := range cfg.Sessions {
		m[k] = h
	}
	m[agentapi.SessionFiles] = ForAgent(cfg)
	return m
}
