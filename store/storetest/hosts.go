package storetest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
)

func testHosts(t *testing.T, s cloud.Store) {
	h := &cloud.Host{ID: "h-2", State: fleet.Schedulable, Spec: hostSpec("h-2"), LastHeartbeat: t0}
	inTx(t, s, func(tx cloud.Tx) error { return tx.PutHost(ctx, h) })
	if h.Version != 1 {
		t.Errorf("PutHost of a new host set Version %d, want 1", h.Version)
	}
	get := func(id string) (*cloud.Host, error) {
		return read(t, s, func(tx cloud.Tx) (*cloud.Host, error) { return tx.GetHost(ctx, id) })
	}
	got, err := get("h-2")
	if err != nil {
		t.Fatal(err)
	}
	wantEqual(t, "the host round-trips", got, h)
	wantEqual(t, "the spec with its GPUs round-trips", got.Spec, hostSpec("h-2"))

	// Updates with the current version go through and bump it.
	got.State, got.Spec.State, got.LastHeartbeat = fleet.Cordoned, fleet.Cordoned, t0.Add(time.Minute)
	got.Spec.GPUs[0].Instances = nil
	inTx(t, s, func(tx cloud.Tx) error { return tx.PutHost(ctx, got) })
	if got.Version != 2 {
		t.Errorf("PutHost update set Version %d, want 2", got.Version)
	}
	again, _ := get("h-2")
	wantEqual(t, "the updated host", again, got)

	for _, c := range []struct {
		desc string
		h    *cloud.Host
		code cloud.Code
		msg  string
	}{
		{"a stale version is a Conflict", &cloud.Host{ID: "h-2", State: fleet.Unhealthy, Version: 1},
			cloud.Conflict, "version 1 is stale"},
		{"version 0 for an existing host is a Conflict", &cloud.Host{ID: "h-2", State: fleet.Unhealthy},
			cloud.Conflict, "already exists"},
		{"a version for a missing host is a Conflict", &cloud.Host{ID: "h-9", Version: 3},
			cloud.Conflict, "host h-9 does not exist"},
		{"an empty ID is Invalid", &cloud.Host{Version: 0}, cloud.Invalid, ""},
	} {
		err := try(s, func(tx cloud.Tx) error { return tx.PutHost(ctx, c.h) })
		wantCode(t, c.desc, err, c.code, c.msg)
		now, _ := get("h-2")
		wantEqual(t, c.desc+": h-2 unchanged", now, again)
	}
	_, err = get("h-9")
	wantCode(t, "a missing host is NotFound", err, cloud.NotFound, "host h-9 not found")

	h1 := &cloud.Host{ID: "h-1", State: fleet.Schedulable, Spec: fleet.Host{ID: "h-1"}}
	inTx(t, s, func(tx cloud.Tx) error { return tx.PutHost(ctx, h1) })
	all := mustRead(t, s, func(tx cloud.Tx) ([]*cloud.Host, error) { return tx.ListHosts(ctx) })
	wantEqual(t, "ListHosts (ID order)", all, []*cloud.Host{h1, again})
}

// testVolumes creates v-1 and v-0 of t-1 (v-0 attached to i-1) and v-2 of
// t-2, then updates, lists and fails to change them.
func testVolumes(t *testing.T, s cloud.Store) {
	seedTenants(t, s, "t-1", "t-2")
	inTx(t, s, func(tx cloud.Tx) error {
		return tx.CreateInstance(ctx, &cloud.Instance{ID: "i-1", TenantID: "t-1", State: cloud.Running})
	})
	v1 := &cloud.Volume{ID: "v-1", TenantID: "t-1", Name: "data", SizeGiB: 500, Zone: "eu-1a", CreatedAt: t0}
	v2 := &cloud.Volume{ID: "v-2", TenantID: "t-2", Name: "ckpt", SizeGiB: 1 << 40, InstanceID: "", CreatedAt: t0}
	v0 := &cloud.Volume{ID: "v-0", TenantID: "t-1", Name: "attached", SizeGiB: 1, InstanceID: "i-1", CreatedAt: t0}
	inTx(t, s, func(tx cloud.Tx) error {
		for _, v := range []*cloud.Volume{v1, v2, v0} {
			if err := tx.CreateVolume(ctx, v); err != nil {
				return err
			}
		}
		return nil
	})
	got, _ := getVolume(t, s, "v-1")
	wantEqual(t, "GetVolume", got, v1)
	got, _ = getVolume(t, s, "v-0")
	wantEqual(t, "GetVolume of an attached volume", got, v0)
	volumeUpdates(t, s)
	volumeLists(t, s)
	volumeErrors(t, s)
}

