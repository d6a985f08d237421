package rest

import (
	"net/http"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
)

// A cold client sends its first request alone. Go's http.Transport dials
// a connection for every request that finds none idle, even when the
// first one will speak HTTP/2 and could carry them all: 64 concurrent
// first requests to the API (a burst of creates, a Terraform apply with
// parallelism) cost the server and the client 64 TLS handshakes where one
// would do. So a Client's first request over HTTPS goes out on its own,
// and those that come meanwhile wait until it has its connection (not its
// answer: a long poll must not hold the others), then go out and find it
// (TestColdClientDialsOnce). A first request that fails before it has a
// connection lets the others go too, each to dial on its own, as before.
// Plain HTTP is left alone: HTTP/1.1 carries one request at a time per
// connection anyway. The gate is the Client's, so clients that share a
// transport each send a first request of their own.

// firstConn is a Client's gate: open once its first request has had a
// connection, or has failed without one.
type firstConn struct {
	leading atomic.Bool   // a first request is on its way
	open    chan struct{} // closed when the gate opens
	once    sync.Once
}

func (g *firstConn) release() { g.once.Do(func() { close(g.open) }) }

// coldGate returns the client's gate for req, or nil when req need not
// wait (plain HTTP, or the gate open).
func (c *Client) coldGate(req *http.Request) *firstConn {
	g := c.cold
	if g == nil || req.URL.Scheme != "https" {
		return nil
	}
	select {
	case <-g.open:
		return nil
	default:
		return g
	}
}

// pass waits for req's turn at g. It returns the request to send (the
// first one traced, so that the gate opens as soon as it has a
// connection) and done, which the caller calls once the request has been
// answered or has failed: a first request that failed before it had a
// connection opens the gate then, and the others dial on their own.
func (g *firstConn) pass(req *http.Request) (*http.Request, func(), error) {
	if g.leading.CompareAndSwap(false, true) {
		trace := &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { g.release() }}
		return req.WithContext(httptrace.WithClientTrace(req.Context(), trace)), g.release, nil
	}
	select {
	case <-g.open:
		return req, func() {}, nil
	case <-req.Context().Done():
		return nil, nil, req.Context().Err()
	}
}
