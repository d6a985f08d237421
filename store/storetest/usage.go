package storetest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
)

// The usage ledger: the entries the store meters from instance, volume and
// address changes, and the queries over them.

// usageOf lists the ledger entries of a tenant with their IDs cleared, for
// comparison.
func usageOf(t *testing.T, s cloud.Store, tenant string) []cloud.Usage {
	t.Helper()
	us := mustRead(t, s, func(tx cloud.Tx) ([]*cloud.Usage, error) {
		return tx.ListUsage(ctx, cloud.UsageFilter{TenantID: tenant})
	})
	out := []cloud.Usage{}
	for i, u := range us {
		if i > 0 && u.ID <= us[i-1].ID {
			t.Errorf("usage %d has ID %d, not above the previous %d", i, u.ID, us[i-1].ID)
		}
		c := *u
		c.ID = 0
		out = append(out, c)
	}
	return out
}

// wantUsage compares ledger entries and reports the first difference, which
// is more readable than the whole of two long lists.
func wantUsage(t *testing.T, desc string, got, want []cloud.Usage) {
	t.Helper()
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			t.Errorf("%s: entry %d:\n got %+v\nwant %+v", desc, i, got[i], want[i])
			return
		}
	}
	if len(got) != len(want) {
		t.Errorf("%s: %d entries, want %d", desc, len(got), len(want))
	}
}

// move updates an instance to state to at time at and appends its
// instance.state event, as the controllers do.
func move(tx cloud.Tx, id string, to cloud.State, at time.Time) (*cloud.Event, error) {
	in, err := tx.GetInstance(ctx, id)
	if err != nil {
		return nil, err
	}
	from := in.State
	in.State, in.UpdatedAt = to, at
	if err := tx.UpdateInstance(ctx, in); err != nil {
		return nil, err
	}
	e := &cloud.Event{Time: at, Kind: cloud.EventInstanceState, TenantID: in.TenantID, InstanceID: id,
		From: from, To: to, Actor: "test"}
	return e, tx.AppendEvent(ctx, e)
}

// testUsageLedger checks the metering of instance moves, batches of moves,
// volume changes and a rollback, then the listing of what they metered. The
// steps run in this order on one store: each counts the entries the steps
// before it left.
func testUsageLedger(t *testing.T, s cloud.Store) {
	seedTenants(t, s, "t-1", "t-2")
	ledgerInstanceMoves(t, s)
	n := ledgerBatches(t, s)
	ledgerVolume(t, s)
	ledgerRollback(t, s)
	ledgerListing(t, s, n)
	ledgerEndpointWorker(t, s)
}

// ledgerEndpointWorker checks that an endpoint's worker keeps its
// EndpointID (which an update cannot change), that its compute entries
// carry it, and that OpenUsage reads it back.
func ledgerEndpointWorker(t *testing.T, s cloud.Store) {
	inTx(t, s, func(tx cloud.Tx) error {
		return tx.CreateInstance(ctx, &cloud.Instance{ID: "i-ep", TenantID: "t-1", Offering: "h100.1x", Zone: "eu-1a",
			State: cloud.Pending, Market: cloud.MarketOnDemand, EndpointID: "ep-1"})
	})
	var on, off *cloud.Event
	inTx(t, s, func(tx cloud.Tx) error {
		var err error
		on, err = move(tx, "i-ep", cloud.Running, ledgerMinute(100))
		return err
	})
	got := mustRead(t, s, func(tx cloud.Tx) (*cloud.Instance, error) {
		in, err := tx.GetInstance(ctx, "i-ep")
		if err != nil {
			return nil, err
		}
		in.EndpointID = "ep-other" // fixed at create: not written
		return in, tx.UpdateInstance(ctx, in)
	})
	if got.EndpointID != "ep-other" {
		t.Fatalf("instance read back as %+v", got)
	}
	if in := mustRead(t, s, func(tx cloud.Tx) (*cloud.Instance, error) { return tx.GetInstance(ctx, "i-ep") }); in.EndpointID != "ep-1" {
		t.Errorf("endpoint worker's endpoint %q after an update, want ep-1", in.EndpointID)
	}
	open := mustRead(t, s, func(tx cloud.Tx) ([]*cloud.Usage, error) { return tx.OpenUsage(ctx, "t-1", ledgerMinute(101)) })
	found := false
	for _, u := range open {
		if u.ResourceID == "i-ep" {
			found = true
			if u.EndpointID != "ep-1" {
				t.Errorf("open entry %+v: want endpoint ep-1", u)
			}
		}
	}
	if !found {
		t.Errorf("the worker's On is not open: %+v", open)
	}
	inTx(t, s, func(tx cloud.Tx) error {
		var err error
		off, err = move(tx, "i-ep", cloud.Terminated, ledgerMinute(102))
		return err
	})
	var mine []cloud.Usage
	for _, u := range usageOf(t, s, "t-1") {
		if u.ResourceID == "i-ep" {
			mine = append(mine, u)
		}
	}
	want := []cloud.Usage{
		computeUsage("t-1", "i-ep", true, ledgerMinute(100), on, "h100.1x", "eu-1a", cloud.MarketOnDemand),
		computeUsage("t-1", "i-ep", false, ledgerMinute(102), off, "h100.1x", "eu-1a", cloud.MarketOnDemand),
	}
	for i := range want {
		want[i].EndpointID = "ep-1"
	}
	wantEqual(t, "the worker's entries carry its endpoint", mine, want)
}

