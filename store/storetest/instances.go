package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
)

func testInstances(t *testing.T, s cloud.Store) {
	seedTenants(t, s, "t-1")
	for _, c := range []struct {
		desc string
		in   *cloud.Instance
	}{
		{"every field set, with a placement of every device kind", fullInstance("i-full", "t-1")},
		{"nil slices, maps and placement stay nil",
			&cloud.Instance{ID: "i-min", TenantID: "t-1", Offering: "l4", State: cloud.Pending}},
		{"empty slices and maps stay empty, not nil", &cloud.Instance{
			ID: "i-empty", TenantID: "t-1", Offering: "l4", State: cloud.Pending,
			Zones: []string{}, Labels: []string{}, Command: []string{}, Env: map[string]string{},
			Volumes: []string{}, Tags: map[string]string{}, Publish: []int{}, PublishKeepPrefix: []int{},
			Placement: &fleet.Placement{ID: "i-empty", HostID: "h-1", Metal: true}}},
		{"a version given to create is ignored", &cloud.Instance{
			ID: "i-v", TenantID: "t-1", State: cloud.Pending, Version: 41}},
	} {
		in := c.in
		if err := try(s, func(tx cloud.Tx) error { return tx.CreateInstance(ctx, in) }); err != nil {
			t.Errorf("%s: CreateInstance: %v", c.desc, err)
			continue
		}
		if in.Version != 1 {
			t.Errorf("%s: CreateInstance set Version %d, want 1", c.desc, in.Version)
		}
		got, err := read(t, s, func(tx cloud.Tx) (*cloud.Instance, error) { return tx.GetInstance(ctx, in.ID) })
		if err != nil {
			t.Errorf("%s: GetInstance: %v", c.desc, err)
			continue
		}
		wantEqual(t, c.desc, got, in)
	}
	full := fullInstance("i-full", "t-1")
	got := mustRead(t, s, func(tx cloud.Tx) (*cloud.Instance, error) { return tx.GetInstance(ctx, "i-full") })
	if !got.CreatedAt.Equal(us(full.CreatedAt)) || !got.UpdatedAt.Equal(us(full.UpdatedAt)) {
		t.Errorf("times: got %v, %v; want %v, %v", got.CreatedAt, got.UpdatedAt, us(full.CreatedAt), us(full.UpdatedAt))
	}
	// The fixture itself, not just what CreateInstance left in it, must
	// come back: this catches a store that damages its own input.
	full.Version, full.CreatedAt, full.UpdatedAt = 1, got.CreatedAt, got.UpdatedAt
	wantEqual(t, "placement devices round-trip", got.Placement, full.Placement)
	wantEqual(t, "the whole instance round-trips", got, full)

	byKey := mustRead(t, s, func(tx cloud.Tx) (*cloud.Instance, error) {
		return tx.InstanceByKey(ctx, "t-1", "key-i-full")
	})
	wantEqual(t, "InstanceByKey", byKey, got)
}

