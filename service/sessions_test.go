package service_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

// sessionEvents reads the session events of an instance.
func sessionEvents(t *testing.T, st cloud.Store, instanceID string) []*cloud.Event {
	t.Helper()
	var out []*cloud.Event
	err := st.Tx(context.Background(), func(tx cloud.Tx) (err error) {
		out, err = tx.ListEvents(context.Background(), cloud.EventFilter{InstanceID: instanceID,
			Kinds: []cloud.EventKind{cloud.EventSessionStarted, cloud.EventSessionEnded}})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func details(t *testing.T, e *cloud.Event) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(e.Details, &m); err != nil {
		t.Fatalf("event %s details %s: %v", e.Kind, e.Details, err)
	}
	return m
}

// TestSessionRules: only the instance's tenant (and admins, marked in the
// event) may open a session; a missing instance and another tenant's
// answer the same not_found; an instance that is not running answers a
// conflict naming its state; the kind must be known.
func TestSessionRules(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newVAFixture(t, st, service.Options{})
		ctx := context.Background()
		run := f.instance(f.acme)
		testkit.Walk(t, st, run.ID, cloud.Running, testkit.Via{}, f.clock.Now())
		stopped := f.instance(f.acme)
		testkit.Walk(t, st, stopped.ID, cloud.Stopped, testkit.Via{}, f.clock.Now())
		pending := f.instance(f.acme)
		for _, c := range []struct {
			name     string
			actor    service.Actor
			id, kind string
			want     cloud.Code
			state    string
		}{
			{"own running instance", f.acme, run.ID, "exec", "", ""},
			{"admin", f.admin, run.ID, "forward", "", ""},
			{"another tenant", f.globex, run.ID, "exec", cloud.NotFound, ""},
			{"missing", f.acme, "i-missing", "exec", cloud.NotFound, ""},
			{"stopped", f.acme, stopped.ID, "exec", cloud.Conflict, "stopped"},
			{"pending", f.acme, pending.ID, "forward", cloud.Conflict, "pending"},
			{"unknown kind", f.acme, run.ID, "telnet", cloud.Invalid, ""},
			{"an agent", service.AgentActor("h-1"), run.ID, "exec", cloud.PermissionDenied, ""},
		} {
			got, err := f.svc.Sessions.Start(ctx, c.actor, c.id, c.kind, "sh")
			if cloud.ErrorCode(err) != c.want && !(c.want == "" && err == nil) {
				t.Errorf("%s: %v, want %q", c.name, err, c.want)
				continue
			}
			if c.state != "" {
				if ce, _ := err.(*cloud.Error); ce == nil || ce.Details["state"] != c.state {
					t.Errorf("%s: %v does not name state %s", c.name, err, c.state)
				}
			}
			if err == nil && (got.HostID != testkit.Host || got.Session.InstanceID != run.ID || got.Session.UserID != c.actor.ID) {
				t.Errorf("%s: granted %+v on %s", c.name, got.Session, got.HostID)
			}
		}
		evs := sessionEvents(t, st, run.ID)
		if len(evs) != 2 {
			t.Fatalf("%d session events, want 2 (member and admin)", len(evs))
		}
		if d := details(t, evs[0]); d["admin"] != nil || evs[0].Actor != f.acme.ID || d["kind"] != "exec" || d["command"] != "sh" {
			t.Errorf("member's event %+v %v", evs[0], d)
		}
		if d := details(t, evs[1]); d["admin"] != true || evs[1].Actor != f.admin.ID || evs[1].TenantID != f.acme.TenantID {
			t.Errorf("admin's event is not marked: %+v %v", evs[1], d)
		}
	})
}

// TestSessionEndAndLimit: a user has at most SessionLimit sessions open
// (quota_exceeded past it, and another user is not counted); End frees
// one, records the ended event with its duration and exit code, and a
// second End is a conflict.
func TestSessionEndAndLimit(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newVAFixture(t, st, service.Options{SessionLimit: 2})
		ctx := context.Background()
		in := f.instance(f.acme)
		testkit.Walk(t, st, in.ID, cloud.Running, testkit.Via{}, f.clock.Now())
		var ids []string
		for range 2 {
			s, err := f.svc.Sessions.Start(ctx, f.acme, in.ID, "exec", "bash")
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, s.Session.ID)
		}
		if _, err := f.svc.Sessions.Start(ctx, f.acme, in.ID, "exec", "bash"); cloud.ErrorCode(err) != cloud.QuotaExceeded {
			t.Fatalf("third session: %v, want quota_exceeded", err)
		}
		if _, err := f.svc.Sessions.Start(ctx, f.admin, in.ID, "exec", "bash"); err != nil {
			t.Fatalf("another user's session: %v", err)
		}
		f.clock.Advance(1500 * time.Millisecond)
		code := 130
		if err := f.svc.Sessions.End(ctx, ids[0], &code, "exited"); err != nil {
			t.Fatal(err)
		}
		if err := f.svc.Sessions.End(ctx, ids[0], nil, "again"); cloud.ErrorCode(err) != cloud.Conflict {
			t.Fatalf("second end: %v", err)
		}
		if _, err := f.svc.Sessions.Start(ctx, f.acme, in.ID, "exec", "bash"); err != nil {
			t.Fatalf("a session after one ended: %v", err)
		}
		evs := sessionEvents(t, st, in.ID)
		var ended *cloud.Event
		for _, e := range evs {
			if e.Kind == cloud.EventSessionEnded {
				ended = e
			}
		}
		if ended == nil {
			t.Fatal("no session.ended event")
		}
		d := details(t, ended)
		if d["exit_code"] != float64(130) || d["duration_ms"] != float64(1500) || ended.Reason != "exited" ||
			ended.Actor != f.acme.ID || d["command"] != "bash" {
			t.Errorf("ended event %+v %v", ended, d)
		}
	})
}

// TestSessionsClosedAtRestart: the sessions a replica left open are
// closed by its next start with "server restarted"; another replica's
// stay open.
func TestSessionsClosedAtRestart(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newVAFixture(t, st, service.Options{Replica: "r1"})
		other := service.New(st, nil, service.Options{Replica: "r2", Now: f.clock.Now})
		ctx := context.Background()
		in := f.instance(f.acme)
		testkit.Walk(t, st, in.ID, cloud.Running, testkit.Via{}, f.clock.Now())
		mine, err := f.svc.Sessions.Start(ctx, f.acme, in.ID, "exec", "top")
		if err != nil {
			t.Fatal(err)
		}
		theirs, err := other.Sessions.Start(ctx, f.acme, in.ID, "forward", "port 8888")
		if err != nil {
			t.Fatal(err)
		}
		restarted := service.New(st, nil, service.Options{Replica: "r1", Now: f.clock.Now})
		if n, err := restarted.Sessions.CloseLeftOpen(ctx); err != nil || n != 1 {
			t.Fatalf("CloseLeftOpen = %d, %v; want 1", n, err)
		}
		var got []*cloud.Session
		for _, id := range []string{mine.Session.ID, theirs.Session.ID} {
			st.Tx(ctx, func(tx cloud.Tx) error { s, err := tx.GetSession(ctx, id); got = append(got, s); return err })
		}
		if got[0].EndedAt == nil || got[0].EndReason != service.ReasonServerRestarted || got[0].ExitCode != nil {
			t.Errorf("own session after restart: %+v", got[0])
		}
		if got[1].EndedAt != nil {
			t.Errorf("another replica's session was closed: %+v", got[1])
		}
	})
}
