package storetest

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
)

// What the scheduler needs of the store beyond plain reads and writes:
// version bumps that leave hosts' specs alone, a cheap summary of the hosts
// that any change moves, instance IDs without their rows, and writes of
// many instances and events in a few statements.

func testBumpHosts(t *testing.T, s cloud.Store) {
	hosts := map[string]*cloud.Host{}
	for _, id := range []string{"h-1", "h-2", "h-3"} {
		hosts[id] = &cloud.Host{ID: id, State: fleet.Cordoned, Spec: hostSpec(id), LastHeartbeat: t0}
		inTx(t, s, func(tx cloud.Tx) error { return tx.PutHost(ctx, hosts[id]) })
	}
	check := func(desc string, want map[string]int64) {
		t.Helper()
		for id, v := range want {
			got := mustRead(t, s, func(tx cloud.Tx) (*cloud.Host, error) { return tx.GetHost(ctx, id) })
			h := *hosts[id]
			h.Version = v
			wantEqual(t, desc+": "+id, got, &h)
		}
	}
	inTx(t, s, func(tx cloud.Tx) error { return tx.BumpHosts(ctx, map[string]int64{"h-1": 1, "h-3": 1}) })
	check("BumpHosts changes the versions alone", map[string]int64{"h-1": 2, "h-2": 1, "h-3": 2})
	inTx(t, s, func(tx cloud.Tx) error { return tx.BumpHosts(ctx, nil) })
	check("bumping no host", map[string]int64{"h-1": 2, "h-2": 1, "h-3": 2})

	err := try(s, func(tx cloud.Tx) error { return tx.BumpHosts(ctx, map[string]int64{"h-1": 2, "h-2": 1, "h-3": 1}) })
	wantCode(t, "a stale version is a Conflict", err, cloud.Conflict, "host h-3 was changed concurrently: version 1 is stale, the stored version is 2")
	if ce, ok := err.(*cloud.Error); !ok || ce.Details["version"] != int64(2) {
		t.Errorf("the conflict's details carry the stored version: %#v", err)
	}
	err = try(s, func(tx cloud.Tx) error { return tx.BumpHosts(ctx, map[string]int64{"h-2": 1, "h-9": 1}) })
	wantCode(t, "a missing host is NotFound", err, cloud.NotFound, "host h-9 not found")
	// The conflict is reported inside the transaction, which can go on
	// and commit: nothing was bumped.
	inTx(t, s, func(tx cloud.Tx) error {
		if err := tx.BumpHosts(ctx, map[string]int64{"h-1": 1, "h-2": 1}); !cloud.IsConflict(err) {
			return fmt.Errorf("BumpHosts with h-1 stale: %v, want a Conflict", err)
		}
		return nil
	})
	check("failed bumps change nothing", map[string]int64{"h-1": 2, "h-2": 1, "h-3": 2})

	// PutHost takes the bumped version, as it takes its own.
	h := mustRead(t, s, func(tx cloud.Tx) (*cloud.Host, error) { return tx.GetHost(ctx, "h-1") })
	h.State = fleet.Schedulable
	inTx(t, s, func(tx cloud.Tx) error { return tx.PutHost(ctx, h) })
	if h.Version != 3 {
		t.Errorf("PutHost after a bump set Version %d, want 3", h.Version)
	}
}

