package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/coder/websocket"
	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/internal/batchconn"
	"github.com/gpucloud/gpucloud/internal/stream"
	"github.com/gpucloud/gpucloud/internal/tunnel"
	"github.com/gpucloud/gpucloud/relay"
	"github.com/gpucloud/gpucloud/service"
)

// Interactive sessions (docs/ACCESS.md): a client's WebSocket on
// /v1/instances/{id}/exec or /port-forward is relayed to the WebSocket
// that the instance's host agent dials back, on the agent's mutual-TLS
// credential; neither the host nor the instance listens for it.

// Limits of an exec request.
const (
	maxExecArgs    = 256
	maxExecArgLen  = 64 << 10
	maxSummaryLen  = 1 << 10
	sessionEndWait = 5 * time.Second
)

// exec opens an exec session: ?command= once per argument, tty=1 for a
// terminal (cols, rows its size), stdin=1 to send input.
func (s *handlers) exec(w http.ResponseWriter, r *http.Request, p principal) error {
	q := r.URL.Query()
	cmd := q["command"]
	if len(cmd) == 0 || len(cmd) > maxExecArgs || cmd[0] == "" {
		return &cloud.Error{Code: cloud.Invalid, Message: fmt.Sprintf("command: give the command as 1 to %d command= parameters, one per argument", maxExecArgs),
			Details: map[string]any{"field": "command"}}
	}
	for _, a := range cmd {
		if len(a) > maxExecArgLen {
			return &cloud.Error{Code: cloud.Invalid, Message: "command: an argument is over 64 KiB", Details: map[string]any{"field": "command"}}
		}
	}
	req := agentapi.SessionRequest{Kind: agentapi.SessionExec, Command: cmd}
	var err error
	if req.TTY, err = flag(q.Get("tty"), "tty"); err != nil {
		return err
	}
	if req.Stdin, err = flag(q.Get("stdin"), "stdin"); err != nil {
		return err
	}
	if req.Cols, err = dimension(q.Get("cols"), "cols"); err != nil {
		return err
	}
	if req.Rows, err = dimension(q.Get("rows"), "rows"); err != nil {
		return err
	}
	return s.relay(w, r, p, r.PathValue("id"), req, summarize(cmd), true)
}

// portForward opens one TCP connection to ?port= inside the instance.
func (s *handlers) portForward(w http.ResponseWriter, r *http.Request, p principal) error {
	port, err := strconv.Atoi(r.URL.Query().Get("port"))
	if err != nil || port < 1 || port > 65535 {
		return &cloud.Error{Code: cloud.Invalid, Message: "port: want a TCP port from 1 to 65535", Details: map[string]any{"field": "port"}}
	}
	req := agentapi.SessionRequest{Kind: agentapi.SessionForward, Port: port}
	return s.relay(w, r, p, r.PathValue("id"), req, "port "+strconv.Itoa(port), false)
}

func flag(v, field string) (bool, error) {
	switch v {
	case "", "0", "false":
		return false, nil
	case "1", "true":
		return true, nil
	}
	return false, &cloud.Error{Code: cloud.Invalid, Message: field + ": want 1 or 0", Details: map[string]any{"field": field}}
}

func dimension(v, field string) (uint16, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(v, 10, 16)
	if err != nil {
		return 0, &cloud.Error{Code: cloud.Invalid, Message: field + ": want a number of characters from 0 to 65535", Details: map[string]any{"field": field}}
	}
	return uint16(n), nil
}