func getVolume(t *testing.T, s cloud.Store, id string) (*cloud.Volume, error) {
	return read(t, s, func(tx cloud.Tx) (*cloud.Volume, error) { return tx.GetVolume(ctx, id) })
}

// volumeUpdates attaches, resizes, renames, detaches and deletes v-1.
func volumeUpdates(t *testing.T, s cloud.Store) {
	for _, c := range []struct {
		desc   string
		change func(*cloud.Volume)
	}{
		{"attach", func(v *cloud.Volume) { v.InstanceID = "i-1" }},
		{"resize and rename", func(v *cloud.Volume) { v.SizeGiB, v.Name = 1000, "data2" }},
		{"detach", func(v *cloud.Volume) { v.InstanceID = "" }},
		{"delete", func(v *cloud.Volume) { v.DeletedAt = ptr(t0.Add(time.Hour)) }},
	} {
		v, _ := getVolume(t, s, "v-1")
		c.change(v)
		if err := try(s, func(tx cloud.Tx) error { return tx.UpdateVolume(ctx, v) }); err != nil {
			t.Errorf("%s: %v", c.desc, err)
			continue
		}
		got, _ := getVolume(t, s, "v-1")
		wantEqual(t, c.desc, got, v)
	}
	got, _ := getVolume(t, s, "v-1")
	if got.DeletedAt == nil || !got.DeletedAt.Equal(us(t0.Add(time.Hour))) {
		t.Errorf("DeletedAt = %v, want %v", got.DeletedAt, us(t0.Add(time.Hour)))
	}
}

// volumeLists lists the volumes per tenant and of every tenant, deleted
// ones included.
func volumeLists(t *testing.T, s cloud.Store) {
	list := func(tenant string) []string {
		vs := mustRead(t, s, func(tx cloud.Tx) ([]*cloud.Volume, error) { return tx.ListVolumes(ctx, tenant) })
		out := []string{}
		for _, v := range vs {
			out = append(out, v.ID)
		}
		return out
	}
	wantEqual(t, "ListVolumes(t-1) includes deleted volumes", list("t-1"), []string{"v-0", "v-1"})
	wantEqual(t, `ListVolumes("") lists every tenant's`, list(""), []string{"v-0", "v-1", "v-2"})
	wantEqual(t, "ListVolumes of a tenant without volumes", list("t-9"), []string{})
}

