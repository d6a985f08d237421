package rest

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/gpucloud/gpucloud/internal/tunnel"
)

// ErrNoTunnel is returned by DialTunnel when the client cannot open a
// tunnel at all: its server is plain HTTP, or reached through a proxy, or
// its transport is not an *http.Transport. The caller uses the relay
// instead.
var ErrNoTunnel = errors.New("rest: no tunnel to this server (plain HTTP, a proxy, or a custom transport)")

// DialTunnel opens a tunnel (internal/tunnel) at path (with query) on the
// client's server, with the client's token and TLS configuration (an
// agent's client certificate included): an HTTP/1.1 upgrade request over
// a connection of its own, and, once the server has answered 101, the
// raw TCP connection the server joins to the tunnel's other end. h, when
// not nil, is sent with the request. A refused request answers the API's
// error as a *cloud.Error, as Do does.
func (c *Client) DialTunnel(ctx context.Context, path string, h http.Header) (net.Conn, error) {
	t, ok := c.hc.Transport.(*http.Transport)
	if c.hc.Transport == nil {
		t, ok = http.DefaultTransport.(*http.Transport)
	}
	if !ok || !strings.HasPrefix(c.base, "https://") || proxied(t, c.base+path) {
		return nil, ErrNoTunnel
	}
	u, err := url.Parse(c.base + path)
	if err != nil {
		return nil, err
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "443")
	}
	raw, cfg, err := dialUpgrade(ctx, t, "tcp", addr)
	if err != nil {
		return nil, err
	}
	tc := tls.Client(raw, cfg)
	fail := func(err error) (net.Conn, error) {
		raw.Close()
		return nil, err
	}
	if d, ok := ctx.Deadline(); ok {
		_ = raw.SetDeadline(d)
	}
	if err := tc.HandshakeContext(ctx); err != nil {
		return fail(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return fail(err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", tunnel.Protocol)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if err := req.Write(tc); err != nil {
		return fail(err)
	}
	br := bufio.NewReader(tc)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		return fail(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer resp.Body.Close()
		return fail(DecodeError(resp))
	}
	if !strings.EqualFold(resp.Header.Get("Upgrade"), tunnel.Protocol) {
		return fail(errors.New("rest: the server answered the tunnel with another protocol"))
	}
	conn, err := tunnel.Leave(tc, br)
	if err != nil {
		return fail(err)
	}
	return conn, nil
}
