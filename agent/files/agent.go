package files

import (
	"github.com/gpucloud/gpucloud/agent"
	"github.com/gpucloud/gpucloud/agentapi"
)

// ForAgent is the files handler of an agent of cfg: volumes where the
// agent keeps them (agent.AcquireVolume: a detached volume's image is
// mounted for the session), instances as its runtime roots
// them (nil when the runtime does not).
func ForAgent(cfg agent.Config) *Handler {
	rt, _ := cfg.Runtime.(InstanceRoots)
	return &Handler{VolumeDir: func(id string, shared bool, sizeGiB int64) (string, func(), error) {
		return agent.AcquireVolume(cfg, id, shared, sizeGiB)
	},
		Runtime: rt, Log: cfg.Log}
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