// volumeErrors checks the refused creates and updates, which leave v-2 as
// it was, and that an update does not move a volume to another tenant.
func volumeErrors(t *testing.T, s cloud.Store) {
	before, _ := getVolume(t, s, "v-2")
	for _, c := range []struct {
		desc string
		fn   func(cloud.Tx) error
		code cloud.Code
		msg  string
	}{
		{"a duplicate ID is a Conflict", func(tx cloud.Tx) error {
			return tx.CreateVolume(ctx, &cloud.Volume{ID: "v-2", TenantID: "t-1"})
		}, cloud.Conflict, "volume v-2 already exists"},
		{"a volume of a missing tenant is NotFound", func(tx cloud.Tx) error {
			return tx.CreateVolume(ctx, &cloud.Volume{ID: "v-3", TenantID: "t-9"})
		}, cloud.NotFound, "tenant t-9 not found"},
		{"creating attached to a missing instance is NotFound", func(tx cloud.Tx) error {
			return tx.CreateVolume(ctx, &cloud.Volume{ID: "v-3", TenantID: "t-1", InstanceID: "i-9"})
		}, cloud.NotFound, "instance i-9 not found"},
		{"attaching to a missing instance is NotFound", func(tx cloud.Tx) error {
			v := *before
			v.InstanceID = "i-9"
			return tx.UpdateVolume(ctx, &v)
		}, cloud.NotFound, "instance i-9 not found"},
		{"updating a missing volume is NotFound", func(tx cloud.Tx) error {
			return tx.UpdateVolume(ctx, &cloud.Volume{ID: "v-9", TenantID: "t-1"})
		}, cloud.NotFound, "volume v-9 not found"},
		{"a missing volume is NotFound", func(tx cloud.Tx) error {
			_, err := tx.GetVolume(ctx, "v-9")
			return err
		}, cloud.NotFound, "volume v-9 not found"},
		{"an empty ID is Invalid", func(tx cloud.Tx) error {
			return tx.CreateVolume(ctx, &cloud.Volume{TenantID: "t-1"})
		}, cloud.Invalid, ""},
	} {
		wantCode(t, c.desc, try(s, c.fn), c.code, c.msg)
	}
	after, _ := getVolume(t, s, "v-2")
	wantEqual(t, "v-2 unchanged by the failures", after, before)

	// The tenant is fixed at creation.
	moved := *before
	moved.TenantID = "t-1"
	inTx(t, s, func(tx cloud.Tx) error { return tx.UpdateVolume(ctx, &moved) })
	after, _ = getVolume(t, s, "v-2")
	if after.TenantID != "t-2" {
		t.Errorf("UpdateVolume moved the volume to tenant %s", after.TenantID)
	}
}

// appendEvents appends es in order in one transaction.
func appendEvents(t *testing.T, s cloud.Store, es ...*cloud.Event) {
	t.Helper()
	inTx(t, s, func(tx cloud.Tx) error {
		for _, e := range es {
			if err := tx.AppendEvent(ctx, e); err != nil {
				return err
			}
		}
		return nil
	})
}

func testEvents(t *testing.T, s cloud.Store) {
	es := []*cloud.Event{
		{Time: t0, Kind: "instance.state", TenantID: "t-1", InstanceID: "i-1", HostID: "h-1",
			From: cloud.Pending, To: cloud.Scheduled, Reason: "placed", Actor: "scheduler",
			Details: json.RawMessage(`{ "score": 0.30000000000000004,  "hosts": {"b": 1, "a": 2} }`)},
		{Time: t0.Add(time.Second), Kind: "host.cordon", HostID: "h-1", Actor: "admin:ada"},
		{Time: t0.Add(2 * time.Second), Kind: "note", Details: json.RawMessage(`[]`)},
		{Time: t0.Add(3 * time.Second), Kind: "note", Details: json.RawMessage(`"text"`)},
	}
	appendEvents(t, s, es[0], es[1])
	appendEvents(t, s, es[2], es[3])
	for i, e := range es {
		if i > 0 && e.ID <= es[i-1].ID {
			t.Errorf("event %d has ID %d, not above the previous %d", i, e.ID, es[i-1].ID)
		}
	}
	if !es[0].Time.Equal(us(t0)) || es[0].Time.Location() != time.UTC {
		t.Errorf("AppendEvent left Time %v, want %v in UTC", es[0].Time, us(t0))
	}
	got := mustRead(t, s, func(tx cloud.Tx) ([]*cloud.Event, error) { return tx.ListEvents(ctx, cloud.EventFilter{}) })
	wantEqual(t, "events round-trip, details byte for byte", got, es)

	err := try(s, func(tx cloud.Tx) error {
		return tx.AppendEvent(ctx, &cloud.Event{Kind: "bad", Details: json.RawMessage(`{"unterminated": `)})
	})
	wantCode(t, "details that are not JSON are Invalid", err, cloud.Invalid, "")
	got = mustRead(t, s, func(tx cloud.Tx) ([]*cloud.Event, error) { return tx.ListEvents(ctx, cloud.EventFilter{}) })
	if len(got) != len(es) {
		t.Errorf("%d events after the invalid one, want %d", len(got), len(es))
	}

	// IDs keep increasing after a rolled-back append.
	err = try(s, func(tx cloud.Tx) error {
		if err := tx.AppendEvent(ctx, &cloud.Event{Kind: "rolled back"}); err != nil {
			return err
		}
		return errSentinel
	})
	if err != errSentinel {
		t.Fatalf("Tx returned %v, want the function's error", err)
	}
	last := &cloud.Event{Kind: "after rollback"}
	appendEvents(t, s, last)
	if last.ID <= es[len(es)-1].ID {
		t.Errorf("event after a rollback has ID %d, not above %d", last.ID, es[len(es)-1].ID)
	}
}

