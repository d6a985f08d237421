package httpapi

import (
	"encoding/json"
	"net/http"

	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/cloud"
)

// instanceSSH handles GET /v1/instances/{id}/ssh (docs/SSH.md): a
// WebSocket whose binary messages carry an SSH client's bytes to the SSH
// endpoint the instance's agent serves (agent/sshd), through the one
// session path (relay). The agent authenticates the client against the
// instance's tenant's keys, which this reads as the session starts: a key
// deleted later opens no new session.
func (s *handlers) instanceSSH(w http.ResponseWriter, r *http.Request, p principal) error {
	id := r.PathValue("id")
	// The instance's tenant, read as the actor may see it: another
	// tenant's instance is not_found here, before any key is read.
	in, err := s.svc.Instances.Get(r.Context(), p.actor(), id)
	if err != nil {
		return err
	}
	keys, err := s.svc.Keys.Authorized(r.Context(), in.TenantID)
	if err != nil {
		return err
	}
	if len(keys) == 0 {
		return &cloud.Error{Code: cloud.Invalid,
			Message: "the tenant has no SSH keys to log in with: import yours first (gpucloud keys import ~/.ssh/id_ed25519.pub)",
			Details: map[string]any{"field": "keys"}}
	}
	args, err := json.Marshal(agentapi.SSHSession{AuthorizedKeys: keys})
	if err != nil {
		return err
	}
	return s.relay(w, r, p, id, agentapi.SessionRequest{Kind: agentapi.SessionSSH, SSH: args}, "ssh", false)
}
