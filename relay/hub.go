// Package relay is the server's runtime state of interactive sessions
// (docs/ACCESS.md): which agents' control channels this replica holds, the
// sessions waiting for their agent's dial-back, and the splice between a
// client's WebSocket and an agent's. It holds no rules: who may open what
// is service.Sessions'. Nothing here is in the store; a restarted server
// starts with no control channels, and the agents dial in again.
package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/internal/batchconn"
)

// DefaultDialTimeout bounds how long Open waits for the agent's dial-back.
const DefaultDialTimeout = 10 * time.Second

// PingInterval is how often the hub pings a control channel, so that a
// dead agent (or a middlebox that drops idle connections) is noticed.
const PingInterval = 30 * time.Second

// ErrNoAgent is returned (wrapped in a *cloud.Error with code
// cloud.Unavailable) when this replica holds no control channel of the
// host.
var ErrNoAgent = errors.New("relay: no control channel of the host on this server")

// Hub holds the control channels of the agents connected to this replica
// and the sessions waiting for a dial-back. Safe for concurrent use.
type Hub struct {
	// DialTimeout bounds Open's wait (DefaultDialTimeout when zero).
	DialTimeout time.Duration

	mu      sync.Mutex
	agents  map[string]*control // by host ID
	pending map[string]*waiter  // by session ID
	// peers forwards the sessions of hosts whose channels another
	// replica holds (SetPeers); changed is Changed's channel.
	peers   *Peers
	changed chan struct{}
}

type control struct {
	ws    *websocket.Conn
	since time.Time
	wmu   sync.Mutex
	done  chan struct{}
}

type waiter struct {
	hostID string
	got    chan *Session
}

// NewHub returns an empty hub.
func NewHub() *Hub {
	return &Hub{agents: map[string]*control{}, pending: map[string]*waiter{}, changed: make(chan struct{})}
}

// Session is an agent's dial-back for one session. Close it when the
// session ends: that releases the agent's request handler.
type Session struct {
	// Conn is the agent's WebSocket; nil for a tunnel's (Raw).
	Conn *websocket.Conn
	// Raw is a tunnel's dial-back (internal/tunnel): the raw TCP
	// connection the server joins to the client's.
	Raw net.Conn
	// Batch is the connection under the dial-back's TLS (nil: none),
	// whose writes Splice gathers.
	Batch *batchconn.Conn
	done  chan struct{}
	once  sync.Once
}

// Close closes the agent's connection with code and reason, and lets its
// HTTP handler return.
func (s *Session) Close(code websocket.StatusCode, reason string) {
	s.once.Do(func() {
		if s.Conn != nil {
			s.Conn.Close(code, reason)
		}
		if s.Raw != nil {
			s.Raw.Close()
		}
		close(s.done)
	})
}

// Connected reports whether this replica holds hostID's control channel.
func (h *Hub) Connected(hostID string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.agents[hostID]
	return ok
}

// ServeControl holds hostID's control channel ws until it ends or ctx
// does. A newer channel of the same host replaces an older one (an agent
// that restarted before the server noticed the old connection's end).
func (h *Hub) ServeControl(ctx context.Context, hostID string, ws *websocket.Conn) error {
	c := &control{ws: ws, since: time.Now(), done: make(chan struct{})}
	h.mu.Lock()
	old := h.agents[hostID]
	h.agents[hostID] = c
	h.noteChange()
	h.mu.Unlock()
	if old != nil {
		old.ws.Close(websocket.StatusPolicyViolation, "replaced by a newer control channel")
	}
	defer func() {
		h.mu.Lock()
		if h.agents[hostID] == c {
			delete(h.agents, hostID)
			h.noteChange()
		}
		h.mu.Unlock()
		close(c.done)
	}()
	// The agent sends nothing; reading keeps pings and the close answered.
	ctx = ws.CloseRead(ctx)
	t := time.NewTicker(PingInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			ws.Close(websocket.StatusGoingAway, "server closing")
			return nil
		case <-t.C:
			pctx, cancel := context.WithTimeout(ctx, PingInterval/2)
			err := ws.Ping(pctx)
			cancel()
			if err != nil {
				ws.CloseNow()
				return fmt.Errorf("relay: control channel of %s: %w", hostID, err)
			}
		}
	}
}