func testHostStamp(t *testing.T, s cloud.Store) {
	stamp := func() cloud.HostStamp {
		t.Helper()
		return mustRead(t, s, func(tx cloud.Tx) (cloud.HostStamp, error) { return tx.HostStamp(ctx) })
	}
	wantEqual(t, "no hosts", stamp(), cloud.HostStamp{})
	h1 := &cloud.Host{ID: "h-1", State: fleet.Schedulable, Spec: hostSpec("h-1"), LastHeartbeat: t0}
	h2 := &cloud.Host{ID: "h-2", State: fleet.Schedulable, Spec: hostSpec("h-2"), LastHeartbeat: t0}
	inTx(t, s, func(tx cloud.Tx) error {
		if err := tx.PutHost(ctx, h1); err != nil {
			return err
		}
		return tx.PutHost(ctx, h2)
	})
	wantEqual(t, "two new hosts", stamp(), cloud.HostStamp{Hosts: 2, VersionSum: 2})
	inTx(t, s, func(tx cloud.Tx) error { return tx.Heartbeat(ctx, "h-2", t0.Add(time.Minute)) })
	wantEqual(t, "a heartbeat does not move the stamp", stamp(), cloud.HostStamp{Hosts: 2, VersionSum: 2})
	inTx(t, s, func(tx cloud.Tx) error { return tx.BumpHosts(ctx, map[string]int64{"h-1": 1}) })
	wantEqual(t, "a bump moves it", stamp(), cloud.HostStamp{Hosts: 2, VersionSum: 3})
	h2.State = fleet.Cordoned
	inTx(t, s, func(tx cloud.Tx) error { return tx.PutHost(ctx, h2) })
	wantEqual(t, "an update moves it", stamp(), cloud.HostStamp{Hosts: 2, VersionSum: 4})
	err := try(s, func(tx cloud.Tx) error {
		if err := tx.BumpHosts(ctx, map[string]int64{"h-2": 2}); err != nil {
			return err
		}
		return errSentinel
	})
	if err != errSentinel {
		t.Errorf("Tx returned %v, want fn's error", err)
	}
	wantEqual(t, "a rolled back bump does not move it", stamp(), cloud.HostStamp{Hosts: 2, VersionSum: 4})
}

func testUpdateInstances(t *testing.T, s cloud.Store) {
	seedTenants(t, s, "t-1", "t-2")
	const n = 300 // more than one statement's worth
	inTx(t, s, func(tx cloud.Tx) error {
		for i := 0; i < n; i++ {
			in := &cloud.Instance{ID: fmt.Sprintf("i-%03d", i), TenantID: "t-1", Offering: "h100x2",
				State: cloud.Pending, IdempotencyKey: fmt.Sprint("k", i), CreatedAt: t0, UpdatedAt: t0}
			if err := tx.CreateInstance(ctx, in); err != nil {
				return err
			}
		}
		return tx.CreateInstance(ctx, fullInstance("i-full", "t-2"))
	})
	all := func() []*cloud.Instance {
		return mustRead(t, s, func(tx cloud.Tx) ([]*cloud.Instance, error) { return tx.ListInstances(ctx, cloud.InstanceFilter{}) })
	}
	before := all()
	// Every mutable field of the full instance is written; the fixed ones
	// are not. The pending ones are scheduled, one of them with a stale
	// version, and a missing one is reported too.
	var batch []*cloud.Instance
	for _, in := range before {
		c := *in
		if c.ID == "i-full" {
			c.Name, c.Offering, c.State, c.Reason = "renamed", "h100x4", cloud.Stopped, "stopped by the agent"
			c.Zones, c.Labels, c.Command, c.Env = nil, []string{}, []string{"true"}, map[string]string{"B": "2"}
			c.Volumes, c.Tags, c.HostID, c.Placement = []string{"v"}, nil, "", nil
			c.Image = "docker.io/library/python:3.12"
			c.TenantID, c.IdempotencyKey, c.CreatedAt = "t-1", "other", t0.Add(time.Hour)
		} else {
			c.State, c.Reason, c.HostID, c.Placement = cloud.Scheduled, "placed", "h-1", placement(c.ID, "h-1")
		}
		c.UpdatedAt = t0.Add(90 * time.Second)
		batch = append(batch, &c)
	}
	batch[7].Version = 9
	batch = append(batch, &cloud.Instance{ID: "i-404", TenantID: "t-1", Version: 1})
	var stale []string
	inTx(t, s, func(tx cloud.Tx) (err error) { stale, err = tx.UpdateInstances(ctx, batch); return })
	wantEqual(t, "the stale and the missing are reported", stale, []string{batch[7].ID, "i-404"})
	after := all()
	for i, got := range after {
		want := batch[i]
		switch {
		case i == 7:
			wantEqual(t, "the stale one is unchanged", got, before[i])
			if want.Version != 9 {
				t.Errorf("the stale one's Version became %d", want.Version)
			}
			continue
		case want.ID == "i-full":
			want.TenantID, want.IdempotencyKey, want.CreatedAt = before[i].TenantID, before[i].IdempotencyKey, before[i].CreatedAt
		}
		if want.Version != before[i].Version+1 || !want.UpdatedAt.Equal(us(t0.Add(90*time.Second))) {
			t.Errorf("%s: Version %d UpdatedAt %v after the update", want.ID, want.Version, want.UpdatedAt)
		}
		wantEqual(t, want.ID+" is written", got, want)
	}

	err := try(s, func(tx cloud.Tx) error {
		_, err := tx.UpdateInstances(ctx, []*cloud.Instance{after[0], after[1], after[0]})
		return err
	})
	wantCode(t, "an instance given twice is Invalid", err, cloud.Invalid, "given twice")
	inTx(t, s, func(tx cloud.Tx) error {
		stale, err := tx.UpdateInstances(ctx, nil)
		if err != nil || len(stale) != 0 {
			return fmt.Errorf("UpdateInstances(nil) = %v, %v", stale, err)
		}
		return nil
	})
	wantEqual(t, "nothing changed since", all(), after)
}