func testInstanceErrors(t *testing.T, s cloud.Store) {
	seedTenants(t, s, "t-1", "t-2")
	inTx(t, s, func(tx cloud.Tx) error { return tx.CreateInstance(ctx, fullInstance("i-1", "t-1")) })
	for _, c := range []struct {
		desc string
		fn   func(cloud.Tx) error
		code cloud.Code
		msg  string
	}{
		{"a duplicate ID is a Conflict", func(tx cloud.Tx) error {
			return tx.CreateInstance(ctx, &cloud.Instance{ID: "i-1", TenantID: "t-2", State: cloud.Pending})
		}, cloud.Conflict, "instance i-1 already exists"},
		{"an instance of a missing tenant is NotFound", func(tx cloud.Tx) error {
			return tx.CreateInstance(ctx, &cloud.Instance{ID: "i-2", TenantID: "t-9", State: cloud.Pending})
		}, cloud.NotFound, "tenant t-9 not found"},
		{"an empty ID is Invalid", func(tx cloud.Tx) error {
			return tx.CreateInstance(ctx, &cloud.Instance{TenantID: "t-1"})
		}, cloud.Invalid, ""},
		{"a missing instance is NotFound", func(tx cloud.Tx) error {
			_, err := tx.GetInstance(ctx, "i-123")
			return err
		}, cloud.NotFound, "instance i-123 not found"},
		{"an unknown idempotency key is NotFound", func(tx cloud.Tx) error {
			_, err := tx.InstanceByKey(ctx, "t-1", "nope")
			return err
		}, cloud.NotFound, ""},
		{"a key of another tenant is NotFound", func(tx cloud.Tx) error {
			_, err := tx.InstanceByKey(ctx, "t-2", "key-i-1")
			return err
		}, cloud.NotFound, ""},
		{"the empty key never matches", func(tx cloud.Tx) error {
			if err := tx.CreateInstance(ctx, &cloud.Instance{ID: "i-nokey", TenantID: "t-1"}); err != nil {
				return err
			}
			_, err := tx.InstanceByKey(ctx, "t-1", "")
			return err
		}, cloud.NotFound, ""},
	} {
		wantCode(t, c.desc, try(s, c.fn), c.code, c.msg)
	}
}

func testIdempotency(t *testing.T, s cloud.Store) {
	seedTenants(t, s, "t-1", "t-2")
	first := &cloud.Instance{ID: "i-1", TenantID: "t-1", Name: "first", State: cloud.Pending,
		IdempotencyKey: "k", Placement: placement("i-1", "h-1"), CreatedAt: t0}
	inTx(t, s, func(tx cloud.Tx) error { return tx.CreateInstance(ctx, first) })

	for _, c := range []struct {
		desc     string
		in       *cloud.Instance
		existing string // "" when the create must succeed
	}{
		{"the same key in the same tenant returns the first instance",
			&cloud.Instance{ID: "i-2", TenantID: "t-1", Name: "retry", IdempotencyKey: "k"}, "i-1"},
		{"the key wins over a duplicate ID",
			&cloud.Instance{ID: "i-1", TenantID: "t-1", Name: "retry", IdempotencyKey: "k"}, "i-1"},
		{"the same key in another tenant is another instance",
			&cloud.Instance{ID: "i-3", TenantID: "t-2", IdempotencyKey: "k"}, ""},
		{"another key is another instance",
			&cloud.Instance{ID: "i-4", TenantID: "t-1", IdempotencyKey: "k2"}, ""},
		{"empty keys do not clash (1)", &cloud.Instance{ID: "i-5", TenantID: "t-1"}, ""},
		{"empty keys do not clash (2)", &cloud.Instance{ID: "i-6", TenantID: "t-1"}, ""},
	} {
		in := c.in
		err := try(s, func(tx cloud.Tx) error { return tx.CreateInstance(ctx, in) })
		if c.existing == "" {
			if err != nil {
				t.Errorf("%s: %v", c.desc, err)
			}
			continue
		}
		wantCode(t, c.desc, err, cloud.Conflict, "")
		ce, ok := err.(*cloud.Error)
		if !ok || ce.Details["existing_id"] != c.existing {
			t.Errorf("%s: error %#v, want Details[existing_id] = %q", c.desc, err, c.existing)
		}
		wantEqual(t, c.desc+": the struct now holds the existing instance", in, first)
	}
	_, err := read(t, s, func(tx cloud.Tx) (*cloud.Instance, error) { return tx.GetInstance(ctx, "i-2") })
	wantCode(t, "the retried create stored nothing", err, cloud.NotFound, "")
	all := mustRead(t, s, func(tx cloud.Tx) ([]*cloud.Instance, error) {
		return tx.ListInstances(ctx, cloud.InstanceFilter{})
	})
	wantEqual(t, "instances after the creates", ids(all), []string{"i-1", "i-3", "i-4", "i-5", "i-6"})
}

