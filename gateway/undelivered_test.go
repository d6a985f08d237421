package gateway

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/coder/websocket"

	"github.com/gpucloud/gpucloud/cloud"
)

// TestUndelivered: a request whose session to the worker's host could not
// be opened, or that the host's agent refused with policy violation (the
// instance is not running there), never reached the worker; one cut off
// otherwise (the worker went mid-request, an internal error) may have, and
// is an attempt. Errors come through net/http's transport as the gateway
// sees them.
func TestUndelivered(t *testing.T) {
	// An agent stand-in: it accepts the session, then closes it with the
	// status the test names, as the agent does before forwarding.
	closeWith := make(chan websocket.StatusCode, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		ws.Close(<-closeWith, "instance i-1 is not running on this host")
	}))
	defer srv.Close()
	session := func(ctx context.Context) (net.Conn, error) {
		ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
		if err != nil {
			return nil, err
		}
		return newRelayConn(websocket.NetConn(context.Background(), ws, websocket.MessageBinary), func() {}), nil
	}
	for _, c := range []struct {
		name   string
		status websocket.StatusCode
		dial   func(ctx context.Context) (net.Conn, error)
		want   bool
	}{
		{"no session", 0, func(context.Context) (net.Conn, error) {
			return nil, &DialError{errors.New("the host's agent closed its control channel")}
		}, true},
		{"refused by the agent", websocket.StatusPolicyViolation, session, true},
		{"cut off by an internal error", websocket.StatusInternalError, session, false},
		{"a plain connection error", 0, func(context.Context) (net.Conn, error) {
			a, b := net.Pipe()
			b.Close()
			return a, nil
		}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.status != 0 {
				closeWith <- c.status
			}
			tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return c.dial(ctx) }}
			defer tr.CloseIdleConnections()
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://i-1.worker.invalid:8080/run", strings.NewReader(`{"id":"job-1"}`))
			resp, err := tr.RoundTrip(req)
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				t.Fatal("the request was answered")
			}
			if got := Undelivered(err); got != c.want {
				t.Errorf("Undelivered(%v) = %v, want %v", err, got, c.want)
			}
		})
	}
}

// TestWakeDemand: a job for an endpoint the gateway has no free worker
// for tells Config.Demand (the leader's controllers then run at once);
// one a free worker takes does not.
func TestWakeDemand(t *testing.T) {
	var n atomic.Int32
	g := New(Config{Demand: func() { n.Add(1) }})
	g.Wake("ep-unknown")
	if n.Load() != 1 {
		t.Fatalf("a job for an endpoint with no worker here: demand told %d times", n.Load())
	}
	es := &endpoint{ep: &cloud.Endpoint{ID: "ep-1", Spec: cloud.EndpointSpec{Concurrency: 1}}, workers: map[string]*worker{}, changed: make(chan struct{})}
	g.endpoints["ep-1"] = es
	g.Wake("ep-1")
	if n.Load() != 2 {
		t.Fatalf("no ready worker: demand told %d times, want 2", n.Load())
	}
	es.workers["i-1"] = &worker{id: "i-1", ready: true}
	g.Wake("ep-1")
	if n.Load() != 2 {
		t.Errorf("a ready worker with a free slot: demand told %d times, want still 2", n.Load())
	}
}

// TestRefreshNow: requests to read the worker table again coalesce into
// one pending read, and never block.
func TestRefreshNow(t *testing.T) {
	g := New(Config{})
	for range 3 {
		g.RefreshNow()
	}
	if n := len(g.refreshNow); n != 1 {
		t.Fatalf("%d pending reads, want 1", n)
	}
}
