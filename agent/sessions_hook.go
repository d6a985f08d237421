package agent

import (
	"context"
	"net"

	"github.com/coder/websocket"
	"github.com/gpucloud/gpucloud/agentapi"
)

// SessionHandler serves the sessions of one kind other than exec and
// forward (Config.Sessions, keyed by agentapi.SessionRequest.Kind: "ssh",
// "files"). conn is the session's WebSocket as a net.Conn of binary
// messages (websocket.NetConn), unframed: the handler speaks its own
// protocol over the bytes. ServeSession returns when the session ends;
// the agent closes conn after it. The agent has checked that the
// instance is one of its host's and running.
type SessionHandler interface {
	ServeSession(ctx context.Context, req agentapi.SessionRequest, conn net.Conn) error
}

// SessionDialer is a control plane that carries sessions (agentapi.Client
// does): the agent keeps its control channel open and dials back each
// session the server asks for.
type SessionDialer interface {
	SessionControl(ctx context.Context) (*websocket.Conn, error)
	DialSession(ctx context.Context, id, subprotocol string) (*websocket.Conn, error)
}

// TunnelServer serves direct sessions that come through the server's
// tunnels (Config.Tunnels; files.Direct does): raw is the connection the
// agent dialed back, on which the client's TLS and grant follow.
type TunnelServer interface {
	ServeTunnel(ctx context.Context, raw net.Conn)
}

// TunnelDialer is a SessionDialer that dials tunnels back
// (agentapi.Client does).
type TunnelDialer interface {
	DialTunnel(ctx context.Context, id string) (net.Conn, error)
}