func testUpdateInstance(t *testing.T, s cloud.Store) {
	seedTenants(t, s, "t-1", "t-2")
	inTx(t, s, func(tx cloud.Tx) error {
		return tx.CreateInstance(ctx, &cloud.Instance{ID: "i-1", TenantID: "t-1", Offering: "h100x2",
			State: cloud.Pending, IdempotencyKey: "k", CreatedAt: t0, UpdatedAt: t0, Publish: []int{8888}})
	})
	get := func() *cloud.Instance {
		return mustRead(t, s, func(tx cloud.Tx) (*cloud.Instance, error) { return tx.GetInstance(ctx, "i-1") })
	}
	update := func(in *cloud.Instance) error {
		return try(s, func(tx cloud.Tx) error { return tx.UpdateInstance(ctx, in) })
	}

	for _, c := range []struct {
		desc    string
		version int64 // the version to send; 0 means the current one
		change  func(*cloud.Instance)
		code    cloud.Code
	}{
		{"scheduling with the current version succeeds", 0, func(in *cloud.Instance) {
			in.State, in.HostID, in.Placement = cloud.Scheduled, "h-1", placement("i-1", "h-1")
			in.UpdatedAt = t0.Add(time.Second)
		}, ""},
		{"every mutable field is written", 0, func(in *cloud.Instance) {
			in.Name, in.Offering, in.State, in.Reason = "renamed", "h100x4", cloud.Running, "agent: started"
			in.Zones, in.Labels, in.Command = []string{"z"}, []string{"l"}, []string{"sleep", "1"}
			in.Env, in.Volumes, in.Tags = map[string]string{"A": "1"}, []string{"v"}, map[string]string{"t": "1"}
			in.Image = "docker.io/library/python:3.12"
			in.UpdatedAt = t0.Add(time.Hour)
		}, ""},
		{"clearing the placement stores none", 0, func(in *cloud.Instance) {
			in.State, in.HostID, in.Placement = cloud.Stopped, "", nil
		}, ""},
		{"a stale version is a Conflict and changes nothing", 1, func(in *cloud.Instance) {
			in.Reason = "lost update"
		}, cloud.Conflict},
		{"a version from the future is a Conflict too", 99, func(in *cloud.Instance) {
			in.Reason = "future"
		}, cloud.Conflict},
	} {
		before := get()
		in := get()
		if c.version != 0 {
			in.Version = c.version
		}
		c.change(in)
		err := update(in)
		wantCode(t, c.desc, err, c.code, "")
		after := get()
		if c.code != "" {
			wantEqual(t, c.desc+": stored instance unchanged", after, before)
			if ce, ok := err.(*cloud.Error); !ok || ce.Details["version"] != before.Version {
				t.Errorf("%s: error %#v, want Details[version] = %d (the stored one)", c.desc, err, before.Version)
			}
			continue
		}
		if in.Version != before.Version+1 {
			t.Errorf("%s: Version %d after the update, want %d", c.desc, in.Version, before.Version+1)
		}
		wantEqual(t, c.desc, after, in)
	}

	// Fields fixed at creation stay as they were.
	in := get()
	want := *in
	in.TenantID, in.IdempotencyKey, in.CreatedAt = "t-2", "other", t0.Add(time.Hour)
	in.Publish, in.PublishKeepPrefix = []int{1, 2}, []int{2}
	if err := update(in); err != nil {
		t.Fatalf("update of fixed fields: %v", err)
	}
	got := get()
	if got.TenantID != want.TenantID || got.IdempotencyKey != want.IdempotencyKey || !got.CreatedAt.Equal(want.CreatedAt) ||
		!slices.Equal(got.Publish, want.Publish) || !slices.Equal(got.PublishKeepPrefix, want.PublishKeepPrefix) {
		t.Errorf("UpdateInstance changed fixed fields: tenant %s key %s created %v publish %v keep prefix %v",
			got.TenantID, got.IdempotencyKey, got.CreatedAt, got.Publish, got.PublishKeepPrefix)
	}

	err := update(&cloud.Instance{ID: "i-404", TenantID: "t-1", Version: 1})
	wantCode(t, "updating a missing instance is NotFound", err, cloud.NotFound, "instance i-404 not found")
}