// ledgerMinute is the time m minutes after t0.
func ledgerMinute(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }

// computeUsage is the compute entry that event e meters.
func computeUsage(tenant, id string, on bool, at time.Time, e *cloud.Event, offering, zone string, m cloud.Market) cloud.Usage {
	return cloud.Usage{Time: us(at), TenantID: tenant, Kind: cloud.UsageCompute, ResourceID: id, On: on,
		Offering: offering, Zone: zone, Market: m, Quantity: 1, EventID: e.ID}
}

// ledgerInstanceMoves moves spot instance i-1 of t-1 from pending to
// stopped: an On at running, an Off at stopped, nothing else.
func ledgerInstanceMoves(t *testing.T, s cloud.Store) {
	inTx(t, s, func(tx cloud.Tx) error {
		return tx.CreateInstance(ctx, &cloud.Instance{ID: "i-1", TenantID: "t-1", Offering: "h100.8x",
			State: cloud.Pending, Market: cloud.MarketSpot, SpotRequestID: "sr-1"})
	})
	// The zone is set when the instance is placed.
	inTx(t, s, func(tx cloud.Tx) error {
		in, err := tx.GetInstance(ctx, "i-1")
		if err != nil {
			return err
		}
		in.Zone = "eu-1a"
		return tx.UpdateInstance(ctx, in)
	})
	at := ledgerMinute
	events := map[cloud.State]*cloud.Event{}
	for i, to := range []cloud.State{cloud.Scheduled, cloud.Starting, cloud.Running, cloud.Stopping, cloud.Stopped} {
		inTx(t, s, func(tx cloud.Tx) error {
			e, err := move(tx, "i-1", to, at(i+1))
			events[to] = e
			return err
		})
		if n := len(usageOf(t, s, "t-1")); (to == cloud.Running || to == cloud.Stopping) && n != 1 ||
			to == cloud.Stopped && n != 2 || (to == cloud.Scheduled || to == cloud.Starting) && n != 0 {
			t.Errorf("after the move to %s: %d usage entries", to, n)
		}
	}
	wantEqual(t, "one On at running, one Off at stopped", usageOf(t, s, "t-1"), []cloud.Usage{
		computeUsage("t-1", "i-1", true, at(3), events[cloud.Running], "h100.8x", "eu-1a", cloud.MarketSpot),
		computeUsage("t-1", "i-1", false, at(5), events[cloud.Stopped], "h100.8x", "eu-1a", cloud.MarketSpot),
	})
}

