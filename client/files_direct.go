package client

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/internal/batchconn"
	"github.com/gpucloud/gpucloud/internal/pki"
	"github.com/gpucloud/gpucloud/internal/rest"
)

// DirectGrant is a grant and the key it is bound to: a TLS certificate
// made for it, whose key never leaves this client, which OpenDirect
// presents to the agent.
type DirectGrant struct {
	api.DirectGrant
	cert tls.Certificate
}

// directKeyLifetime is how long a grant's client certificate is valid:
// connections are opened while the grant lives, two minutes.
const directKeyLifetime = time.Hour

// ViaTunnel is the via of a grant whose connections go through the
// server's tunnels (docs/ACCESS.md, "Tunnels"): OpenDirect opens them
// through GET /v1/tunnels, and the TLS session inside is still the
// client's and the agent's alone. It needs no listener on the host and no
// --direct-access; a host whose agent predates tunnels answers conflict.
const ViaTunnel = "tunnel"

// askGrant makes a key for a grant and asks for the grant at path,
// bound to it.
func (c *Client) askGrant(ctx context.Context, path string, q url.Values) (*DirectGrant, error) {
	cert, fp, err := pki.SelfSigned("gpucloud direct client", time.Now(), directKeyLifetime)
	if err != nil {
		return nil, fmt.Errorf("making a direct session's key: %w", err)
	}
	q.Set("key", fp)
	out := &DirectGrant{cert: cert}
	if _, _, err := c.r.Do(ctx, rest.Call{Method: "POST", Path: path + "?" + q.Encode(), Out: &out.DirectGrant}); err != nil {
		return nil, err
	}
	return out, nil
}

// FilesGrant asks for a direct copy's grant (docs/DATA.md, "Direct
// copies") on a volume (kind "volumes") or a running instance (kind
// "instances"): POST /v1/{kind}/{id}/files/grant, bound to a key made for
// it. A cloud whose operator has not turned direct copies on answers
// permission_denied; a host whose agent takes none, conflict. Copy
// through OpenFiles then.
func (c *Client) FilesGrant(ctx context.Context, kind, id string) (*DirectGrant, error) {
	return c.askGrant(ctx, rest.PathOf(kind, id, "files", "grant"), url.Values{})
}

// FilesTunnelGrant is FilesGrant for copies through the server's tunnels
// (ViaTunnel).
func (c *Client) FilesTunnelGrant(ctx context.Context, kind, id string) (*DirectGrant, error) {
	return c.askGrant(ctx, rest.PathOf(kind, id, "files", "grant"), url.Values{"via": {ViaTunnel}})
}

// ForwardGrant asks for a grant for direct port forwards to port inside
// running instance id (docs/ACCESS.md, "Direct port forwards"): POST
// /v1/instances/{id}/port-forward/grant. As FilesGrant, direct sessions
// off answer permission_denied and a host without a listener conflict:
// forward through PortForward then. Each connection of the forward is an
// OpenDirect of the grant (at most agentapi.MaxDirectConns open at once,
// opened before it expires).
func (c *Client) ForwardGrant(ctx context.Context, id string, port int) (*DirectGrant, error) {
	return c.askGrant(ctx, rest.PathOf("instances", id, "port-forward", "grant"), url.Values{"port": {strconv.Itoa(port)}})
}

// ForwardTunnelGrant is ForwardGrant for port forwards through the
// server's tunnels (ViaTunnel): the default way of `gpucloud instances
// port-forward`, which falls back to PortForward where it is refused.
func (c *Client) ForwardTunnelGrant(ctx context.Context, id string, port int) (*DirectGrant, error) {
	return c.askGrant(ctx, rest.PathOf("instances", id, "port-forward", "grant"), url.Values{"port": {strconv.Itoa(port)}, "via": {ViaTunnel}})
}

// directHelloTimeout bounds a direct connection's dial, handshake and
// grant when ctx has no earlier deadline.
const directHelloTimeout = 15 * time.Second

// OpenDirect opens the session a grant allows (a files session, or one
// connection of a port forward) with the agent it names: TLS 1.3 to
// g.Address, or, for a grant made via tunnel (no address), through the
// server's tunnel (GET /v1/tunnels, which passes the session's bytes on
// without reading them); trusting only the certificate whose fingerprint
// is g.Fingerprint and presenting the grant's own, the grant sent and the
// agent's welcome read. The
// connection then speaks the files protocol (internal/filexfer.NewClient),
// as OpenFiles's does, or carries the forwarded port's bytes (its
// CloseWrite passes a half-close on); each write's TLS records leave in
// one system call. A refused grant is an error saying why.
func (c *Client) OpenDirect(ctx context.Context, g *DirectGrant) (net.Conn, error) {
	cfg, err := pki.PinnedLeafConfig(g.Fingerprint)
	if err != nil {
		return nil, fmt.Errorf("direct session on host %s: %w", g.HostID, err)
	}
	cfg.Certificates = []tls.Certificate{g.cert}
	dctx, cancel := context.WithTimeout(ctx, directHelloTimeout)
	defer cancel()
	var raw net.Conn
	if g.Address == "" {
		// A tunnel's grant: through the server, which joins this
		// connection to one the agent dials back.
		raw, err = c.r.DialTunnel(dctx, "/v1/tunnels", http.Header{"Gpucloud-Grant": {g.Grant}})
		if err != nil {
			return nil, fmt.Errorf("tunnel to host %s's agent: %w", g.HostID, err)
		}
	} else {
		d := net.Dialer{KeepAlive: 15 * time.Second}
		raw, err = d.DialContext(dctx, "tcp", g.Address)
		if err != nil {
			return nil, fmt.Errorf("direct session: reaching host %s's agent at %s: %w", g.HostID, g.Address, err)
		}
	}
	conn := batchconn.Client(raw, cfg)
	fail := func(err error) (net.Conn, error) {
		conn.Close()
		if g.Address == "" {
			return nil, fmt.Errorf("tunnelled session with host %s's agent: %w", g.HostID, err)
		}
		return nil, fmt.Errorf("direct session with host %s's agent at %s: %w", g.HostID, g.Address, err)
	}
	if err := conn.HandshakeContext(dctx); err != nil {
		return fail(err)
	}
	deadline, _ := dctx.Deadline()
	_ = conn.SetDeadline(deadline)
	if err := agentapi.WriteDirectLine(conn, agentapi.DirectHello{Grant: g.Grant}); err != nil {
		return fail(err)
	}
	var w agentapi.DirectWelcome
	if err := agentapi.ReadDirectLine(conn, &w); err != nil {
		return fail(fmt.Errorf("reading its welcome: %w", err))
	}
	if w.Error != nil {
		return fail(w.Error)
	}
	_ = conn.SetDeadline(time.Time{})
	return conn, nil
}