func testListEvents(t *testing.T, s cloud.Store) {
	es := []*cloud.Event{
		{Kind: "a", TenantID: "t-1", InstanceID: "i-1", HostID: "h-1"},
		{Kind: "b", TenantID: "t-1", InstanceID: "i-2", HostID: "h-2"},
		{Kind: "c", HostID: "h-1"},
		{Kind: "d", TenantID: "t-2", InstanceID: "i-3", HostID: "h-1"},
		{Kind: "e", TenantID: "t-1", InstanceID: "i-1"},
		{Kind: "f", TenantID: "t-1"},
	}
	appendEvents(t, s, es...)
	kinds := func(list []*cloud.Event) []string {
		out := []string{}
		for _, e := range list {
			out = append(out, string(e.Kind))
		}
		return out
	}
	for _, c := range []struct {
		desc string
		f    cloud.EventFilter
		want []string
	}{
		{"the zero filter lists all in ID order", cloud.EventFilter{}, []string{"a", "b", "c", "d", "e", "f"}},
		{"by tenant", cloud.EventFilter{TenantID: "t-1"}, []string{"a", "b", "e", "f"}},
		{"by instance", cloud.EventFilter{InstanceID: "i-1"}, []string{"a", "e"}},
		{"by host", cloud.EventFilter{HostID: "h-1"}, []string{"a", "c", "d"}},
		{"fields combine with AND", cloud.EventFilter{TenantID: "t-1", HostID: "h-1"}, []string{"a"}},
		{"nothing matches: an empty list", cloud.EventFilter{InstanceID: "i-9"}, []string{}},
		{"AfterID starts after that ID", cloud.EventFilter{AfterID: es[3].ID}, []string{"e", "f"}},
		{"Limit caps", cloud.EventFilter{Limit: 2}, []string{"a", "b"}},
		{"filters, AfterID and Limit together", cloud.EventFilter{TenantID: "t-1", AfterID: es[0].ID, Limit: 2},
			[]string{"b", "e"}},
		{"AfterID past the end", cloud.EventFilter{AfterID: es[5].ID}, []string{}},
	} {
		got, err := read(t, s, func(tx cloud.Tx) ([]*cloud.Event, error) { return tx.ListEvents(ctx, c.f) })
		if err != nil {
			t.Errorf("%s: %v", c.desc, err)
			continue
		}
		wantEqual(t, c.desc, kinds(got), c.want)
	}

	f := cloud.EventFilter{TenantID: "t-1", Limit: 1}
	var paged []string
	for pages := 0; pages <= len(es); pages++ {
		page := mustRead(t, s, func(tx cloud.Tx) ([]*cloud.Event, error) { return tx.ListEvents(ctx, f) })
		if len(page) == 0 {
			break
		}
		paged = append(paged, kinds(page)...)
		f.AfterID = page[len(page)-1].ID
	}
	wantEqual(t, "paging a tenant's events one at a time", paged, []string{"a", "b", "e", "f"})

	_, err := read(t, s, func(tx cloud.Tx) ([]*cloud.Event, error) {
		return tx.ListEvents(ctx, cloud.EventFilter{Limit: -5})
	})
	wantCode(t, "a negative Limit is Invalid", err, cloud.Invalid, "")
}
