package cloud

import (
	"context"
	"time"
)

// Session is the record of one interactive session into an instance
// (docs/ACCESS.md): an exec, a port forward, an SSH session or a file
// copy. It is written when the session starts and closed when it ends;
// the relay itself is the server's runtime state, not the store's.
type Session struct {
	ID         string `json:"id"`
	TenantID   string `json:"tenant_id"`
	InstanceID string `json:"instance_id"`
	// UserID is the actor who opened it (an admin's ID when an admin
	// opened a tenant's instance).
	UserID string `json:"user_id"`
	// Kind is exec, forward, ssh or files.
	Kind string `json:"kind"`
	// Command summarizes what ran: the command line of an exec, the port
	// of a forward.
	Command   string     `json:"command"`
	StartedAt time.Time  `json:"started_at"`
	EndedAt   *time.Time `json:"ended_at,omitempty"`
	// ExitCode is the exec's exit code when one came back.
	ExitCode *int `json:"exit_code,omitempty"`
	// EndReason says why it ended ("exited", "client closed", "server
	// restarted", ...).
	EndReason string `json:"end_reason,omitempty"`
	// Replica names the server replica that relays it: a replica that
	// restarts closes only its own sessions left open.
	Replica string `json:"replica,omitempty"`
}

// The events of sessions (on the instance).
const (
	EventSessionStarted EventKind = "session.started"
	EventSessionEnded   EventKind = "session.ended"
	// EventSessionDirect is what the agent reports of a direct session
	// (a grant's connections, bytes and time), once its grant has
	// expired and its last connection closed: on the instance, or for a
	// detached volume with no instance.
	EventSessionDirect EventKind = "session.direct"
)

// SessionTx keeps the session records.
type SessionTx interface {
	// CreateSession inserts an open session; Conflict when the ID
	// exists, NotFound when its instance does not.
	CreateSession(ctx context.Context, s *Session) error
	GetSession(ctx context.Context, id string) (*Session, error)
	// EndSession closes an open session at at with its exit code (nil:
	// none came back) and reason; NotFound when there is no such session,
	// Conflict when it has ended already.
	EndSession(ctx context.Context, id string, at time.Time, exitCode *int, reason string) error
	// CountOpenSessions counts userID's sessions that have not ended.
	CountOpenSessions(ctx context.Context, userID string) (int, error)
	// OpenSessions lists the sessions of replica (every replica's when
	// empty) that have not ended, in ID order.
	OpenSessions(ctx context.Context, replica string) ([]*Session, error)
	// RecordDirectReport notes that the report of direct grant grantID
	// whose first connection was at first, from host hostID, was recorded
	// at at; Conflict when it was already, so that an agent's report sent
	// again is recorded once. Another report of the grant (an agent that
	// restarted while the grant was valid serves it again, and reports
	// that run apart) has another first connection, and is recorded too.
	RecordDirectReport(ctx context.Context, grantID, hostID string, first, at time.Time) error
}