// testUpdateInstanceStates: UpdateInstanceStates writes the state fields
// of the instances whose version matches (and bumps it), leaves every
// other field as stored whatever the instance in hand says, returns the
// stale and missing ones untouched, and refuses an ID given twice.
func testUpdateInstanceStates(t *testing.T, s cloud.Store) {
	seedTenants(t, s, "t-1")
	inTx(t, s, func(tx cloud.Tx) error {
		for _, id := range []string{"i-1", "i-2", "i-3"} {
			if err := tx.CreateInstance(ctx, &cloud.Instance{ID: id, TenantID: "t-1", Name: "n-" + id, Offering: "h100x2",
				State: cloud.Pending, Reason: "waiting", CreatedAt: t0, UpdatedAt: t0,
				Tags: map[string]string{"team": "a"}, Command: []string{"sleep", "1"}}); err != nil {
				return err
			}
		}
		return nil
	})
	get := func(id string) *cloud.Instance {
		return mustRead(t, s, func(tx cloud.Tx) (*cloud.Instance, error) { return tx.GetInstance(ctx, id) })
	}
	before := map[string]*cloud.Instance{"i-1": get("i-1"), "i-2": get("i-2"), "i-3": get("i-3")}
	i1, i2, i3 := get("i-1"), get("i-2"), get("i-3")
	at := t0.Add(time.Minute)
	// i-1 is placed; i-2 gets a notice and a new reason; i-3 is stale.
	i1.State, i1.Reason, i1.HostID, i1.Placement, i1.Zone, i1.UpdatedAt = cloud.Scheduled, "placed", "h-1", placement("i-1", "h-1"), "z-1", at
	i2.Reason, i2.UpdatedAt = "no capacity", at
	i2.Interruption = &cloud.Interruption{Reason: "reclaim", NoticedAt: at, Deadline: at.Add(2 * time.Minute)}
	i3.Version, i3.Reason = 99, "lost"
	// What the call must not write.
	for _, in := range []*cloud.Instance{i1, i2, i3} {
		in.Name, in.Tags, in.Command, in.Offering = "renamed", map[string]string{"team": "b"}, []string{"true"}, "h100x4"
	}
	var stale []string
	inTx(t, s, func(tx cloud.Tx) (err error) {
		stale, err = tx.UpdateInstanceStates(ctx, []*cloud.Instance{i1, i2, i3, {ID: "i-404", Version: 1}})
		return err
	})
	if !slices.Equal(stale, []string{"i-3", "i-404"}) {
		t.Errorf("stale %v, want [i-3 i-404]", stale)
	}
	for _, in := range []*cloud.Instance{i1, i2} {
		b := before[in.ID]
		want := *b
		want.State, want.Reason, want.HostID, want.Placement, want.Zone = in.State, in.Reason, in.HostID, in.Placement, in.Zone
		want.Interruption, want.UpdatedAt, want.Version = in.Interruption, in.UpdatedAt, b.Version+1
		wantEqual(t, "UpdateInstanceStates "+in.ID, get(in.ID), &want)
		if in.Version != b.Version+1 {
			t.Errorf("%s: version in hand %d, want %d", in.ID, in.Version, b.Version+1)
		}
	}
	wantEqual(t, "UpdateInstanceStates: the stale i-3 is unchanged", get("i-3"), before["i-3"])
	if i3.Version != 99 {
		t.Errorf("the stale i-3's version in hand became %d", i3.Version)
	}
	twice := []*cloud.Instance{get("i-1"), get("i-1")}
	err := try(s, func(tx cloud.Tx) error {
		_, err := tx.UpdateInstanceStates(ctx, twice)
		return err
	})
	wantCode(t, "an ID given twice", err, cloud.Invalid, "")
}

