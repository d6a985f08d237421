package httpapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
)

// Published HTTP ports (docs/ACCESS.md, "Published HTTP ports"): any
// request to /v1/instances/{id}/ports/{port}/{path...} is proxied to
// 127.0.0.1:{port} inside the instance by an httputil.ReverseProxy whose
// transport dials through the relay: each new TCP connection to the
// workload is a "forward" session (service.Sessions: record, events,
// limit) over the agent's dial-back WebSocket. Nothing listens on the host
// or the instance.

// portsPath is the route's path, under GET, POST, PUT, PATCH, DELETE and
// OPTIONS (HEAD goes with GET).
const portsPath = "/v1/instances/{id}/ports/{port}/{path...}"

// portIdleTimeout is how long an idle connection to a workload stays
// pooled, and so how long its session stays open after its last request.
const portIdleTimeout = 60 * time.Second

// portsProxy is the proxy of every published port. Its connection pool
// is keyed by (user, instance, port): a pooled connection is a session of
// one user, never reused for another user's request.
type portsProxy struct {
	s     *handlers
	proxy *httputil.ReverseProxy
	// targets maps a pool key (the outgoing URL's host) to what its
	// connections dial. It is not pruned: an entry is a few dozen bytes
	// per (user, instance, port) ever opened on this replica.
	mu      sync.Mutex
	targets map[string]portTarget
}

type portTarget struct {
	actor    service.Actor
	instance string
	port     int
}

// portRequest carries what the handler checked to the proxy's rewrite.
type portRequest struct {
	key, prefix, path string
}

type portRequestKey struct{}

func newPortsProxy(s *handlers) *portsProxy {
	pp := &portsProxy{s: s, targets: map[string]portTarget{}}
	tr := &http.Transport{
		DialContext:         pp.dial,
		IdleConnTimeout:     portIdleTimeout,
		MaxIdleConnsPerHost: 4,
		// The workload's HTTP is plain: the hop to it is already inside
		// the agent's mutual TLS.
		ForceAttemptHTTP2: false,
	}
	pp.proxy = &httputil.ReverseProxy{
		Rewrite:      pp.rewrite,
		Transport:    tr,
		ErrorHandler: pp.fail,
		// Streamed responses (server-sent events, TensorBoard) flush at once.
		FlushInterval: -1,
	}
	return pp
}

// openPort checks the request (the instance visible and running, the port
// published) and proxies it.
func (s *handlers) openPort(w http.ResponseWriter, r *http.Request, p principal) error {
	id := r.PathValue("id")
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil || port < 1 || port > 65535 {
		return &cloud.Error{Code: cloud.Invalid, Message: "port: want a TCP port from 1 to 65535", Details: map[string]any{"field": "port"}}
	}
	in, err := s.svc.Sessions.Reachable(r.Context(), p.actor(), id, agentapi.SessionForward)
	if err != nil {
		return err
	}
	if !slices.Contains(in.Publish, port) {
		return &cloud.Error{Code: cloud.NotFound,
			Message: fmt.Sprintf("instance %s does not publish port %d (published: %s); publish it at create with --publish %d",
				in.ID, port, publishedList(in.Publish), port),
			Details: map[string]any{"id": in.ID, "port": port, "published": in.Publish}}
	}
	if isUpgrade(r) {
		// A WebSocket through the proxy lives as long as its session.
		clearDeadlines(w)
	}
	key := s.ports.target(portTarget{actor: p.actor(), instance: in.ID, port: port})
	prefix := fmt.Sprintf("/v1/instances/%s/ports/%d", in.ID, port)
	path := "/" + r.PathValue("path")
	if slices.Contains(in.PublishKeepPrefix, port) {
		// A server whose base URL is the prefix (Jupyter, TensorBoard)
		// serves the whole path.
		path = prefix + path
	}
	ctx := context.WithValue(r.Context(), portRequestKey{}, portRequest{key: key, prefix: prefix, path: path})
	s.ports.proxy.ServeHTTP(w, r.WithContext(ctx))
	return nil
}

func publishedList(ports []int) string {
	if len(ports) == 0 {
		return "none"
	}
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, ", ")
}

func isUpgrade(r *http.Request) bool {
	return strings.Contains(strings.ToLower(r.Header.Get("Connection")), "upgrade") && r.Header.Get("Upgrade") != ""
}

