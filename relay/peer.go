package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/internal/batchconn"
	"github.com/gpucloud/gpucloud/internal/pki"
)

// Peer forwarding (docs/ACCESS.md, "Several replicas"). A replica that
// holds no control channel of a host opens the session through the
// replica that does: a WebSocket over mutual TLS 1.3 to the holder's
// PeerPath, whose first message is the session (peerRequest) and whose
// answer (peerReply) says whether the holder's agent dialed back. From
// then on it carries the agent's messages as they are, both ways: the
// receiving replica splices it to its client exactly as it would a local
// agent's dial-back, and the holder splices it to the agent's. Only
// replicas' certificates (pki.IsReplica) may call the route; the holder
// never forwards a forwarded session again.

// PeerPath is the route a replica serves to its peers.
const PeerPath = "/internal/replicas/sessions"

// PeerSubprotocol is the peer WebSocket's subprotocol.
const PeerSubprotocol = "v1.peer.gpucloud.dev"

// peerRequestLimit bounds the first message (an exec's command may carry
// 256 arguments of 64 KiB).
const peerRequestLimit = 20 << 20

type peerRequest struct {
	HostID  string                  `json:"host_id"`
	Session agentapi.SessionRequest `json:"session"`
}

type peerReply struct {
	Error *cloud.Error `json:"error,omitempty"`
}

// Peer is a replica that holds a host's control channel: its ID and the
// address (host:port) its peers reach it at.
type Peer struct {
	ID, Address string
}

// Routes is which peer holds each host's control channel, from the live
// replicas' records: self's own records are left out (the hub knows its
// own channels), and a host that two replicas claim (an agent that moved
// before the first noticed) goes to the one whose channel is newer, as
// the hub keeps the newer of two channels (ties: the greater replica ID,
// so that every replica picks the same).
func Routes(replicas []*cloud.Replica, self string) map[string]Peer {
	out := map[string]Peer{}
	since := map[string]time.Time{}
	for _, r := range replicas {
		if r.ID == self || r.Address == "" {
			continue
		}
		for _, h := range r.Hosts {
			old, ok := out[h.HostID]
			if ok && (h.Since.Before(since[h.HostID]) || h.Since.Equal(since[h.HostID]) && r.ID < old.ID) {
				continue
			}
			out[h.HostID] = Peer{ID: r.ID, Address: r.Address}
			since[h.HostID] = h.Since
		}
	}
	return out
}

// Peers reaches the other replicas: the routes (refreshed in the
// background by the replica's registry loop, never read from the store
// per session) and the mutual-TLS client. Safe for concurrent use.
type Peers struct {
	// Self is this replica's ID.
	Self string
	// Client dials peers: its transport presents this replica's
	// certificate (pki.CA.ReplicaCert) and trusts the peers' servers.
	Client *http.Client

	mu     sync.RWMutex
	routes map[string]Peer
}

// SetRoutes replaces the routes (Routes' answer).
func (p *Peers) SetRoutes(routes map[string]Peer) {
	p.mu.Lock()
	p.routes = routes
	p.mu.Unlock()
}

// Route answers the peer that holds hostID's control channel.
func (p *Peers) Route(hostID string) (Peer, bool) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	r, ok := p.routes[hostID]
	return r, ok
}

// SetPeers makes Open forward sessions of hosts this hub holds no
// control channel of through p (nil: none, as a lone replica).
func (h *Hub) SetPeers(p *Peers) {
	h.mu.Lock()
	h.peers = p
	h.mu.Unlock()
}

// Hosts answers the hosts whose control channels this hub holds, with
// the time each channel opened, in host ID order.
func (h *Hub) Hosts() []cloud.ReplicaHost {
	h.mu.Lock()
	out := make([]cloud.ReplicaHost, 0, len(h.agents))
	for id, c := range h.agents {
		out = append(out, cloud.ReplicaHost{HostID: id, Since: c.since})
	}
	h.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].HostID < out[j].HostID })
	return out
}

// Changed is closed (and replaced) when a control channel opens or
// closes, so that the registry writes the change without waiting for its
// next heartbeat.
func (h *Hub) Changed() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.changed
}

// noteChange wakes Changed's waiters; h.mu held.
func (h *Hub) noteChange() {
	close(h.changed)
	h.changed = make(chan struct{})
}