// summarize is what the records show of a command line: its arguments,
// quoted where they need it, at most maxSummaryLen bytes.
func summarize(cmd []string) string {
	parts := make([]string, len(cmd))
	for i, a := range cmd {
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\$`;&|<>*?()[]{}") {
			a = strconv.Quote(a)
		}
		parts[i] = a
	}
	s := strings.Join(parts, " ")
	if len(s) > maxSummaryLen {
		s = s[:maxSummaryLen] + "..."
	}
	return s
}

// relay is the one path of every session kind (exec, forward, and the
// ssh and files kinds other routes build): it asks service.Sessions for
// the session (tenancy, state, limits, record), has the instance's agent
// dial back, and only then upgrades the client's request, so that every
// refusal is an ordinary JSON error; it splices the two WebSockets and
// records the end. framed sessions speak internal/stream (and their
// status's exit code is recorded); the others carry raw binary messages.
// req's Kind and arguments are the caller's; relay fills in its ID,
// instance and actor.
func (s *handlers) relay(w http.ResponseWriter, r *http.Request, p principal, instanceID string, req agentapi.SessionRequest, summary string, framed bool) error {
	proto := agentapi.RawSubprotocol
	if framed {
		proto = stream.Subprotocol
	}
	if err := wantUpgrade(r, proto, framed); err != nil {
		return err
	}
	ctx := r.Context()
	start, err := s.svc.Sessions.Start(ctx, p.actor(), instanceID, req.Kind, summary)
	if err != nil {
		return err
	}
	id := start.Session.ID
	req.ID, req.InstanceID, req.Actor = id, start.Session.InstanceID, p.UserID
	agent, err := s.hub.Open(ctx, start.HostID, req)
	if err != nil {
		s.endSession(id, nil, "the host's agent did not open it: "+err.Error())
		return err
	}
	defer agent.Close(websocket.StatusNormalClosure, "")
	clearDeadlines(w)
	client, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{proto}})
	if err != nil {
		s.endSession(id, nil, "the client's upgrade failed")
		return nil // Accept has answered
	}
	st, err := relay.Splice(ctx, client, batchconn.From(ctx), agent, framed)
	var code *int
	reason := "closed"
	switch {
	case st != nil:
		code, reason = &st.ExitCode, "exited"
		if st.Message != "" {
			reason = st.Message
		}
	case err != nil:
		reason = "relay failed: " + err.Error()
	}
	s.endSession(id, code, reason)
	return nil
}

// endSession records a session's end; a request's context may be gone by
// then, so it has its own.
func (s *handlers) endSession(id string, code *int, reason string) {
	ctx, cancel := context.WithTimeout(context.Background(), sessionEndWait)
	defer cancel()
	if err := s.svc.Sessions.End(ctx, id, code, reason); err != nil {
		s.log.Warn("recording a session's end failed", "session", id, "err", err)
	}
}

// wantUpgrade refuses a request that is not a WebSocket upgrade, or a
// framed one that does not offer the framing's subprotocol.
func wantUpgrade(r *http.Request, proto string, required bool) error {
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		return &cloud.Error{Code: cloud.Invalid, Message: r.URL.Path + " is a WebSocket: send an upgrade request (the gpucloud CLI and client do)"}
	}
	if !required {
		return nil
	}
	var offered []string
	for _, h := range r.Header.Values("Sec-WebSocket-Protocol") {
		for _, p := range strings.Split(h, ",") {
			offered = append(offered, strings.TrimSpace(p))
		}
	}
	if !slices.Contains(offered, proto) {
		return &cloud.Error{Code: cloud.Invalid, Message: "offer the WebSocket subprotocol " + proto,
			Details: map[string]any{"subprotocol": proto}}
	}
	return nil
}

// clearDeadlines lifts the server's read and write timeouts from a
// connection about to become a long-lived WebSocket: they bound requests,
// not sessions.
func clearDeadlines(w http.ResponseWriter) {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
}

// tunnel opens a tunnel (docs/ACCESS.md, "Tunnels"): one connection of a
// grant made with via=tunnel (the grant in the Gpucloud-Grant header),
// which the server joins to a connection the grant's host agent dials
// back, both raw (internal/tunnel), spliced in the kernel. The TLS
// session inside is the client's and the agent's: the agent checks the
// grant and the client's key, and the server sees ciphertext only.
func (s *handlers) tunnel(w http.ResponseWriter, r *http.Request, p principal) error {
	if r.ProtoMajor != 1 || !strings.EqualFold(r.Header.Get("Upgrade"), tunnel.Protocol) {
		return &cloud.Error{Code: cloud.Invalid, Message: r.URL.Path + " is a tunnel: send an HTTP/1.1 request with Upgrade: " + tunnel.Protocol + " (the gpucloud CLI and client do)"}
	}
	ctx := r.Context()
	g, err := s.svc.Sessions.TunnelRoute(ctx, p.actor(), r.Header.Get("Gpucloud-Grant"))
	if err != nil {
		return err
	}
	req := agentapi.SessionRequest{ID: service.NewID("tun-"), Kind: agentapi.SessionTunnel, InstanceID: g.Target.InstanceID, Actor: p.UserID}
	agent, err := s.hub.OpenTunnel(ctx, g.HostID, req)
	if err != nil {
		return err
	}
	defer agent.Close(websocket.StatusNormalClosure, "")
	clearDeadlines(w)
	client, err := tunnel.Upgrade(w)
	if err != nil {
		s.log.Info("a tunnel's upgrade failed", "session", g.SessionID, "err", err)
		return nil // the connection is gone
	}
	if tunnel.WriteReady(agent.Raw) != nil || tunnel.WriteReady(client) != nil {
		client.Close()
		return nil
	}
	stop := context.AfterFunc(ctx, func() { client.Close(); agent.Raw.Close() })
	defer stop()
	tunnel.Join(client, agent.Raw)
	return nil
}

// agentSessions holds the agent's control channel (GET /v1/agent/sessions)
// until it ends.
func (s *handlers) agentSessions(w http.ResponseWriter, r *http.Request, p principal) error {
	if err := wantUpgrade(r, agentapi.ControlSubprotocol, true); err != nil {
		return err
	}
	clearDeadlines(w)
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{agentapi.ControlSubprotocol}})
	if err != nil {
		return nil
	}
	if err := s.hub.ServeControl(r.Context(), p.HostID, ws); err != nil {
		s.log.Debug("agent control channel ended", "host", p.HostID, "err", err)
	}
	return nil
}

// agentSession is an agent's dial-back of session {id}: it is handed to
// the client's request waiting for it, and held until the session ends.
// Only the host the session was sent to may answer it. A tunnel's
// dial-back (Upgrade: tunnel.Protocol) is raw.
func (s *handlers) agentSession(w http.ResponseWriter, r *http.Request, p principal) error {
	if strings.EqualFold(r.Header.Get("Upgrade"), tunnel.Protocol) {
		clearDeadlines(w)
		raw, err := tunnel.Upgrade(w)
		if err != nil {
			s.log.Info("an agent's tunnel dial-back failed", "host", p.HostID, "err", err)
			return nil
		}
		done, ok := s.hub.AcceptRaw(p.HostID, r.PathValue("id"), raw)
		if !ok {
			raw.Close()
			return nil
		}
		select {
		case <-done:
		case <-r.Context().Done():
		}
		return nil
	}
	if err := wantUpgrade(r, "", false); err != nil {
		return err
	}
	clearDeadlines(w)
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		Subprotocols: []string{stream.Subprotocol, agentapi.RawSubprotocol}})
	if err != nil {
		return nil
	}
	done, ok := s.hub.Accept(p.HostID, r.PathValue("id"), ws, batchconn.From(r.Context()))
	if !ok {
		ws.Close(websocket.StatusPolicyViolation, "no session "+r.PathValue("id")+" waits for this host")
		return nil
	}
	select {
	case <-done:
	case <-r.Context().Done():
	}
	return nil
}
