package httpapi

import (
	"net/http"

	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
)

// The agent protocol, part one: join tokens, joining and heartbeats
// (docs/CONTROL_PLANE.md, "Agent protocol"; package agentapi has the wire
// types, service.Agents the rules). An admin creates a join token; an
// agent presents it once, with its host's inventory, and receives its own
// credential: a token with role agent, bound to the host, that opens the
// /v1/agent routes for that host and nothing else.

// Event kinds of the agent protocol's host changes (service.Agents writes
// them).
const (
	EventHostJoined    = service.EventHostJoined
	EventHostRejoined  = service.EventHostRejoined
	EventHostHealthy   = service.EventHostHealthy
	EventHostInventory = service.EventHostInventory
)

// createJoinToken handles POST /v1/join-tokens (admin): a token with role
// join, owned by the calling admin. The secret is in the answer only.
func (s *handlers) createJoinToken(w http.ResponseWriter, r *http.Request, p principal) error {
	var req api.CreateJoinTokenRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	t, err := s.svc.Accounts.CreateJoinToken(r.Context(), p.actor(), req.Name, req.ExpiresAt, req.MaxUses)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, t)
	return nil
}

// listJoinTokens handles GET /v1/join-tokens (admin): every join token,
// revoked and expired ones included. DELETE /v1/tokens/{id} revokes one.
func (s *handlers) listJoinTokens(w http.ResponseWriter, r *http.Request, p principal) error {
	ts, err := s.svc.Accounts.JoinTokens(r.Context(), p.actor())
	if err != nil {
		return err
	}
	if ts == nil {
		ts = []*cloud.Token{}
	}
	writeJSON(w, http.StatusOK, api.TokenList{Tokens: ts})
	return nil
}

// agentJoin handles POST /v1/agent/join. The route is public: the join
// token travels in the body, and is authenticated here like a bearer
// token. It answers 201 for a new host and 200 for a re-join.
func (s *handlers) agentJoin(w http.ResponseWriter, r *http.Request, _ principal) error {
	var req agentapi.JoinRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	if req.JoinToken == "" {
		return s.authFailed(r, unauthenticated("join_token is missing; an admin creates one with POST /v1/join-tokens"))
	}
	jp, err := s.checkToken(r, req.JoinToken)
	if err != nil {
		return err
	}
	// A re-join presents the host's current credential, authenticated as
	// the agent routes authenticate it (with the host's client certificate
	// over mutual TLS); the service checks that it is the joining host's.
	// One that does not authenticate grants nothing: the join goes on
	// without it (a new host joins; an existing one is refused).
	credentialID := ""
	if req.Credential != "" {
		cp, err := s.checkToken(r, req.Credential)
		if err == nil && cp.Role == cloud.RoleAgent && (!s.requireAgentCert || hostCertificate(r, cp.HostID)) {
			credentialID = cp.TokenID
		}
	}
	id, credential, cert, created, err := s.svc.Agents.Join(r.Context(), jp.actor(), jp.TokenID, req.Inventory, []byte(req.CSR), credentialID)
	if err != nil {
		return err
	}
	if !created {
		// A re-join revoked the host's earlier credentials: forget
		// them, and only them. (Clearing the whole cache on every
		// join, failed ones included, made a fleet that joins at once
		// look every agent's credential up again together.)
		s.tokens.dropHost(id)
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, agentapi.JoinResponse{HostID: id, Credential: credential, Certificate: string(cert)})
	return nil
}

// agentHeartbeat handles POST /v1/agent/heartbeat: the caller's host is
// alive, with its inventory when it changed (service.Agents.Heartbeat). It
// answers how often the server wants the next ones
// (service.Agents.HeartbeatInterval).
func (s *handlers) agentHeartbeat(w http.ResponseWriter, r *http.Request, p principal) error {
	var req agentapi.HeartbeatRequest
	if err := decodeOptionalBody(w, r, &req); err != nil {
		return err
	}
	if err := s.svc.Agents.Heartbeat(r.Context(), p.actor(), req.Inventory); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, agentapi.HeartbeatResponse{IntervalMS: s.svc.Agents.HeartbeatInterval().Milliseconds()})
	return nil
}

// agentMetrics handles POST /v1/agent/metrics: utilization samples of the
// instances on the caller's host (service.Agents.ReportMetrics), all
// written or, when one names an instance that is not on the host, none.
func (s *handlers) agentMetrics(w http.ResponseWriter, r *http.Request, p principal) error {
	var rep agentapi.MetricsReport
	if err := decodeBody(w, r, &rep); err != nil {
		return err
	}
	if err := s.svc.Agents.ReportMetrics(r.Context(), p.actor(), rep); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// agentScaleInLock handles POST /v1/agent/instances/{id}/scale-in-lock:
// the instance's workload takes or releases its completion lock
// (service.Agents.SetScaleInLock). It answers the instance's scale-in
// protection as it now stands ({} when nothing holds it).
func (s *handlers) agentScaleInLock(w http.ResponseWriter, r *http.Request, p principal) error {
	var req agentapi.LockRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	si, err := s.svc.Agents.SetScaleInLock(r.Context(), p.actor(), r.PathValue("id"), req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, si)
	return nil
}
