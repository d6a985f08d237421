package httpapi

import (
	"log/slog"
	"net/http"

	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/relay"
	"github.com/gpucloud/gpucloud/service"
)

// Exec is the API's exec relay for a front end that authenticates its
// requests itself: the web console's terminal, whose browser holds a
// session cookie rather than a bearer token. It is GET
// /v1/instances/{id}/exec after the authentication: the same
// service.Sessions rules and records, the same agents' hub, the same
// splice (handlers.relay), so that there is one implementation of a
// session. Its Terminal method is the console's Terminals.
type Exec struct{ h *handlers }

// NewWithExec returns the API's handler, as New does, and its exec relay
// for the console, both over the same hub of agent control channels
// (opts.Relay, or a new one when nil): an agent connected to the API
// serves the console's sessions as well.
func NewWithExec(svc *service.Services, opts Options) (http.Handler, *Exec) {
	if opts.Relay == nil {
		opts.Relay = relay.NewHub()
	}
	h := New(svc, opts)
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	return h, &Exec{h: &handlers{svc: svc, cat: svc.Catalog(), now: svc.Now, log: log, hub: opts.Relay}}
}

// Terminal runs command in instance id as actor with a terminal of
// cols × rows and stdin, as GET /v1/instances/{id}/exec?tty=1&stdin=1
// does: an error is a refusal before the upgrade (another tenant's
// instance not_found, a stopped one conflict, a user over their session
// limit quota_exceeded, an unreachable agent unavailable), and nothing
// has been written to w.
func (e *Exec) Terminal(w http.ResponseWriter, r *http.Request, actor service.Actor, id string, command []string, cols, rows uint16) error {
	req := agentapi.SessionRequest{Kind: agentapi.SessionExec, Command: command, TTY: true, Stdin: true, Cols: cols, Rows: rows}
	p := principal{UserID: actor.ID, TenantID: actor.TenantID, Role: actor.Role}
	return e.h.relay(w, r, p, id, req, summarize(command), true)
}