func testListInstances(t *testing.T, s cloud.Store) {
	seedTenants(t, s, "t-1", "t-2")
	// "i-B" sorts before "i-a" in byte order (and after it in most locales):
	// both backends must page in the same order.
	// Creation times, for NewestFirst: i-b and i-c at the same instant.
	at := func(sec int) time.Time { return time.Date(2026, 1, 2, 3, 4, sec, 500_000, time.UTC) }
	fixtures := []*cloud.Instance{
		{ID: "i-a", TenantID: "t-1", Offering: "o1", State: cloud.Pending, Name: "web", CreatedAt: at(1)},
		{ID: "i-b", TenantID: "t-1", Offering: "o1", State: cloud.Running, HostID: "h-1", Name: "Web", CreatedAt: at(3)},
		{ID: "i-c", TenantID: "t-1", Offering: "o2", State: cloud.Running, HostID: "h-2", CreatedAt: at(3)},
		{ID: "i-d", TenantID: "t-2", Offering: "o1", State: cloud.Stopped, Name: "web", CreatedAt: at(2)},
		{ID: "i-e", TenantID: "t-2", Offering: "o2", State: cloud.Running, HostID: "h-1", CreatedAt: at(5)},
		{ID: "i-f", TenantID: "t-1", Offering: "o1", State: cloud.Terminated, CreatedAt: at(4)},
		{ID: "i-B", TenantID: "t-1", Offering: "o2", State: cloud.Starting, HostID: "h-1", CreatedAt: at(0)},
	}
	inTx(t, s, func(tx cloud.Tx) error {
		for _, in := range fixtures {
			if err := tx.CreateInstance(ctx, in); err != nil {
				return err
			}
		}
		return nil
	})
	for _, c := range []struct {
		desc string
		f    cloud.InstanceFilter
		want []string
	}{
		{"the zero filter lists all, in byte order of ID", cloud.InstanceFilter{},
			[]string{"i-B", "i-a", "i-b", "i-c", "i-d", "i-e", "i-f"}},
		{"by tenant", cloud.InstanceFilter{TenantID: "t-2"}, []string{"i-d", "i-e"}},
		{"by one state", cloud.InstanceFilter{States: []cloud.State{cloud.Running}}, []string{"i-b", "i-c", "i-e"}},
		{"by several states", cloud.InstanceFilter{States: []cloud.State{cloud.Stopped, cloud.Starting, cloud.Pending}},
			[]string{"i-B", "i-a", "i-d"}},
		{"by host", cloud.InstanceFilter{HostID: "h-1"}, []string{"i-B", "i-b", "i-e"}},
		{"by offering", cloud.InstanceFilter{Offering: "o2"}, []string{"i-B", "i-c", "i-e"}},
		{"by name, exactly (case too)", cloud.InstanceFilter{Name: "web"}, []string{"i-a", "i-d"}},
		{"by name and tenant", cloud.InstanceFilter{Name: "web", TenantID: "t-2"}, []string{"i-d"}},
		{"fields combine with AND", cloud.InstanceFilter{TenantID: "t-1", HostID: "h-1", Offering: "o1",
			States: []cloud.State{cloud.Running}}, []string{"i-b"}},
		{"nothing matches: an empty list", cloud.InstanceFilter{TenantID: "t-9"}, []string{}},
		{"AfterID starts after that ID", cloud.InstanceFilter{AfterID: "i-c"}, []string{"i-d", "i-e", "i-f"}},
		{"AfterID need not exist", cloud.InstanceFilter{AfterID: "i-bb"}, []string{"i-c", "i-d", "i-e", "i-f"}},
		{"Limit caps", cloud.InstanceFilter{Limit: 2}, []string{"i-B", "i-a"}},
		{"Limit larger than the result", cloud.InstanceFilter{Limit: 50, TenantID: "t-2"}, []string{"i-d", "i-e"}},
		{"filters, AfterID and Limit together", cloud.InstanceFilter{TenantID: "t-1", AfterID: "i-a", Limit: 2},
			[]string{"i-b", "i-c"}},
		{"NewestFirst: by creation, newest first, then by ID descending", cloud.InstanceFilter{NewestFirst: true},
			[]string{"i-e", "i-f", "i-c", "i-b", "i-d", "i-a", "i-B"}},
		{"NewestFirst with a tenant", cloud.InstanceFilter{NewestFirst: true, TenantID: "t-1"},
			[]string{"i-f", "i-c", "i-b", "i-a", "i-B"}},
		{"NewestFirst: AfterID pages in that order, past a tie", cloud.InstanceFilter{NewestFirst: true, TenantID: "t-1", AfterID: "i-c"},
			[]string{"i-b", "i-a", "i-B"}},
		{"NewestFirst: AfterID and Limit", cloud.InstanceFilter{NewestFirst: true, AfterID: "i-f", Limit: 2},
			[]string{"i-c", "i-b"}},
		{"NewestFirst: another tenant's instance as AfterID matches nothing", cloud.InstanceFilter{NewestFirst: true, TenantID: "t-1", AfterID: "i-e"},
			[]string{}},
		{"NewestFirst: a missing AfterID matches nothing", cloud.InstanceFilter{NewestFirst: true, AfterID: "i-zz"},
			[]string{}},
	} {
		got, err := read(t, s, func(tx cloud.Tx) ([]*cloud.Instance, error) { return tx.ListInstances(ctx, c.f) })
		if err != nil {
			t.Errorf("%s: %v", c.desc, err)
			continue
		}
		if got == nil {
			t.Errorf("%s: nil list, want an empty one", c.desc)
		}
		wantEqual(t, c.desc, ids(got), c.want)
		only, err := read(t, s, func(tx cloud.Tx) ([]string, error) { return tx.InstanceIDs(ctx, c.f) })
		if err != nil {
			t.Errorf("%s: InstanceIDs: %v", c.desc, err)
			continue
		}
		if only == nil {
			t.Errorf("%s: InstanceIDs gave nil, want an empty list", c.desc)
		}
		wantEqual(t, c.desc+" (InstanceIDs)", only, c.want)
	}
	instancePaging(t, s, len(fixtures))
}

