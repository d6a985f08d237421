package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/coder/websocket"

	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/internal/batchconn"
	"github.com/gpucloud/gpucloud/relay"
	"github.com/gpucloud/gpucloud/service"
)

// File copies (`volumes cp`, `instances cp`; docs/ACCESS.md, "Moving
// data"): a client's WebSocket on /v1/instances/{id}/files or
// /v1/volumes/{id}/files is relayed, as every session is, to the agent of
// the host that holds the files, which speaks internal/filexfer on it.

// filesTarget is a session request's Files field.
func filesTarget(t agentapi.FilesTarget) json.RawMessage {
	b, _ := json.Marshal(t) // two strings always marshal
	return b
}

// instanceFiles opens a files session on a running instance's filesystem.
func (s *handlers) instanceFiles(w http.ResponseWriter, r *http.Request, p principal) error {
	id := r.PathValue("id")
	req := agentapi.SessionRequest{Kind: agentapi.SessionFiles, Files: filesTarget(agentapi.FilesTarget{InstanceID: id})}
	return s.relay(w, r, p, id, req, "instances cp", false)
}

// volumeFiles opens a files session on a volume's directory, on the host
// service.Files.VolumeRoute picks: attached to a running instance, a
// session of that instance (its rules, limits and records); detached,
// a session straight to the host, recorded on the tenant's events.
func (s *handlers) volumeFiles(w http.ResponseWriter, r *http.Request, p principal) error {
	if err := wantUpgrade(r, agentapi.RawSubprotocol, false); err != nil {
		return err
	}
	ctx := r.Context()
	route, err := s.svc.Files.VolumeRoute(ctx, p.actor(), r.PathValue("id"))
	if err != nil {
		return err
	}
	req := agentapi.SessionRequest{Kind: agentapi.SessionFiles,
		Files: filesTarget(agentapi.FilesTarget{VolumeID: route.Volume.ID, Shared: route.Volume.Kind == cloud.VolumeShared,
			SizeGiB: route.Volume.SizeGiB})}
	if route.InstanceID != "" {
		return s.relay(w, r, p, route.InstanceID, req, "volumes cp "+route.Volume.ID, false)
	}
	req.ID, req.Actor = service.NewID(service.SessionPrefix), p.UserID
	if err := s.svc.Files.AuditVolumeSession(ctx, p.actor(), route, req.ID, false, "volumes cp", 0); err != nil {
		return err
	}
	start := time.Now()
	reason := "closed"
	defer func() { s.endVolumeSession(p, route, req.ID, reason, time.Since(start)) }()
	agent, err := s.hub.Open(ctx, route.HostID, req)
	if err != nil {
		reason = "the host's agent did not open it: " + err.Error()
		return err
	}
	defer agent.Close(websocket.StatusNormalClosure, "")
	clearDeadlines(w)
	client, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{agentapi.RawSubprotocol}})
	if err != nil {
		reason = "the client's upgrade failed"
		return nil // Accept has answered
	}
	if _, err := relay.Splice(ctx, client, batchconn.From(ctx), agent, false); err != nil {
		reason = "relay failed: " + err.Error()
	}
	return nil
}

// endVolumeSession records a detached volume's session's end; the
// request's context may be gone by then.
func (s *handlers) endVolumeSession(p principal, route *service.VolumeRoute, id, reason string, took time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), sessionEndWait)
	defer cancel()
	if err := s.svc.Files.AuditVolumeSession(ctx, p.actor(), route, id, true, reason, took); err != nil {
		s.log.Warn("recording a volume session's end failed", "session", id, "err", err)
	}
}

// filesGrant handles POST /v1/instances/{id}/files/grant?key=FP and
// /v1/volumes/{id}/files/grant?key=FP (service.Files.Grant): a grant for a
// direct copy to the agent that holds the files, bound to the client's
// certificate (its fingerprint FP).
func filesGrant(kind string) handlerFunc {
	return func(s *handlers, w http.ResponseWriter, r *http.Request, p principal) error {
		via, err := grantVia(r.URL.Query().Get("via"))
		if err != nil {
			return err
		}
		g, err := s.svc.Files.Grant(r.Context(), p.actor(), kind, r.PathValue("id"), r.URL.Query().Get("key"), via)
		if err != nil {
			return err
		}
		writeGrant(w, g)
		return nil
	}
}

// forwardGrant handles POST
// /v1/instances/{id}/port-forward/grant?port=N&key=FP
// (service.Sessions.ForwardGrant): a grant for direct port forwards, bound
// to the client's certificate.
func (s *handlers) forwardGrant(w http.ResponseWriter, r *http.Request, p principal) error {
	port, err := strconv.Atoi(r.URL.Query().Get("port"))
	if err != nil {
		port = 0 // the service says what a port is
	}
	via, err := grantVia(r.URL.Query().Get("via"))
	if err != nil {
		return err
	}
	g, err := s.svc.Sessions.ForwardGrant(r.Context(), p.actor(), r.PathValue("id"), port, r.URL.Query().Get("key"), via)
	if err != nil {
		return err
	}
	writeGrant(w, g)
	return nil
}

// grantVia reads a grant request's via=: "direct" (or none), the agent's
// listener; "tunnel", through the server (GET /v1/tunnels).
func grantVia(v string) (service.Via, error) {
	switch v {
	case "", "direct":
		return service.ViaDirect, nil
	case "tunnel":
		return service.ViaTunnel, nil
	}
	return 0, &cloud.Error{Code: cloud.Invalid, Message: "via: want direct or tunnel", Details: map[string]any{"field": "via"}}
}

func writeGrant(w http.ResponseWriter, g *service.DirectGrant) {
	writeJSON(w, http.StatusOK, api.DirectGrant{HostID: g.HostID, Address: g.Address, Fingerprint: g.Fingerprint,
		Grant: g.Grant, SessionID: g.SessionID, ExpiresAt: g.ExpiresAt})
}
