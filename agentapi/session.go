package agentapi

import (
	"context"
	"encoding/json"
	"net"

	"github.com/coder/websocket"
	"github.com/gpucloud/gpucloud/internal/rest"
)

// The kinds of session (SessionRequest.Kind).
const (
	// SessionExec runs a command in the instance; framed (internal/stream).
	SessionExec = "exec"
	// SessionForward carries one TCP connection to Port inside the
	// instance as raw binary messages.
	SessionForward = "forward"
	// SessionSSH and SessionFiles are served by the handlers registered
	// for them (agent.Config.Sessions).
	SessionSSH   = "ssh"
	SessionFiles = "files"
	// SessionTunnel carries one direct session (a grant's connection)
	// through the server: the agent dials back with DialTunnel and serves
	// the direct protocol on the raw connection (docs/ACCESS.md,
	// "Tunnels"). It names no instance: the grant does.
	SessionTunnel = "tunnel"
)

// Subprotocols of the agent's session connections.
const (
	// ControlSubprotocol is the control channel's: text messages, each
	// one JSON SessionRequest, server → agent.
	ControlSubprotocol = "v1.sessions.agent.gpucloud.dev"
	// RawSubprotocol is an unframed session's (forward, and kinds whose
	// handlers speak their own protocol over the bytes).
	RawSubprotocol = "v1.raw.gpucloud.dev"
)

// SessionRequest asks the agent to open a session into one of its
// instances. The server sends it on the control channel (GET
// /v1/agent/sessions); the agent dials back GET /v1/agent/sessions/{ID}
// and serves the session on that connection. The server has checked every
// rule (tenancy, state, limits) before: the agent checks only that the
// instance is one of its own and running.
type SessionRequest struct {
	ID         string   `json:"id"`
	Kind       string   `json:"kind"`
	InstanceID string   `json:"instance_id"`
	Command    []string `json:"command,omitempty"`
	TTY        bool     `json:"tty,omitempty"`
	Stdin      bool     `json:"stdin,omitempty"`
	Cols       uint16   `json:"cols,omitempty"`
	Rows       uint16   `json:"rows,omitempty"`
	// Port is a forward's TCP port inside the instance.
	Port int `json:"port,omitempty"`
	// Actor names who opened the session (a user ID), for the agent's log.
	Actor string `json:"actor,omitempty"`
	// Files and SSH are the arguments of those kinds, which their
	// handlers define.
	Files json.RawMessage `json:"files,omitempty"`
	SSH   json.RawMessage `json:"ssh,omitempty"`
}

// SessionControl opens the agent's control channel, on which the server
// sends SessionRequests as JSON text messages.
func (c *Client) SessionControl(ctx context.Context) (*websocket.Conn, error) {
	return c.r.DialWebSocket(ctx, "/v1/agent/sessions", []string{ControlSubprotocol})
}

// DialTunnel opens the raw connection of tunnel session id
// (internal/tunnel): GET /v1/agent/sessions/{id} upgraded to the tunnel
// protocol, on the agent's client certificate.
func (c *Client) DialTunnel(ctx context.Context, id string) (net.Conn, error) {
	return c.r.DialTunnel(ctx, rest.PathOf("agent", "sessions", id), nil)
}

// DialSession opens the connection of session id, with the given
// subprotocol (stream.Subprotocol for exec, RawSubprotocol otherwise).
func (c *Client) DialSession(ctx context.Context, id, subprotocol string) (*websocket.Conn, error) {
	return c.r.DialWebSocket(ctx, rest.PathOf("agent", "sessions", id), []string{subprotocol})
}