// target names the pool of t's connections: a host name derived from the
// user, instance and port, so that two users never share a connection.
func (pp *portsProxy) target(t portTarget) string {
	sum := sha256.Sum256([]byte(t.actor.ID + "\x00" + t.actor.TenantID + "\x00" + string(t.actor.Role)))
	key := fmt.Sprintf("%s.%s.p%d.ports.invalid", hex.EncodeToString(sum[:8]), strings.ToLower(t.instance), t.port)
	pp.mu.Lock()
	pp.targets[key] = t
	pp.mu.Unlock()
	return key
}

// rewrite sends the request to the pool of its target, with the route's
// prefix taken away (X-Forwarded-Prefix says what it was), or kept for a
// port published to keep it (Instance.PublishKeepPrefix: Jupyter's
// base_url), and without the tenant's gpucloud credentials: the workload
// must never see the token that reached the server.
func (pp *portsProxy) rewrite(pr *httputil.ProxyRequest) {
	req, _ := pr.In.Context().Value(portRequestKey{}).(portRequest)
	pr.Out.URL.Scheme, pr.Out.URL.Host = "http", req.key
	pr.Out.URL.Path, pr.Out.URL.RawPath = req.path, ""
	pr.Out.Host = pr.In.Host // the workload sees the host the browser used (Jupyter's origin check)
	pr.SetXForwarded()
	pr.Out.Header.Set("X-Forwarded-Prefix", req.prefix)
	pr.Out.Header.Del("Authorization")
	stripCookies(pr.Out.Header)
}

// gpucloudCookie is the prefix of the cookies the server sets (the
// console's session, gpucloud_session): none is passed to a workload.
const gpucloudCookie = "gpucloud_"

// stripCookies removes the gpucloud cookies from h's Cookie headers and
// keeps the workload's own (Jupyter's _xsrf, its login).
func stripCookies(h http.Header) {
	var keep []string
	for _, line := range h.Values("Cookie") {
		for _, c := range strings.Split(line, ";") {
			name, _, _ := strings.Cut(strings.TrimSpace(c), "=")
			if name != "" && !strings.HasPrefix(name, gpucloudCookie) {
				keep = append(keep, strings.TrimSpace(c))
			}
		}
	}
	h.Del("Cookie")
	if len(keep) > 0 {
		h.Set("Cookie", strings.Join(keep, "; "))
	}
}

// fail answers a proxy error: a refused session (over the limit, no
// agent) as the API's error, anything else as 502 naming the cause.
func (pp *portsProxy) fail(w http.ResponseWriter, r *http.Request, err error) {
	var ce *cloud.Error
	if errors.As(err, &ce) {
		writeError(w, r, pp.s.log, ce)
		return
	}
	if errors.Is(err, context.Canceled) {
		return // the client went away
	}
	writeError(w, r, pp.s.log, &statusError{status: http.StatusBadGateway, err: &cloud.Error{Code: cloud.Unavailable,
		Message: "the instance's published port did not answer: " + err.Error() + " (is the server inside listening on it?)"}})
}

// dial opens one TCP connection to the workload: a forward session,
// started through service.Sessions and relayed by the instance's agent.
// The session ends when the connection closes.
func (pp *portsProxy) dial(ctx context.Context, _, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	pp.mu.Lock()
	t, ok := pp.targets[host]
	pp.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("no published port target %s", host)
	}
	s := pp.s
	start, err := s.svc.Sessions.Start(ctx, t.actor, t.instance, agentapi.SessionForward, "port "+strconv.Itoa(t.port)+" (http)")
	if err != nil {
		return nil, err
	}
	id := start.Session.ID
	req := agentapi.SessionRequest{Kind: agentapi.SessionForward, Port: t.port,
		ID: id, InstanceID: start.Session.InstanceID, Actor: t.actor.ID}
	agent, err := s.hub.Open(ctx, start.HostID, req)
	if err != nil {
		s.endSession(id, nil, "the host's agent did not open it: "+err.Error())
		return nil, err
	}
	// The connection outlives the request that dialed it (it is pooled):
	// its context is its own, cancelled when it closes.
	cctx, cancel := context.WithCancel(context.Background())
	c := &sessionConn{Conn: websocket.NetConn(cctx, agent.Conn, websocket.MessageBinary)}
	c.end = func() {
		cancel()
		agent.Close(websocket.StatusNormalClosure, "")
		s.endSession(id, nil, "closed")
	}
	return c, nil
}

// sessionConn is a proxied connection whose Close ends its session once.
type sessionConn struct {
	net.Conn
	once sync.Once
	end  func()
}

func (c *sessionConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.end)
	return err
}