// Open sends req to hostID's agent and waits for the agent's dial-back
// (DialTimeout at most). req.ID must be unique (the session's record).
// When this replica holds no control channel of the host and it has
// peers (SetPeers), the session is opened through the replica that holds
// it, and the Session's connection is the peer's WebSocket, which carries
// the agent's messages as they are.
func (h *Hub) Open(ctx context.Context, hostID string, req agentapi.SessionRequest) (*Session, error) {
	h.mu.Lock()
	local, peers := h.agents[hostID] != nil, h.peers
	h.mu.Unlock()
	if !local && peers != nil {
		return h.forward(ctx, peers, hostID, req)
	}
	return h.openLocal(ctx, hostID, req)
}

// OpenTunnel is Open for a tunnel (req.Kind agentapi.SessionTunnel),
// whose dial-back comes through AcceptRaw: on this replica's own control
// channel of hostID only, since a peer's would carry the bytes through
// one more relay (the client uses the WebSocket relay then).
func (h *Hub) OpenTunnel(ctx context.Context, hostID string, req agentapi.SessionRequest) (*Session, error) {
	return h.openLocal(ctx, hostID, req)
}

// openLocal is Open on this replica's own control channel of hostID.
func (h *Hub) openLocal(ctx context.Context, hostID string, req agentapi.SessionRequest) (*Session, error) {
	w := &waiter{hostID: hostID, got: make(chan *Session, 1)}
	h.mu.Lock()
	c := h.agents[hostID]
	if c != nil {
		h.pending[req.ID] = w
	}
	h.mu.Unlock()
	if c == nil {
		return nil, noAgent("the agent of the instance's host is not connected to this server replica; retry, or reach the replica it is connected to")
	}
	defer func() {
		// Under the lock that Accept sends under: a dial-back that came
		// as Open gave up is closed here, not left holding its handler.
		h.mu.Lock()
		delete(h.pending, req.ID)
		select {
		case s := <-w.got:
			s.Close(websocket.StatusGoingAway, "the session was abandoned")
		default:
		}
		h.mu.Unlock()
	}()
	timeout := h.DialTimeout
	if timeout <= 0 {
		timeout = DefaultDialTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	c.wmu.Lock()
	err = c.ws.Write(ctx, websocket.MessageText, b)
	c.wmu.Unlock()
	if err != nil {
		return nil, unavailable("sending the session to the host's agent failed", err)
	}
	select {
	case s := <-w.got:
		return s, nil
	case <-c.done:
		return nil, unavailable("the host's agent closed its control channel", nil)
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, unavailable(fmt.Sprintf("the host's agent did not open the session within %s", timeout), nil)
		}
		return nil, ctx.Err()
	}
}

func unavailable(msg string, err error) error {
	e := &cloud.Error{Code: cloud.Unavailable, Message: msg}
	if err != nil {
		e.Details = map[string]any{"reason": err.Error()}
	}
	return e
}

// Accept hands hostID's dial-back ws for session id to the Open waiting
// for it, and returns a channel closed when the session ends (the HTTP
// handler holds the connection until then). It returns false when no
// Open waits for id from that host: a dial-back that came too late, or
// one from another host, which must not reach another host's session.
func (h *Hub) Accept(hostID, id string, ws *websocket.Conn, batch *batchconn.Conn) (<-chan struct{}, bool) {
	return h.accept(hostID, id, &Session{Conn: ws, Batch: batch, done: make(chan struct{})})
}

// AcceptRaw is Accept for a tunnel's dial-back: the raw connection the
// agent's upgrade left (internal/tunnel.Upgrade).
func (h *Hub) AcceptRaw(hostID, id string, raw net.Conn) (<-chan struct{}, bool) {
	return h.accept(hostID, id, &Session{Raw: raw, done: make(chan struct{})})
}

func (h *Hub) accept(hostID, id string, s *Session) (<-chan struct{}, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w, ok := h.pending[id]
	if !ok || w.hostID != hostID {
		return nil, false
	}
	delete(h.pending, id)
	w.got <- s // buffered, and only one Accept per pending entry
	return s.done, true
}
