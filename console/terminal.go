package console

import (
	"net/http"
	"net/url"
	"strconv"
	"unicode/utf8"

	"github.com/coder/websocket"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
)

// Terminals opens the instance page's terminal sessions. The server hands
// the console the API's own exec relay (the one behind GET
// /v1/instances/{id}/exec), so that a terminal is an API exec session in
// every respect: the same rules (tenancy, running state, per-user session
// limits), checked by the same service, and the same audit (an event on
// the instance with who, when, what command and how long). The console
// adds only its own authentication (the session cookie) and its
// cross-site WebSocket check (terminalSocket).
type Terminals interface {
	// Terminal runs command in instance id as actor, with a terminal of
	// cols × rows and stdin: it checks the session's rules, opens it on
	// the instance's agent, upgrades r to a framed exec WebSocket
	// (subprotocol TerminalSubprotocol) and relays it until it ends. An
	// error means the session was refused before the upgrade, and nothing
	// has been written to w; how an upgraded session ends is the relay's,
	// on the WebSocket.
	Terminal(w http.ResponseWriter, r *http.Request, actor service.Actor, id string, command []string, cols, rows uint16) error
}

// TerminalSubprotocol is the WebSocket subprotocol of the terminal's
// connection, the API's exec framing (internal/stream): each binary
// message one channel byte (0 stdin, 1 stdout, 2 stderr, 3 the exit
// status as JSON, 4 a resize as JSON, 255 a channel's close) and its
// payload.
const TerminalSubprotocol = "v1.exec.gpucloud.dev"

// terminalShell is what the terminal runs: a login shell, which every
// image the cloud runs has (busybox's included).
var terminalShell = []string{"/bin/sh", "-l"}

// The terminal's size bounds: the page sends its fitted size, and a size
// out of these is the default's.
const (
	defaultCols, defaultRows = 80, 24
	maxTermSize              = 1000
)

// refusalCodeBase is added to the HTTP status of a refused session to
// make the WebSocket close code the page reads (4404 not found, 4409 the
// instance is not running, 4403 the user's session limit, 4503 the
// host's agent not reachable): a browser sees nothing of a
// refused handshake, so the console accepts the socket and closes it with
// the API's message instead.
const refusalCodeBase = 4000

// terminalSocket serves GET /instances/{id}/terminal/ws, the terminal's
// WebSocket. A WebSocket is not bound by the same-origin policy, and a
// browser that sends a site's cookies on one another site's page opens
// gives that page the user's session (cross-site WebSocket hijacking);
// CSRF tokens do not apply to the handshake, a GET. So before anything
// else the Origin, which browsers always send on a WebSocket, must be
// this console's own; SameSite=Strict on the cookie is the second guard. Then
// the session cookie is checked under the request limits, as every
// page's is, and the API's exec relay runs the shell.
func (c *Console) terminalSocket(w http.ResponseWriter, r *http.Request) {
	if !socketSameOrigin(r) {
		http.Error(w, "cross-site WebSocket refused: the Origin is not this console's", http.StatusForbidden)
		return
	}
	s, err := c.session(r)
	if err != nil {
		status, msg := c.statusOf(r, err)
		if status == http.StatusTooManyRequests {
			retryAfter(w, err)
		}
		http.Error(w, msg, status)
		return
	}
	if c.terms == nil {
		c.refuseSocket(w, r, &cloud.Error{Code: cloud.Conflict, Message: "this server has no terminal relay"})
		return
	}
	q := r.URL.Query()
	cols, rows := termSize(q.Get("cols"), defaultCols), termSize(q.Get("rows"), defaultRows)
	if err := c.terms.Terminal(w, r, s.actor, r.PathValue("id"), terminalShell, cols, rows); err != nil {
		c.refuseSocket(w, r, err)
	}
}

// socketSameOrigin reports whether a WebSocket handshake comes from the
// console's own pages: it must carry an Origin, of this host, and not be
// marked cross-site (sameOrigin).
func socketSameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" || o == "null" {
		return false
	}
	u, err := url.Parse(o)
	if err != nil || u.Host != r.Host || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	return sameOrigin(r)
}

func termSize(v string, def uint16) uint16 {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > maxTermSize {
		return def
	}
	return uint16(n)
}

// refuseSocket answers a refused terminal on the WebSocket itself, so
// that the page can show why: it accepts the handshake (its Origin
// checked already) and closes it with refusalCodeBase + the API's HTTP
// status and the API's message (an internal error's cause is logged, not
// shown).
func (c *Console) refuseSocket(w http.ResponseWriter, r *http.Request, err error) {
	status, msg := c.statusOf(r, err)
	ws, aerr := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{TerminalSubprotocol}})
	if aerr != nil {
		// Accept has answered the handshake's error itself.
		return
	}
	ws.Close(websocket.StatusCode(refusalCodeBase+status), closeReason(msg))
}

// maxCloseReason is the most bytes a WebSocket close reason may hold.
const maxCloseReason = 123

// closeReason cuts msg to a close frame's limit, on a character boundary.
func closeReason(msg string) string {
	if len(msg) <= maxCloseReason {
		return msg
	}
	cut := maxCloseReason - len("…")
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + "…"
}

// terminalState is whether the instance page offers a terminal, and why
// not when it does not.
func (c *Console) terminalState(in *cloud.Instance) (bool, string) {
	switch {
	case c.terms == nil:
		return false, "this server has no terminal relay"
	case in.State != cloud.Running:
		return false, "the instance is " + string(in.State)
	}
	return true, ""
}
