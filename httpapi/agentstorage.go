package httpapi

import (
	"net/http"

	"github.com/gpucloud/gpucloud/agentapi"
)

// agentGone handles POST /v1/agent/gone: which of the volumes and
// instances whose files the caller's host holds are gone
// (service.Agents.Gone), so that its agent deletes their files.
func (s *handlers) agentGone(w http.ResponseWriter, r *http.Request, p principal) error {
	var req agentapi.GoneRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	out, err := s.svc.Agents.Gone(r.Context(), p.actor(), req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// agentDirectSessions handles POST /v1/agent/direct-sessions: the reports
// of what the caller's host served on direct grants.
func (s *handlers) agentDirectSessions(w http.ResponseWriter, r *http.Request, p principal) error {
	var req agentapi.DirectReportsRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	out, err := s.svc.Sessions.DirectReports(r.Context(), p.actor(), req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