// ledgerBatches moves n instances of t-2 in one batch of events, then
// stops those running in another, and returns n. The scheduler's moves to
// scheduled meter nothing; the others meter with the instance rows as the
// transaction sees them.
func ledgerBatches(t *testing.T, s cloud.Store) int {
	at := ledgerMinute
	const n = 300
	inTx(t, s, func(tx cloud.Tx) error {
		for i := 0; i < n; i++ {
			in := &cloud.Instance{ID: fmt.Sprintf("b-%03d", i), TenantID: "t-2", Offering: fmt.Sprint("o", i%3),
				State: cloud.Pending, Zone: fmt.Sprint("z", i%2)}
			if err := tx.CreateInstance(ctx, in); err != nil {
				return err
			}
		}
		return nil
	})
	var batch []*cloud.Event
	var want []cloud.Usage
	inTx(t, s, func(tx cloud.Tx) error {
		all, err := tx.ListInstances(ctx, cloud.InstanceFilter{TenantID: "t-2"})
		if err != nil {
			return err
		}
		for i, in := range all {
			from := in.State
			switch i % 3 {
			case 0:
				in.State = cloud.Scheduled
			case 1:
				in.State = cloud.Running
			case 2:
				in.State = cloud.Failed // pending -> failed: no edge
			}
			batch = append(batch, &cloud.Event{Time: at(100 + i), Kind: cloud.EventInstanceState, TenantID: "t-2",
				InstanceID: in.ID, From: from, To: in.State})
		}
		// Another kind of event and an event without instance meter
		// nothing, whatever their states.
		batch = append(batch,
			&cloud.Event{Time: at(1000), Kind: "note", InstanceID: all[1].ID, From: cloud.Starting, To: cloud.Running},
			&cloud.Event{Time: at(1000), Kind: cloud.EventInstanceState, From: cloud.Starting, To: cloud.Running},
			// An instance the store does not hold meters nothing.
			&cloud.Event{Time: at(1000), Kind: cloud.EventInstanceState, TenantID: "t-2", InstanceID: "i-404",
				From: cloud.Starting, To: cloud.Running})
		stale, err := tx.UpdateInstances(ctx, all)
		if err != nil || len(stale) > 0 {
			return fmt.Errorf("UpdateInstances: %v %v", stale, err)
		}
		return tx.AppendEvents(ctx, batch)
	})
	for i := 0; i < n; i++ {
		if i%3 == 1 {
			e := batch[i]
			want = append(want, computeUsage("t-2", e.InstanceID, true, e.Time, e, fmt.Sprint("o", i%3), fmt.Sprint("z", i%2),
				cloud.MarketOnDemand))
		}
	}
	wantUsage(t, "a batch meters its running moves in order", usageOf(t, s, "t-2"), want)
	// Stop them all in one more batch, with ordinary appends around it.
	var stops []*cloud.Event
	inTx(t, s, func(tx cloud.Tx) error {
		running, err := tx.ListInstances(ctx, cloud.InstanceFilter{TenantID: "t-2", States: []cloud.State{cloud.Running}})
		if err != nil {
			return err
		}
		for _, in := range running {
			in.State = cloud.Lost
			stops = append(stops, &cloud.Event{Time: at(2000), Kind: cloud.EventInstanceState, TenantID: "t-2",
				InstanceID: in.ID, From: cloud.Running, To: cloud.Lost})
		}
		if _, err := tx.UpdateInstances(ctx, running); err != nil {
			return err
		}
		return tx.AppendEvents(ctx, stops)
	})
	for _, e := range stops {
		i := 0
		fmt.Sscanf(e.InstanceID, "b-%d", &i)
		want = append(want, computeUsage("t-2", e.InstanceID, false, e.Time, e, fmt.Sprint("o", i%3), fmt.Sprint("z", i%2),
			cloud.MarketOnDemand))
	}
	wantUsage(t, "a batch of stops", usageOf(t, s, "t-2"), want)
	return n
}

