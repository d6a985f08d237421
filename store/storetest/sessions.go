package storetest

import (
	"reflect"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
)

// testSessions: a session is created open, counted per user while open,
// listed among the open ones, and ended once with its exit code (or none)
// and reason; a duplicate ID is a Conflict, a missing instance or session
// NotFound, a second end a Conflict.
func testSessions(t *testing.T, s cloud.Store) {
	seedTenants(t, s, "t-1")
	inTx(t, s, func(tx cloud.Tx) error {
		return tx.CreateInstance(ctx, &cloud.Instance{ID: "i-1", TenantID: "t-1", State: cloud.Running})
	})
	mk := func(id, user string) *cloud.Session {
		return &cloud.Session{ID: id, TenantID: "t-1", InstanceID: "i-1", UserID: user, Kind: "exec",
			Command: "sh -c 'echo hi'", StartedAt: t0, Replica: "r-" + user}
	}
	for _, id := range []string{"ses-1", "ses-2", "ses-3"} {
		inTx(t, s, func(tx cloud.Tx) error {
			return tx.CreateSession(ctx, mk(id, map[bool]string{true: "u-1", false: "u-2"}[id != "ses-3"]))
		})
	}
	errs := []struct {
		name string
		fn   func(cloud.Tx) error
		want cloud.Code
	}{
		{"duplicate", func(tx cloud.Tx) error { return tx.CreateSession(ctx, mk("ses-1", "u-1")) }, cloud.Conflict},
		{"missing instance", func(tx cloud.Tx) error {
			x := mk("ses-9", "u-1")
			x.InstanceID = "i-9"
			return tx.CreateSession(ctx, x)
		}, cloud.NotFound},
		{"no kind", func(tx cloud.Tx) error { x := mk("ses-8", "u-1"); x.Kind = ""; return tx.CreateSession(ctx, x) }, cloud.Invalid},
		{"end missing", func(tx cloud.Tx) error { return tx.EndSession(ctx, "ses-9", t0, nil, "x") }, cloud.NotFound},
	}
	for _, e := range errs {
		if err := try(s, e.fn); cloud.ErrorCode(err) != e.want {
			t.Errorf("%s: %v, want %s", e.name, err, e.want)
		}
	}
	count := func(user string) int {
		return *mustRead(t, s, func(tx cloud.Tx) (*int, error) { n, err := tx.CountOpenSessions(ctx, user); return &n, err })
	}
	if a, b := count("u-1"), count("u-2"); a != 2 || b != 1 {
		t.Fatalf("open sessions: u-1 %d, u-2 %d; want 2, 1", a, b)
	}
	code := 3
	end := t0.Add(90 * time.Second)
	inTx(t, s, func(tx cloud.Tx) error { return tx.EndSession(ctx, "ses-1", end, &code, "exited") })
	inTx(t, s, func(tx cloud.Tx) error { return tx.EndSession(ctx, "ses-2", end, nil, "client closed") })
	if err := try(s, func(tx cloud.Tx) error { return tx.EndSession(ctx, "ses-1", end, nil, "again") }); !cloud.IsConflict(err) {
		t.Fatalf("second end: %v", err)
	}
	if n := count("u-1"); n != 0 {
		t.Fatalf("u-1 has %d open sessions after both ended", n)
	}
	got := mustRead(t, s, func(tx cloud.Tx) (*cloud.Session, error) { return tx.GetSession(ctx, "ses-1") })
	want := mk("ses-1", "u-1")
	want.StartedAt, want.EndedAt, want.ExitCode, want.EndReason = us(t0), ptr(us(end)), &code, "exited"
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("session read back\n got %+v\nwant %+v", got, want)
	}
	if g2 := mustRead(t, s, func(tx cloud.Tx) (*cloud.Session, error) { return tx.GetSession(ctx, "ses-2") }); g2.ExitCode != nil || g2.EndReason != "client closed" {
		t.Fatalf("session without exit code read back %+v", g2)
	}
	for _, c := range []struct{ replica, want string }{{"", "ses-3"}, {"r-u-2", "ses-3"}, {"r-u-1", ""}} {
		open := mustRead(t, s, func(tx cloud.Tx) (*[]*cloud.Session, error) {
			l, err := tx.OpenSessions(ctx, c.replica)
			return &l, err
		})
		var ids string
		for _, o := range *open {
			ids += o.ID
		}
		if ids != c.want {
			t.Errorf("open sessions of replica %q: %q, want %q", c.replica, ids, c.want)
		}
	}

	// A direct grant's reports: one per first connection (an agent's run),
	// each recorded once.
	first := t0.Truncate(time.Microsecond).Add(time.Second)
	for _, c := range []struct {
		desc  string
		grant string
		first time.Time
		want  cloud.Code
	}{
		{"a grant's first report", "dg-1", first, ""},
		{"the same report again", "dg-1", first.Add(300 * time.Nanosecond), cloud.Conflict}, // the same microsecond
		{"a later run's report", "dg-1", first.Add(time.Minute), ""},
		{"that one again", "dg-1", first.Add(time.Minute), cloud.Conflict},
		{"another grant at the same time", "dg-2", first, ""},
		{"no first connection", "dg-3", time.Time{}, cloud.Invalid},
		{"no grant", "", first, cloud.Invalid},
	} {
		err := s.Tx(ctx, func(tx cloud.Tx) error { return tx.RecordDirectReport(ctx, c.grant, "h-1", c.first, t0) })
		if cloud.ErrorCode(err) != c.want {
			t.Errorf("%s: %v, want %q", c.desc, err, c.want)
		}
	}
}
