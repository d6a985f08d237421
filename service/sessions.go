package service

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
)

// Sessions holds the rules of interactive sessions into instances (exec,
// port forward, SSH, file copies; docs/ACCESS.md): who may open one, on
// what, how many at once, and their records and events. The relay that
// carries a session's bytes is the server's runtime state (package relay);
// it asks Start first and tells End last.
type Sessions struct{ base }

// SessionPrefix is the ID prefix of sessions.
const SessionPrefix = "ses-"

// DefaultSessionLimit is how many sessions one user may have open at once
// when Options.SessionLimit is zero.
const DefaultSessionLimit = 16

// The session kinds (agentapi.SessionRequest.Kind).
var sessionKinds = map[string]bool{"exec": true, "forward": true, "ssh": true, "files": true}

// SessionStart is what Start grants: the record, and the host whose agent
// serves the session.
type SessionStart struct {
	Session *cloud.Session
	HostID  string
}

// Start checks that actor may open a session of kind into instanceID and
// records it: the instance must be the actor's tenant's (another
// tenant's answers not_found, as a missing one does; an admin may open
// any, and the event records that an admin did), running on a host
// (another state answers conflict naming it), and the actor under its
// limit of open sessions (quota_exceeded). summary is what the records
// show of the session (the command line, the port).
func (s *Sessions) Start(ctx context.Context, a Actor, instanceID, kind, summary string) (*SessionStart, error) {
	if !sessionKinds[kind] {
		return nil, cloud.Errorf(cloud.Invalid, "session kind %q is not exec, forward, ssh or files", kind)
	}
	if a.ID == "" || a.Role != cloud.RoleAdmin && a.Role != cloud.RoleMember {
		return nil, cloud.Errorf(cloud.PermissionDenied, "sessions are opened by users")
	}
	var out *SessionStart
	err := s.tx(ctx, func(tx cloud.Tx) error {
		in, err := Visible(ctx, a, "instance", instanceID, tx.GetInstance)
		if err != nil {
			return err
		}
		if err := sessionTarget(in, kind); err != nil {
			return err
		}
		limit := s.opts.SessionLimit
		if limit <= 0 {
			limit = DefaultSessionLimit
		}
		n, err := tx.CountOpenSessions(ctx, a.ID)
		if err != nil {
			return err
		}
		if n >= limit {
			return &cloud.Error{Code: cloud.QuotaExceeded,
				Message: fmt.Sprintf("user %s has %d sessions open, the limit; end one first", a.ID, n),
				Details: map[string]any{"limit": limit, "open": n}}
		}
		ses := &cloud.Session{ID: NewID(SessionPrefix), TenantID: in.TenantID, InstanceID: in.ID, UserID: a.ID,
			Kind: kind, Command: summary, StartedAt: s.now(), Replica: s.opts.Replica}
		if err := tx.CreateSession(ctx, ses); err != nil {
			return err
		}
		details := map[string]any{"session_id": ses.ID, "kind": kind, "command": summary}
		if a.Admin() && a.TenantID != in.TenantID {
			// An operator in a tenant's instance is what an audit looks for.
			details["admin"] = true
		}
		out = &SessionStart{Session: ses, HostID: in.HostID}
		return tx.AppendEvent(ctx, &cloud.Event{Time: ses.StartedAt, Kind: cloud.EventSessionStarted,
			TenantID: in.TenantID, InstanceID: in.ID, HostID: in.HostID, Actor: a.ID,
			Reason: sessionLine(kind, summary), Details: mustJSON(details)})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// sessionTarget refuses an instance that a session of kind cannot reach:
// one not running on a host.
func sessionTarget(in *cloud.Instance, kind string) error {
	if in.State != cloud.Running || in.HostID == "" {
		return &cloud.Error{Code: cloud.Conflict,
			Message: fmt.Sprintf("instance %s is %s; a %s session needs a running instance", in.ID, in.State, kind),
			Details: map[string]any{"id": in.ID, "state": string(in.State)}}
	}
	return nil
}

// Reachable answers instance instanceID when actor a could open a session
// of kind into it now, with Start's answers otherwise (not_found for
// another tenant's, conflict for one not running), and records nothing.
// The HTTP proxy of published ports asks it for every request, since its
// sessions (one per TCP connection to the workload) outlive requests.
func (s *Sessions) Reachable(ctx context.Context, a Actor, instanceID, kind string) (*cloud.Instance, error) {
	if a.ID == "" || a.Role != cloud.RoleAdmin && a.Role != cloud.RoleMember {
		return nil, cloud.Errorf(cloud.PermissionDenied, "sessions are opened by users")
	}
	var in *cloud.Instance
	err := s.tx(ctx, func(tx cloud.Tx) error {
		var err error
		if in, err = Visible(ctx, a, "instance", instanceID, tx.GetInstance); err != nil {
			return err
		}
		return sessionTarget(in, kind)
	})
	if err != nil {
		return nil, err
	}
	return in, nil
}

// End closes session id with its exit code (nil when none came back) and
// the reason it ended, and records the instance's session.ended event
// with who, what, how long and how it ended. Ending a session that has
// ended already is a conflict.
func (s *Sessions) End(ctx context.Context, id string, exitCode *int, reason string) error {
	return s.tx(ctx, func(tx cloud.Tx) error { return s.end(ctx, tx, id, exitCode, reason) })
}

func (s *Sessions) end(ctx context.Context, tx cloud.Tx, id string, exitCode *int, reason string) error {
	ses, err := tx.GetSession(ctx, id)
	if err != nil {
		return err
	}
	at := s.now()
	if err := tx.EndSession(ctx, id, at, exitCode, reason); err != nil {
		return err
	}
	details := map[string]any{"session_id": id, "kind": ses.Kind, "command": ses.Command,
		"duration_ms": at.Sub(ses.StartedAt).Milliseconds()}
	if exitCode != nil {
		details["exit_code"] = *exitCode
	}
	line := sessionLine(ses.Kind, ses.Command) + ": "
	if exitCode != nil {
		line += fmt.Sprintf("exit %d, ", *exitCode)
	}
	line += fmt.Sprintf("%s after %s", reason, at.Sub(ses.StartedAt).Round(time.Millisecond))
	return tx.AppendEvent(ctx, &cloud.Event{Time: at, Kind: cloud.EventSessionEnded, TenantID: ses.TenantID,
		InstanceID: ses.InstanceID, Actor: ses.UserID, Reason: line, Details: mustJSON(details)})
}

// sessionLine is how an event's reason names a session, so that an
// instance's event list says what each session ran: "exec: sh -c ...",
// "port-forward: 8888".
func sessionLine(kind, summary string) string {
	if summary == "" {
		return kind
	}
	const max = 200
	if len(summary) > max {
		summary = summary[:max] + "..."
	}
	return kind + ": " + summary
}

// ReasonServerRestarted is the end reason of the sessions a server
// closes at its start: the relay that carried them is gone.
const ReasonServerRestarted = "server restarted"

// CloseLeftOpen closes the sessions this replica (Options.Replica) left
// open when it stopped, with ReasonServerRestarted, and returns how many.
// A server calls it once at start, before it relays anything.
func (s *Sessions) CloseLeftOpen(ctx context.Context) (int, error) {
	n := 0
	err := s.tx(ctx, func(tx cloud.Tx) error {
		n = 0
		open, err := tx.OpenSessions(ctx, s.opts.Replica)
		if err != nil {
			return err
		}
		for _, ses := range open {
			if err := s.end(ctx, tx, ses.ID, nil, ReasonServerRestarted); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	return n, err
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // maps of strings and numbers always marshal
	}
	return b
}
