package sqlstore

import (
	"context"
	"database/sql"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
)

// Sessions: cloud.SessionTx.

const sessionCols = "id, tenant_id, instance_id, user_id, kind, command, started_at, ended_at, exit_code, end_reason, replica"

func scanSession(sc scanner) (*cloud.Session, error) {
	var s cloud.Session
	var code sql.NullInt64
	err := sc.Scan(&s.ID, &s.TenantID, &s.InstanceID, &s.UserID, &s.Kind, &s.Command,
		timeCol{&s.StartedAt}, nullTimeCol{&s.EndedAt}, &code, &s.EndReason, &s.Replica)
	if code.Valid {
		c := int(code.Int64)
		s.ExitCode = &c
	}
	return &s, err
}

func (t *tx) CreateSession(ctx context.Context, s *cloud.Session) error {
	switch {
	case s.ID == "" || s.TenantID == "" || s.InstanceID == "" || s.Kind == "":
		return invalidf("session needs an id, a tenant, an instance and a kind")
	case s.EndedAt != nil:
		return invalidf("session %s: a new session is open", s.ID)
	}
	if err := t.mustExist(ctx, "instances", "instance", s.InstanceID); err != nil {
		return err
	}
	started := normTime(s.StartedAt)
	n, err := t.execN(ctx, "create session "+s.ID,
		"INSERT INTO sessions ("+sessionCols+") VALUES (?, ?, ?, ?, ?, ?, ?, NULL, NULL, '', ?) ON CONFLICT DO NOTHING",
		s.ID, s.TenantID, s.InstanceID, s.UserID, s.Kind, s.Command, t.s.d.timeArg(started), s.Replica)
	if err != nil {
		return err
	}
	if n == 0 {
		return conflictf("session %s already exists", s.ID)
	}
	s.StartedAt = started
	return nil
}

func (t *tx) GetSession(ctx context.Context, id string) (*cloud.Session, error) {
	return one(ctx, t, "get session "+id, func() error { return notFoundf("session %s not found", id) },
		"SELECT "+sessionCols+" FROM sessions WHERE id = ?", []any{id}, scanSession)
}

func (t *tx) EndSession(ctx context.Context, id string, at time.Time, exitCode *int, reason string) error {
	var code any
	if exitCode != nil {
		code = int64(*exitCode)
	}
	n, err := t.execN(ctx, "end session "+id,
		"UPDATE sessions SET ended_at = ?, exit_code = ?, end_reason = ? WHERE id = ? AND ended_at IS NULL",
		t.s.d.timeArg(normTime(at)), code, reason, id)
	if err != nil || n > 0 {
		return err
	}
	if _, err := t.GetSession(ctx, id); err != nil {
		return err
	}
	return conflictf("session %s has ended already", id)
}

func (t *tx) CountOpenSessions(ctx context.Context, userID string) (int, error) {
	var n int
	err := t.get(ctx, "count open sessions of "+userID, func() error { return nil },
		"SELECT COUNT(*) FROM sessions WHERE user_id = ? AND ended_at IS NULL", []any{userID}, &n)
	return n, err
}

func (t *tx) OpenSessions(ctx context.Context, replica string) ([]*cloud.Session, error) {
	q, args := "SELECT "+sessionCols+" FROM sessions WHERE ended_at IS NULL", []any(nil)
	if replica != "" {
		q, args = q+" AND replica = ?", append(args, replica)
	}
	return list(ctx, t, "list open sessions", q+" ORDER BY id", args, scanSession)
}

func (t *tx) RecordDirectReport(ctx context.Context, grantID, hostID string, first, at time.Time) error {
	if grantID == "" || hostID == "" || first.IsZero() {
		return invalidf("a direct session's report needs its grant, its host and its first connection")
	}
	// A row recorded before reports were told apart by their first
	// connection has the zero time, and stands for every report of its
	// grant (migration 00030).
	d := &t.s.d
	n, err := t.execN(ctx, "mark grant "+grantID+" reported",
		"INSERT INTO direct_reports (grant_id, first_at, host_id, reported_at) SELECT ?, ?, ?, ?"+
			" WHERE NOT EXISTS (SELECT 1 FROM direct_reports WHERE grant_id = ? AND first_at = ?) ON CONFLICT DO NOTHING",
		grantID, d.timeArg(normTime(first)), hostID, d.timeArg(normTime(at)), grantID, d.timeArg(time.Time{}))
	if err != nil {
		return err
	}
	if n == 0 {
		return conflictf("grant %s was reported already", grantID)
	}
	return nil
}