// instancePaging pages by AfterID with a small Limit, which visits every
// one of the n instances once, and checks that a negative Limit is
// refused.
func instancePaging(t *testing.T, s cloud.Store, n int) {
	for _, f := range []cloud.InstanceFilter{{Limit: 2}, {Limit: 1, TenantID: "t-1"}, {Limit: 3, HostID: "h-1"},
		{Limit: 2, NewestFirst: true}, {Limit: 1, TenantID: "t-1", NewestFirst: true}} {
		all := mustRead(t, s, func(tx cloud.Tx) ([]*cloud.Instance, error) {
			g := f
			g.Limit = 0
			return tx.ListInstances(ctx, g)
		})
		var paged []string
		for pages := 0; ; pages++ {
			page := mustRead(t, s, func(tx cloud.Tx) ([]*cloud.Instance, error) { return tx.ListInstances(ctx, f) })
			if len(page) == 0 || pages > n {
				break
			}
			paged = append(paged, ids(page)...)
			f.AfterID = page[len(page)-1].ID
		}
		wantEqual(t, "paging visits every instance once, in order", paged, ids(all))
	}

	_, err := read(t, s, func(tx cloud.Tx) ([]*cloud.Instance, error) {
		return tx.ListInstances(ctx, cloud.InstanceFilter{Limit: -1})
	})
	wantCode(t, "a negative Limit is Invalid", err, cloud.Invalid, "")
	_, err = read(t, s, func(tx cloud.Tx) ([]string, error) {
		return tx.InstanceIDs(ctx, cloud.InstanceFilter{Limit: -1})
	})
	wantCode(t, "a negative Limit is Invalid for InstanceIDs", err, cloud.Invalid, "")
}

