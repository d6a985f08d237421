package rest

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"strings"

	"github.com/coder/websocket"

	"github.com/gpucloud/gpucloud/internal/batchconn"
)

// DialWebSocket opens a WebSocket to path (with query) on the client's
// server, with the client's token and HTTP client (so its TLS
// configuration, an agent's client certificate included), offering the
// given subprotocols. A refused upgrade answers the API's error as a
// *cloud.Error, as Do does. Its writes are coalesced (coalesce.go), and
// over TLS each coalesced write's records are gathered into one write to
// the connection (batchconn).
func (c *Client) DialWebSocket(ctx context.Context, path string, subprotocols []string) (*websocket.Conn, error) {
	h := http.Header{}
	if c.token != "" {
		h.Set("Authorization", "Bearer "+c.token)
	}
	hc := *c.hc
	base := hc.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	ut := &upgradeTransport{base: base}
	if t, ok := base.(*http.Transport); ok && strings.HasPrefix(c.base, "https://") && !proxied(t, c.base+path) {
		// A transport of its own, whose one connection is dialled here
		// with a batchconn.Conn under its TLS: an upgraded connection is
		// never pooled, so nothing is lost by not sharing.
		bt := t.Clone()
		bt.DisableKeepAlives = true
		bt.DialTLSContext = ut.dialTLS(t)
		ut.base = bt
	}
	hc.Transport = ut
	ws, resp, err := websocket.Dial(ctx, c.base+path, &websocket.DialOptions{
		HTTPClient: &hc, HTTPHeader: h, Subprotocols: subprotocols})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols && resp.Body != nil {
			defer resp.Body.Close()
			return nil, DecodeError(resp)
		}
		return nil, err
	}
	return ws, nil
}

// proxied reports whether t sends requests for url through a proxy
// (whose connection DialTLSContext would wrongly take for the server's).
func proxied(t *http.Transport, url string) bool {
	if t.Proxy == nil {
		return false
	}
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return true
	}
	u, err := t.Proxy(req)
	return err != nil || u != nil
}

// dialTLS dials as t would, with a batchconn.Conn under the TLS
// connection, which it keeps for the upgraded connection's coalescer.
func (ut *upgradeTransport) dialTLS(t *http.Transport) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		raw, cfg, err := dialUpgrade(ctx, t, network, addr)
		if err != nil {
			return nil, err
		}
		bc := batchconn.New(raw)
		tc := tls.Client(bc, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			raw.Close()
			return nil, err
		}
		ut.batch.Store(bc)
		return tc, nil
	}
}

// dialUpgrade dials addr as t would and answers the TLS configuration of
// an upgrade over it (a WebSocket's or a tunnel's): t's, for HTTP/1.1
// only, with the server's name when t's names none.
func dialUpgrade(ctx context.Context, t *http.Transport, network, addr string) (net.Conn, *tls.Config, error) {
	dial := t.DialContext
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	raw, err := dial(ctx, network, addr)
	if err != nil {
		return nil, nil, err
	}
	cfg := &tls.Config{}
	if t.TLSClientConfig != nil {
		cfg = t.TLSClientConfig.Clone()
	}
	if cfg.ServerName == "" {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			host = addr
		}
		cfg.ServerName = host
	}
	cfg.NextProtos = []string{"http/1.1"} // an upgrade is HTTP/1.1
	return raw, cfg, nil
}