func testAppendEvents(t *testing.T, s cloud.Store) {
	first := &cloud.Event{Time: t0, Kind: "note", Actor: "test"}
	appendEvents(t, s, first)
	var es []*cloud.Event
	for i := 0; i < 300; i++ { // more than one statement's worth
		es = append(es, &cloud.Event{Time: t0.Add(time.Duration(i) * time.Second), Kind: "instance.scheduled",
			TenantID: "t-1", InstanceID: fmt.Sprintf("i-%03d", i), HostID: "h-1", From: cloud.Pending,
			To: cloud.Scheduled, Reason: fmt.Sprint("placed ", i), Actor: "scheduler"})
	}
	es[5].Details = json.RawMessage(`{ "b": 1,  "a": [2] }`)
	inTx(t, s, func(tx cloud.Tx) error { return tx.AppendEvents(ctx, es) })
	prev := first.ID
	for i, e := range es {
		if e.ID <= prev {
			t.Fatalf("event %d has ID %d, not above the previous %d", i, e.ID, prev)
		}
		prev = e.ID
	}
	got := mustRead(t, s, func(tx cloud.Tx) ([]*cloud.Event, error) { return tx.ListEvents(ctx, cloud.EventFilter{}) })
	wantEqual(t, "the events are stored in order, with their IDs", got, append([]*cloud.Event{first}, es...))

	err := try(s, func(tx cloud.Tx) error {
		return tx.AppendEvents(ctx, []*cloud.Event{{Kind: "good"}, {Kind: "bad", Details: json.RawMessage(`{`)}})
	})
	wantCode(t, "details that are not JSON are Invalid", err, cloud.Invalid, "")
	inTx(t, s, func(tx cloud.Tx) error {
		err := tx.AppendEvents(ctx, []*cloud.Event{{Kind: "good"}, {Kind: "bad", Details: json.RawMessage(`{`)}})
		if cloud.ErrorCode(err) != cloud.Invalid {
			return fmt.Errorf("AppendEvents with a bad event: %v, want Invalid", err)
		}
		return tx.AppendEvents(ctx, nil)
	})
	again := mustRead(t, s, func(tx cloud.Tx) ([]*cloud.Event, error) { return tx.ListEvents(ctx, cloud.EventFilter{}) })
	wantEqual(t, "a bad event stores none of its batch", again, got)
}