// testCreateInstances: several instances in one call, each as
// CreateInstance would write it; a key or ID taken fails the call with
// CreateInstance's error for the first such instance; InstancesByKeys
// finds a tenant's instances of several keys at once, never another
// tenant's.
func testCreateInstances(t *testing.T, s cloud.Store) {
	seedTenants(t, s, "t-1", "t-2")
	ins := []*cloud.Instance{fullInstance("i-1", "t-1"), fullInstance("i-2", "t-1"),
		{ID: "i-3", TenantID: "t-2", State: cloud.Pending, IdempotencyKey: "key-i-1"},
		{ID: "i-4", TenantID: "t-1", State: cloud.Pending}}
	ins[1].PrivateAddress = "10.0.0.9"
	inTx(t, s, func(tx cloud.Tx) error { return tx.CreateInstances(ctx, ins) })
	for _, in := range ins {
		if in.Version != 1 {
			t.Errorf("%s: Version %d, want 1", in.ID, in.Version)
		}
		got := mustRead(t, s, func(tx cloud.Tx) (*cloud.Instance, error) { return tx.GetInstance(ctx, in.ID) })
		wantEqual(t, "CreateInstances "+in.ID, got, in)
	}
	for _, c := range []struct {
		desc     string
		ins      []*cloud.Instance
		code     cloud.Code
		existing string
	}{
		{"a key taken", []*cloud.Instance{{ID: "i-5", TenantID: "t-1"}, {ID: "i-6", TenantID: "t-1", IdempotencyKey: "key-i-2"}},
			cloud.Conflict, "i-2"},
		{"an ID taken", []*cloud.Instance{{ID: "i-7", TenantID: "t-1"}, {ID: "i-4", TenantID: "t-2"}}, cloud.Conflict, ""},
		{"an ID given twice", []*cloud.Instance{{ID: "i-8", TenantID: "t-1"}, {ID: "i-8", TenantID: "t-1"}}, cloud.Invalid, ""},
		{"a missing tenant", []*cloud.Instance{{ID: "i-9", TenantID: "t-1"}, {ID: "i-10", TenantID: "t-9"}}, cloud.NotFound, ""},
	} {
		before := len(mustList(t, s))
		err := try(s, func(tx cloud.Tx) error { return tx.CreateInstances(ctx, c.ins) })
		wantCode(t, c.desc, err, c.code, "")
		if ce, ok := err.(*cloud.Error); c.existing != "" && (!ok || ce.Details["existing_id"] != c.existing) {
			t.Errorf("%s: %#v, want existing_id %s", c.desc, err, c.existing)
		}
		if after := len(mustList(t, s)); after != before {
			t.Errorf("%s: %d instances, then %d", c.desc, before, after)
		}
	}
	got := mustRead(t, s, func(tx cloud.Tx) (*[]*cloud.Instance, error) {
		ins, err := tx.InstancesByKeys(ctx, "t-1", []string{"key-i-1", "key-i-2", "nope", "", "key-i-1"})
		return &ins, err
	})
	ids := []string{}
	for _, in := range *got {
		ids = append(ids, in.ID)
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"i-1", "i-2"}) {
		t.Errorf("InstancesByKeys of t-1: %v, want i-1 and i-2 (not t-2's i-3 of the same key)", ids)
	}
}

// mustList lists every instance.
func mustList(t *testing.T, s cloud.Store) []*cloud.Instance {
	t.Helper()
	got := mustRead(t, s, func(tx cloud.Tx) (*[]*cloud.Instance, error) {
		ins, err := tx.ListInstances(ctx, cloud.InstanceFilter{})
		return &ins, err
	})
	return *got
}