// ledgerVolume creates, resizes, renames and deletes volume v-1 of t-1: an
// On at creation with the size, an Off and an On at the resize, an Off at
// the deletion, and nothing for the rename or refused updates.
func ledgerVolume(t *testing.T, s cloud.Store) {
	at := ledgerMinute
	v := &cloud.Volume{ID: "v-1", TenantID: "t-1", Name: "data", SizeGiB: 500, Zone: "eu-1a", CreatedAt: at(10)}
	inTx(t, s, func(tx cloud.Tx) error { return tx.CreateVolume(ctx, v) })
	before := time.Now()
	v.SizeGiB, v.Name = 800, "renamed"
	inTx(t, s, func(tx cloud.Tx) error { return tx.UpdateVolume(ctx, v) })
	after := time.Now()
	v.Name = "renamed again" // no usage
	inTx(t, s, func(tx cloud.Tx) error { return tx.UpdateVolume(ctx, v) })
	v.DeletedAt = ptr(at(50))
	inTx(t, s, func(tx cloud.Tx) error { return tx.UpdateVolume(ctx, v) })
	inTx(t, s, func(tx cloud.Tx) error { return tx.UpdateVolume(ctx, v) }) // the same deletion again
	got := usageOf(t, s, "t-1")[2:]
	vol := func(on bool, at time.Time, gib int64) cloud.Usage {
		return cloud.Usage{Time: us(at), TenantID: "t-1", Kind: cloud.UsageVolume, ResourceID: "v-1", On: on,
			Zone: "eu-1a", Quantity: gib}
	}
	if len(got) == 4 {
		resized := got[1].Time
		if resized.Before(us(before)) || resized.After(after) || !got[2].Time.Equal(resized) {
			t.Errorf("the resize is metered at %v and %v, want the time of the update (%v to %v)",
				resized, got[2].Time, before, after)
		}
		wantEqual(t, "volume usage", got, []cloud.Usage{vol(true, at(10), 500), vol(false, resized, 500),
			vol(true, resized, 800), vol(false, at(50), 800)})
	} else {
		t.Errorf("volume usage: %+v, want 4 entries", got)
	}
	restore := *v
	restore.DeletedAt = nil
	wantCode(t, "restoring a deleted volume", try(s, func(tx cloud.Tx) error { return tx.UpdateVolume(ctx, &restore) }),
		cloud.Invalid, "")
	redelete := *v
	redelete.DeletedAt = ptr(at(60))
	wantCode(t, "deleting a volume twice", try(s, func(tx cloud.Tx) error { return tx.UpdateVolume(ctx, &redelete) }),
		cloud.Conflict, "")
	if n := len(usageOf(t, s, "t-1")); n != 6 {
		t.Errorf("%d usage entries of t-1 after the refused updates, want 6", n)
	}
}

// ledgerRollback meters in a transaction that rolls back: the entries are
// visible inside it and gone after it.
func ledgerRollback(t *testing.T, s cloud.Store) {
	at := ledgerMinute
	err := try(s, func(tx cloud.Tx) error {
		if err := tx.CreateVolume(ctx, &cloud.Volume{ID: "v-2", TenantID: "t-1", SizeGiB: 1, CreatedAt: at(70)}); err != nil {
			return err
		}
		if err := tx.CreateAddress(ctx, &cloud.Address{ID: "a-1", TenantID: "t-1", IP: "192.0.2.1", CreatedAt: at(70)}); err != nil {
			return err
		}
		for _, to := range []cloud.State{cloud.Pending, cloud.Scheduled, cloud.Starting, cloud.Running} {
			if _, err := move(tx, "i-1", to, at(80)); err != nil {
				return err
			}
		}
		us, err := tx.ListUsage(ctx, cloud.UsageFilter{TenantID: "t-1"})
		if err != nil {
			return err
		}
		if len(us) != 9 {
			return fmt.Errorf("inside the transaction: %d usage entries, want 9", len(us))
		}
		return errSentinel
	})
	if err != errSentinel {
		t.Fatalf("Tx returned %v, want the function's error", err)
	}
	if n := len(usageOf(t, s, "t-1")); n != 6 {
		t.Errorf("%d usage entries of t-1 after the rollback, want 6", n)
	}
}