// testCounts checks CountInstances, CountTenantInstances and CountHosts:
// one group per distinct (state, offering, market, tenant) and per host
// state, in field order, nothing for a group without members.
func testCounts(t *testing.T, s cloud.Store) {
	wantEqual(t, "no instances", mustRead(t, s, func(tx cloud.Tx) ([]cloud.InstanceCount, error) {
		return tx.CountInstances(ctx)
	}), []cloud.InstanceCount{})
	wantEqual(t, "no hosts", mustRead(t, s, func(tx cloud.Tx) ([]cloud.HostCount, error) {
		return tx.CountHosts(ctx)
	}), []cloud.HostCount{})

	seedTenants(t, s, "t-1", "t-2")
	rows := []struct {
		tenant, offering string
		state            cloud.State
		market           cloud.Market
		n                int
	}{
		{"t-1", "h100x1", cloud.Running, cloud.MarketOnDemand, 3},
		{"t-1", "h100x1", cloud.Running, "", 1}, // stored as on_demand
		{"t-1", "h100x1", cloud.Running, cloud.MarketSpot, 2},
		{"t-2", "h100x1", cloud.Running, cloud.MarketOnDemand, 1},
		{"t-2", "a100x8", cloud.Pending, cloud.MarketOnDemand, 2},
		{"t-1", "a100x8", cloud.Terminated, cloud.MarketSpot, 1},
	}
	inTx(t, s, func(tx cloud.Tx) error {
		i := 0
		for _, r := range rows {
			for range r.n {
				i++
				in := &cloud.Instance{ID: fmt.Sprintf("i-%03d", i), TenantID: r.tenant, Offering: r.offering,
					State: r.state, Market: r.market, CreatedAt: t0, UpdatedAt: t0}
				if err := tx.CreateInstance(ctx, in); err != nil {
					return err
				}
			}
		}
		for i, st := range []fleet.HostState{fleet.Schedulable, fleet.Schedulable, fleet.Cordoned, fleet.Schedulable, fleet.Unhealthy} {
			id := fmt.Sprintf("h-%d", i)
			if err := tx.PutHost(ctx, &cloud.Host{ID: id, State: st, Spec: hostSpec(id), LastHeartbeat: t0}); err != nil {
				return err
			}
		}
		return nil
	})
	wantEqual(t, "CountInstances", mustRead(t, s, func(tx cloud.Tx) ([]cloud.InstanceCount, error) {
		return tx.CountInstances(ctx)
	}), []cloud.InstanceCount{
		{State: cloud.Pending, Offering: "a100x8", Market: cloud.MarketOnDemand, TenantID: "t-2", Count: 2},
		{State: cloud.Running, Offering: "h100x1", Market: cloud.MarketOnDemand, TenantID: "t-1", Count: 4},
		{State: cloud.Running, Offering: "h100x1", Market: cloud.MarketOnDemand, TenantID: "t-2", Count: 1},
		{State: cloud.Running, Offering: "h100x1", Market: cloud.MarketSpot, TenantID: "t-1", Count: 2},
		{State: cloud.Terminated, Offering: "a100x8", Market: cloud.MarketSpot, TenantID: "t-1", Count: 1},
	})
	wantEqual(t, "CountHosts", mustRead(t, s, func(tx cloud.Tx) ([]cloud.HostCount, error) {
		return tx.CountHosts(ctx)
	}), []cloud.HostCount{{State: fleet.Cordoned, Count: 1}, {State: fleet.Schedulable, Count: 3}, {State: fleet.Unhealthy, Count: 1}})
	for _, c := range []struct {
		tenant string
		want   []cloud.InstanceCount
	}{
		{"t-1", []cloud.InstanceCount{
			{State: cloud.Running, Offering: "h100x1", Market: cloud.MarketOnDemand, TenantID: "t-1", Count: 4},
			{State: cloud.Running, Offering: "h100x1", Market: cloud.MarketSpot, TenantID: "t-1", Count: 2},
			{State: cloud.Terminated, Offering: "a100x8", Market: cloud.MarketSpot, TenantID: "t-1", Count: 1},
		}},
		{"t-2", []cloud.InstanceCount{
			{State: cloud.Pending, Offering: "a100x8", Market: cloud.MarketOnDemand, TenantID: "t-2", Count: 2},
			{State: cloud.Running, Offering: "h100x1", Market: cloud.MarketOnDemand, TenantID: "t-2", Count: 1},
		}},
		{"t-9", []cloud.InstanceCount{}},
	} {
		wantEqual(t, "CountTenantInstances "+c.tenant, mustRead(t, s, func(tx cloud.Tx) ([]cloud.InstanceCount, error) {
			return tx.CountTenantInstances(ctx, c.tenant)
		}), c.want)
	}
}