// forward opens req through the peer that holds hostID's channel.
func (h *Hub) forward(ctx context.Context, p *Peers, hostID string, req agentapi.SessionRequest) (*Session, error) {
	peer, ok := p.Route(hostID)
	if !ok || peer.ID == p.Self {
		return nil, noAgent("the agent of the instance's host is not connected to any server replica; it reconnects by itself, retry shortly")
	}
	timeout := h.DialTimeout
	if timeout <= 0 {
		timeout = DefaultDialTimeout
	}
	// The dial, the request and the holder's answer (which waits up to
	// its own DialTimeout for the agent) are bounded; the session is not.
	dctx, cancel := context.WithTimeout(ctx, timeout+5*time.Second)
	defer cancel()
	ws, resp, err := websocket.Dial(dctx, "wss://"+peer.Address+PeerPath, &websocket.DialOptions{
		HTTPClient: p.Client, Subprotocols: []string{PeerSubprotocol}})
	if err != nil {
		if resp != nil && resp.StatusCode == http.StatusForbidden {
			err = fmt.Errorf("%w (the peer refused this replica's certificate)", err)
		}
		return nil, unavailable("reaching the server replica "+peer.ID+" that holds the host's agent failed", err)
	}
	ws.SetReadLimit(peerRequestLimit)
	b, err := json.Marshal(peerRequest{HostID: hostID, Session: req})
	if err == nil {
		err = ws.Write(dctx, websocket.MessageText, b)
	}
	var reply peerReply
	if err == nil {
		var typ websocket.MessageType
		typ, b, err = ws.Read(dctx)
		if err == nil && typ != websocket.MessageText {
			err = errors.New("the peer's answer is not text")
		}
		if err == nil {
			err = json.Unmarshal(b, &reply)
		}
	}
	if err != nil {
		ws.CloseNow()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, unavailable("the server replica "+peer.ID+" that holds the host's agent did not open the session", err)
	}
	if reply.Error != nil {
		ws.Close(websocket.StatusNormalClosure, "")
		return nil, reply.Error
	}
	return &Session{Conn: ws, done: make(chan struct{})}, nil
}

func noAgent(msg string) error {
	return &cloud.Error{Code: cloud.Unavailable, Message: msg, Details: map[string]any{"reason": ErrNoAgent.Error()}}
}

// ServePeer is PeerPath's handler: a peer's forwarded session, opened on
// this replica's own control channel of the host (never forwarded again)
// and spliced to the agent's dial-back as it is. It answers 403 to any
// caller without a replica's certificate (pki.IsReplica), whatever else
// it presents: a tenant's token or an agent's certificate opens nothing.
func (h *Hub) ServePeer(w http.ResponseWriter, r *http.Request) {
	if !pki.IsReplica(r.TLS) {
		peerError(w, http.StatusForbidden, &cloud.Error{Code: cloud.PermissionDenied,
			Message: PeerPath + " is for the server replicas' certificates only"})
		return
	}
	if r.Method != http.MethodGet || !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		peerError(w, http.StatusBadRequest, &cloud.Error{Code: cloud.Invalid, Message: PeerPath + " is a WebSocket"})
		return
	}
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{PeerSubprotocol}})
	if err != nil {
		return
	}
	ctx := r.Context()
	ws.SetReadLimit(peerRequestLimit)
	typ, b, err := ws.Read(ctx)
	var req peerRequest
	if err == nil && typ == websocket.MessageText {
		err = json.Unmarshal(b, &req)
	}
	if err != nil || typ != websocket.MessageText || req.HostID == "" || req.Session.ID == "" {
		ws.Close(websocket.StatusPolicyViolation, "want a session request")
		return
	}
	s, err := h.openLocal(ctx, req.HostID, req.Session)
	var reply peerReply
	if err != nil {
		var ce *cloud.Error
		if !errors.As(err, &ce) {
			ce = &cloud.Error{Code: cloud.Unavailable, Message: err.Error()}
		}
		reply.Error = ce
	}
	b, _ = json.Marshal(reply)
	if werr := ws.Write(ctx, websocket.MessageText, b); werr != nil || err != nil {
		if s != nil {
			s.Close(websocket.StatusGoingAway, "the peer went away")
		}
		ws.Close(websocket.StatusNormalClosure, "")
		return
	}
	defer s.Close(websocket.StatusNormalClosure, "")
	_, _ = Splice(ctx, ws, batchconn.From(ctx), s, false)
}

func peerError(w http.ResponseWriter, status int, e *cloud.Error) {
	b, _ := json.Marshal(e)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