// ledgerListing checks ListUsage's filters and paging over the entries the
// steps before it metered (n instances in ledgerBatches).
func ledgerListing(t *testing.T, s cloud.Store, n int) {
	at := ledgerMinute
	allUsage := mustRead(t, s, func(tx cloud.Tx) ([]*cloud.Usage, error) { return tx.ListUsage(ctx, cloud.UsageFilter{}) })
	if len(allUsage) != 6+2*(n/3) {
		t.Errorf("%d usage entries in all, want %d", len(allUsage), 6+2*(n/3))
	}
	var paged []*cloud.Usage
	for f := (cloud.UsageFilter{Limit: 7}); ; {
		page := mustRead(t, s, func(tx cloud.Tx) ([]*cloud.Usage, error) { return tx.ListUsage(ctx, f) })
		if len(page) == 0 || len(paged) > len(allUsage) {
			break
		}
		paged = append(paged, page...)
		f.AfterID = page[len(page)-1].ID
	}
	wantEqual(t, "paging by AfterID visits every entry once", paged, allUsage)
	early := mustRead(t, s, func(tx cloud.Tx) ([]*cloud.Usage, error) {
		return tx.ListUsage(ctx, cloud.UsageFilter{TenantID: "t-1", Before: at(5)})
	})
	if len(early) != 1 || !early[0].On || early[0].ResourceID != "i-1" {
		t.Errorf("Before is exclusive: %+v, want the On at running alone", early)
	}
	_, err := read(t, s, func(tx cloud.Tx) ([]*cloud.Usage, error) {
		return tx.ListUsage(ctx, cloud.UsageFilter{Limit: -1})
	})
	wantCode(t, "a negative Limit", err, cloud.Invalid, "")
}

func testOpenUsage(t *testing.T, s cloud.Store) {
	seedTenants(t, s, "t-1", "t-2")
	at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
	vol := func(id, tenant string, created int) {
		inTx(t, s, func(tx cloud.Tx) error {
			return tx.CreateVolume(ctx, &cloud.Volume{ID: id, TenantID: tenant, Name: id, SizeGiB: 10, CreatedAt: at(created)})
		})
	}
	del := func(id string, m int) {
		inTx(t, s, func(tx cloud.Tx) error {
			v, err := tx.GetVolume(ctx, id)
			if err != nil {
				return err
			}
			v.DeletedAt = new(at(m))
			return tx.UpdateVolume(ctx, v)
		})
	}
	vol("v-1", "t-1", 0)
	vol("v-2", "t-1", 5)
	vol("v-9", "t-2", 6)
	del("v-1", 10)
	vol("v-3", "t-1", 20)
	open := func(tenant string, m int) []string {
		t.Helper()
		us := mustRead(t, s, func(tx cloud.Tx) ([]*cloud.Usage, error) { return tx.OpenUsage(ctx, tenant, at(m)) })
		var ids []string
		for _, u := range us {
			if !u.On {
				t.Errorf("OpenUsage returned an Off: %+v", u)
			}
			ids = append(ids, u.ResourceID)
		}
		return ids
	}
	for _, c := range []struct {
		tenant string
		m      int
		want   string
	}{
		{"t-1", 0, ""},          // nothing before the first entry
		{"t-1", 7, "v-1 v-2"},   // both live
		{"t-1", 10, "v-1 v-2"},  // the Off at 10 is not before 10
		{"t-1", 11, "v-2"},      // v-1 deleted
		{"t-1", 30, "v-2 v-3"},  //
		{"", 30, "v-2 v-9 v-3"}, // every tenant, in ID order
		{"t-2", 30, "v-9"},
	} {
		if got := strings.Join(open(c.tenant, c.m), " "); got != c.want {
			t.Errorf("OpenUsage(%q, +%dm) = %q, want %q", c.tenant, c.m, got, c.want)
		}
	}
	// Since and Before bound ListUsage.
	us := mustRead(t, s, func(tx cloud.Tx) ([]*cloud.Usage, error) {
		return tx.ListUsage(ctx, cloud.UsageFilter{TenantID: "t-1", Since: at(5), Before: at(20)})
	})
	if len(us) != 2 || us[0].ResourceID != "v-2" || us[1].ResourceID != "v-1" || us[1].On {
		t.Errorf("ListUsage(since 5m, before 20m) = %+v, want v-2 On and v-1 Off", us)
	}
}
