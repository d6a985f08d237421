package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/store/sqlstore"
	"github.com/gpucloud/gpucloud/testkit"
)

// watchResult is what one watch call answered.
type watchResult struct {
	list *agentapi.AssignmentList
	err  error
	took time.Duration
}

func watchAsync(ctx context.Context, c *agentConn, version string, wait time.Duration) <-chan watchResult {
	out := make(chan watchResult, 1)
	go func() {
		t := time.Now()
		l, err := c.WatchAssignments(ctx, version, wait)
		out <- watchResult{l, err, time.Since(t)}
	}()
	return out
}

// TestAgentAssignmentsWatch: GET /v1/agent/assignments answers the host's
// list with its version at once; with that version and a wait it answers
// the same list when the wait is over, and at once when an instance is
// placed on the host, while the other host's watch goes on waiting and
// never sees it. On both stores.
func TestAgentAssignmentsWatch(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		e := newEnv(t, st)
		// The watch left waiting ends with the test.
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		a, hostA := e.join(inventory("h-a", "L4", 1))
		b, hostB := e.join(inventory("h-b", "L4", 1))
		la, err := a.WatchAssignments(ctx, "", 0)
		if err != nil || la.Version == "" || len(la.Assignments) != 0 {
			t.Fatalf("first answer: %+v, %v", la, err)
		}
		lb, err := b.WatchAssignments(ctx, "", 0)
		if err != nil || lb.Version == "" {
			t.Fatalf("first answer of b: %+v, %v", lb, err)
		}
		// The wait's end: the same list.
		r := <-watchAsync(ctx, a, la.Version, 200*time.Millisecond)
		if r.err != nil || r.list.Version != la.Version || r.took < 200*time.Millisecond {
			t.Fatalf("an unchanged list after the wait: %+v, %v after %s", r.list, r.err, r.took)
		}

		// A placement wakes the watch of its host only.
		wa := watchAsync(ctx, a, la.Version, agentapi.MaxAssignmentWait)
		wb := watchAsync(ctx, b, lb.Version, agentapi.MaxAssignmentWait)
		testkit.Eventually(t, 0, "both watches to wait", func() bool { return e.Services.AssignmentChanges.Waiters() >= 2 })
		in, err := e.acme.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "l4.1x"}, "")
		if err != nil {
			t.Fatal(err)
		}
		if e.schedule() != 1 {
			t.Fatal("the instance was not placed")
		}
		placed := e.instance(in.ID).HostID
		mine, other, otherHost := wa, wb, hostB
		if placed == hostB {
			mine, other, otherHost = wb, wa, hostA
		}
		select {
		case r := <-mine:
			if r.err != nil || len(r.list.Assignments) != 1 || r.list.Assignments[0].InstanceID != in.ID {
				t.Fatalf("the placed host's watch: %+v, %v", r.list, r.err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the placed host's watch did not answer the placement")
		}
		select {
		case r := <-other:
			t.Fatalf("host %s's watch answered another host's placement: %+v, %v", otherHost, r.list, r.err)
		case <-time.After(300 * time.Millisecond):
		}
	})
}

// TestAgentAssignmentsWatchIsolation: an agent reads only its own host's
// list through the watch's parameters: a parameter naming another host
// is refused, another host's version answers the agent's own list, and a
// tenant's token is refused. Bad parameters are invalid_argument. On both
// stores.
func TestAgentAssignmentsWatchIsolation(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		e := newEnv(t, st)
		ctx := context.Background()
		a, _ := e.join(inventory("h-a", "L4", 1))
		b, hostB := e.join(inventory("h-b", "L4", 1))
		// Two instances fill both hosts; B's list then holds one.
		for range 2 {
			if _, err := e.acme.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "l4.1x"}, ""); err != nil {
				t.Fatal(err)
			}
		}
		if e.schedule() != 2 {
			t.Fatal("the instances were not placed")
		}
		lb, err := b.WatchAssignments(ctx, "", 0)
		if err != nil || len(lb.Assignments) != 1 {
			t.Fatalf("b's list: %+v, %v", lb, err)
		}
		la, err := a.WatchAssignments(ctx, lb.Version, time.Second)
		if err != nil || len(la.Assignments) != 1 || la.Assignments[0].InstanceID == lb.Assignments[0].InstanceID || la.Version == lb.Version {
			t.Fatalf("a with b's version: %+v (b's %+v), %v", la, lb, err)
		}
		for _, path := range []string{
			"/v1/agent/assignments?host=" + hostB,
			"/v1/agent/assignments?host_id=" + hostB + "&version=" + lb.Version,
			"/v1/agent/assignments?wait=abc",
			"/v1/agent/assignments?wait=-1s",
			"/v1/agent/assignments?wait=31s",
			"/v1/agent/assignments?wait=1s&wait=2s",
			"/v1/agent/assignments?version=NOT-HEX",
			"/v1/agent/assignments?version=" + lb.Version + lb.Version + lb.Version,
		} {
			code, _, body := e.raw(http.MethodGet, path, a.token, nil, nil)
			var eb errorBody
			_ = json.Unmarshal(body, &eb)
			if code != http.StatusBadRequest || eb.Code != cloud.Invalid {
				t.Errorf("%s: %d %s, want 400 invalid_argument", path, code, body)
			}
		}
		if _, err := a.WatchAssignments(ctx, la.Version, time.Hour); cloud.ErrorCode(err) != cloud.Invalid {
			t.Fatalf("wait of an hour: %v", err)
		}
		// A tenant's token is not an agent's.
		if _, err := e.agentClient(e.acmeToken).WatchAssignments(ctx, "", 0); cloud.ErrorCode(err) != cloud.PermissionDenied {
			t.Fatalf("a tenant watches a host's assignments: %v", err)
		}
	})
}

// TestAgentAssignmentsWatchRereads: a waiting watch reads its host's list
// again on a timer while other replicas may write the store, and not at
// all while this server is alone (Options.Alone), where every write it
// must see is its own and wakes it: the list read at the start is the
// answer at the wait's end.
func TestAgentAssignmentsWatchRereads(t *testing.T) {
	defer func(d time.Duration) { assignmentReread = d }(assignmentReread)
	assignmentReread = 20 * time.Millisecond
	for _, alone := range []bool{false, true} {
		st := testkit.Backends()[0].Open(t)
		e := newEnvWith(t, Options{Alone: func() bool { return alone }}, st)
		ctx := context.Background()
		a, _ := e.join(inventory("h-a", "L4", 1))
		la, err := a.WatchAssignments(ctx, "", 0)
		if err != nil {
			t.Fatal(err)
		}
		txs := func() int64 { return service.Unwrap(e.store).(interface{ Counts() sqlstore.Counts }).Counts().Begins }
		// The credential's look-up is cached by the first call.
		before := txs()
		r := <-watchAsync(ctx, a, la.Version, 300*time.Millisecond)
		if r.err != nil || r.list.Version != la.Version {
			t.Fatalf("alone=%v: %+v, %v", alone, r.list, r.err)
		}
		n := txs() - before
		switch {
		case alone && n != 1:
			t.Errorf("alone: the watch ran %d transactions in 300 ms; want 1 (the read at its start)", n)
		case !alone && n < 6:
			t.Errorf("not alone: the watch ran %d transactions in 300 ms; want one per 20 ms", n)
		}
	}
}
