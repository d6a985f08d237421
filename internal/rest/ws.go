package rest

import (
	"context"
	"net/http"

	"github.com/coder/websocket"
)

// DialWebSocket opens a WebSocket to path (with query) on the client's
// server, with the client's token and HTTP client (so its TLS
// configuration, an agent's client certificate included), offering the
// given subprotocols. A refused upgrade answers the API's error as a
// *cloud.Error, as Do does. Its writes are coalesced (coalesce.go).
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
	hc.Transport = upgradeTransport{base: base}
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
