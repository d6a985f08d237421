package client

import (
	"context"
	"net"

	"github.com/coder/websocket"

	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/internal/rest"
)

// OpenFiles opens a files session (`volumes cp`, `instances cp`) on a
// volume (kind "volumes") or a running instance (kind "instances"): a
// WebSocket to GET /v1/{kind}/{id}/files that the server relays to the
// agent of the host that holds it, as a net.Conn speaking the files
// protocol (internal/filexfer.NewClient). Close it to end the session.
func (c *Client) OpenFiles(ctx context.Context, kind, id string) (net.Conn, error) {
	ws, err := c.r.DialWebSocket(ctx, rest.PathOf(kind, id, "files"), []string{agentapi.RawSubprotocol})
	if err != nil {
		return nil, err
	}
	return websocket.NetConn(ctx, ws, websocket.MessageBinary), nil
}
