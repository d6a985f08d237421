package httpapi

import (
	"context"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
)

// TestLifecycle applies each action to an instance in each state: the
// result is a move CanMove allows, an unchanged instance (a retry), or a
// conflict naming from and to, with nothing changed.
func TestLifecycle(t *testing.T) {
	const noop = cloud.State("(unchanged)")
	const conflict = cloud.State("(conflict)")
	tests := []struct {
		from   cloud.State
		action string
		want   cloud.State
	}{
		{cloud.Pending, "stop", cloud.Stopped},
		{cloud.Scheduled, "stop", cloud.Stopping},
		{cloud.Starting, "stop", cloud.Stopping},
		{cloud.Running, "stop", cloud.Stopping},
		{cloud.Stopping, "stop", noop},
		{cloud.Stopped, "stop", noop},
		{cloud.Failed, "stop", conflict},
		{cloud.Lost, "stop", conflict},
		{cloud.Terminated, "stop", conflict},

		{cloud.Stopped, "start", cloud.Pending},
		{cloud.Pending, "start", noop},
		{cloud.Running, "start", noop},
		{cloud.Stopping, "start", conflict},
		{cloud.Failed, "start", conflict},
		{cloud.Lost, "start", conflict},
		{cloud.Terminated, "start", conflict},

		{cloud.Pending, "terminate", cloud.Terminated},
		{cloud.Scheduled, "terminate", cloud.Terminating},
		{cloud.Running, "terminate", cloud.Terminating},
		{cloud.Stopping, "terminate", cloud.Terminating},
		{cloud.Terminating, "terminate", noop},
		{cloud.Terminating, "start", conflict},
		{cloud.Stopped, "terminate", cloud.Terminated},
		{cloud.Failed, "terminate", cloud.Terminated},
		{cloud.Lost, "terminate", cloud.Terminated},
		{cloud.Terminated, "terminate", noop},
	}
	e := newEnv(t)
	e.raiseQuota(e.acmeID) // an instance per case
	ctx := context.Background()
	calls := map[string]func(context.Context, string, int64) (*cloud.Instance, error){
		"stop": e.acme.StopInstance, "start": e.acme.StartInstance, "terminate": e.acme.TerminateInstance,
	}
	for _, tc := range tests {
		t.Run(string(tc.from)+"/"+tc.action, func(t *testing.T) {
			in := e.mustCreate(e.acme, "l4.1x")
			if tc.from != cloud.Pending {
				in = e.setState(in.ID, tc.from)
			}
			before := e.counts()
			got, err := calls[tc.action](ctx, in.ID, 0)
			switch tc.want {
			case conflict:
				ce := wantCode(t, err, cloud.Conflict)
				if ce.Details["from"] != string(tc.from) || ce.Details["to"] == nil {
					t.Errorf("details %v, want from %s and to", ce.Details, tc.from)
				}
				e.unchanged(before, tc.action)
			case noop:
				if err != nil || got.State != tc.from || got.Version != in.Version {
					t.Fatalf("got %+v, %v; want it unchanged", got, err)
				}
				e.unchanged(before, tc.action)
			default:
				if err != nil {
					t.Fatal(err)
				}
				if got.State != tc.want || got.Version != in.Version+1 || !cloud.CanMove(tc.from, tc.want) {
					t.Errorf("got %s version %d, want %s version %d", got.State, got.Version, tc.want, in.Version+1)
				}
				evs, err := e.acme.InstanceEvents(ctx, in.ID, client.EventsOptions{})
				if err != nil {
					t.Fatal(err)
				}
				last := evs.Events[len(evs.Events)-1]
				if last.Kind != cloud.EventInstanceState || last.From != tc.from || last.To != tc.want || last.Actor != e.acmeUser.ID {
					t.Errorf("last event %+v", last)
				}
				if after := e.counts(); after.Events != before.Events+1 {
					t.Errorf("events %d -> %d, want one more", before.Events, after.Events)
				}
			}
		})
	}
}

func TestIfMatch(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	in := e.setState(e.mustCreate(e.acme, "l4.1x").ID, cloud.Running)
	before := e.counts()
	_, err := e.acme.StopInstance(ctx, in.ID, in.Version-1)
	ce := wantCode(t, err, cloud.Conflict)
	if ce.Details["current_version"] != float64(in.Version) {
		t.Errorf("details %v, want current_version %d", ce.Details, in.Version)
	}
	e.unchanged(before, "stale If-Match")
	// A stale version is a conflict even when the action would be a no-op.
	if _, err := e.acme.StartInstance(ctx, in.ID, in.Version+5); cloud.ErrorCode(err) != cloud.Conflict {
		t.Errorf("start with stale If-Match: %v", err)
	}
	for _, h := range []string{"abc", "-1", `"0"`} {
		status, _, b := e.raw("POST", "/v1/instances/"+in.ID+"/stop", e.acmeToken, nil, map[string]string{"If-Match": h})
		if status != 400 || decodeErr(t, b).Code != cloud.Invalid {
			t.Errorf("If-Match %s: %d %s", h, status, b)
		}
	}
	e.unchanged(before, "bad If-Match")
	got, err := e.acme.StopInstance(ctx, in.ID, in.Version)
	if err != nil || got.State != cloud.Stopping {
		t.Fatalf("stop with the current version: %+v, %v", got, err)
	}
	status, h, _ := e.raw("GET", "/v1/instances/"+in.ID, e.acmeToken, nil, nil)
	if status != 200 || h.Get("ETag") != api.ETag(got.Version) {
		t.Errorf("GET: %d, ETag %q, want %q", status, h.Get("ETag"), api.ETag(got.Version))
	}
	// The bare version works too.
	status, _, b := e.raw("POST", "/v1/instances/"+in.ID+"/terminate", e.acmeToken, nil,
		map[string]string{"If-Match": strings.Trim(api.ETag(got.Version), `"`)})
	if status != 200 {
		t.Errorf("bare If-Match: %d %s", status, b)
	}
}
