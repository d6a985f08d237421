package client

import (
	"context"
	"net"

	"github.com/coder/websocket"

	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/internal/rest"
)

// SSHDomain is the host name suffix that names an instance to OpenSSH:
// i-0123456789abcdef.gpucloud (gpucloud ssh-config).
const SSHDomain = ".gpucloud"

// DialSSH opens an SSH connection to instance id through the server (GET
// /v1/instances/{id}/ssh): the returned conn carries an SSH client's bytes
// as they are, both ways, to the SSH endpoint the instance's agent serves
// (binary WebSocket messages, no framing of gpucloud's: SSH has its own
// channels). It ends when ctx does. Another tenant's instance, like a
// missing one, answers not_found; one that is not running, conflict.
func (c *Client) DialSSH(ctx context.Context, id string) (net.Conn, error) {
	ws, err := c.r.DialWebSocket(ctx, rest.PathOf("instances", id)+"/ssh", []string{agentapi.RawSubprotocol})
	if err != nil {
		return nil, err
	}
	// An SSH packet may be larger than the WebSocket library's default
	// read limit (32 KiB): OpenSSH sends up to 256 KiB.
	ws.SetReadLimit(1 << 20)
	return websocket.NetConn(ctx, ws, websocket.MessageBinary), nil
}
