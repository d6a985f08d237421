package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
	"github.com/gpucloud/gpucloud/testkit"
)

// poolsSeed writes instances, their lifecycle moves (which the store meters
// into the usage ledger) and reclaim notices straight into the store, at
// the times given, as the scheduler and the agents would.
type poolsSeed struct {
	t *testing.T
	e *env
}

// instance creates a pending instance of tenant in offering/zone.
func (s poolsSeed) instance(id, tenant, offering, zone string, market cloud.Market) {
	s.t.Helper()
	ctx := context.Background()
	in := &cloud.Instance{ID: id, TenantID: tenant, Name: id, Offering: offering, Zone: zone, Market: market,
		State: cloud.Pending, CreatedAt: s.e.clock.Now().Add(-300 * time.Hour)}
	if err := s.e.store.Tx(ctx, func(tx cloud.Tx) error { return tx.CreateInstance(ctx, in) }); err != nil {
		s.t.Fatalf("create %s: %v", id, err)
	}
}

// move moves an instance to state to at at, step by step as the scheduler
// and the agents would (testkit.Walk), with the instance.state events the
// store meters; a zone (when not empty) is where it then stands.
func (s poolsSeed) move(id string, to cloud.State, zone string, at time.Time) {
	s.t.Helper()
	testkit.Walk(s.t, s.e.store, id, to, testkit.Via{Zone: zone}, at)
	if zone == "" {
		return
	}
	ctx := context.Background()
	err := s.e.store.Tx(ctx, func(tx cloud.Tx) error {
		in, err := tx.GetInstance(ctx, id)
		if err != nil {
			return err
		}
		in.Zone = zone
		return tx.UpdateInstance(ctx, in)
	})
	if err != nil {
		s.t.Fatalf("move %s to zone %s: %v", id, zone, err)
	}
}

// run makes an instance run from start until end (zero: still running).
func (s poolsSeed) run(id string, start, end time.Time) {
	s.t.Helper()
	s.move(id, cloud.Running, "", start)
	if !end.IsZero() {
		s.move(id, cloud.Terminated, "", end)
	}
}

// reclaim records a reclaim notice of an instance at at, as the
// scheduler's announce does.
func (s poolsSeed) reclaim(tenant, id string, at time.Time) {
	s.t.Helper()
	ctx := context.Background()
	e := &cloud.Event{Time: at, Kind: cloud.EventSpotInterruption, TenantID: tenant, InstanceID: id,
		Reason: "spot terminate in 2m0s: on-demand capacity needed", Actor: "scheduler",
		Details: json.RawMessage(`{"action":"terminate","reason":"capacity"}`)}
	if err := s.e.store.Tx(ctx, func(tx cloud.Tx) error { return tx.AppendEvent(ctx, e) }); err != nil {
		s.t.Fatalf("reclaim %s: %v", id, err)
	}
}

func TestSpotPoolsReclaims(t *testing.T) { onBothStores(t, testSpotPoolsReclaims) }

func testSpotPoolsReclaims(t *testing.T, e *env) {
	e.withPrices()
	ctx := context.Background()
	now := e.clock.Now()
	h := func(n float64) time.Time { return now.Add(-time.Duration(n * float64(time.Hour))) }
	a := cloud.Pool{Offering: "l4.1x", Zone: "zone-a"}
	b := cloud.Pool{Offering: "a100.1x", Zone: "zone-b"}
	c := cloud.Pool{Offering: "l40s.1x", Zone: "zone-c"}
	err := e.store.Tx(ctx, func(tx cloud.Tx) error {
		return tx.AppendSpotPrices(ctx, []cloud.SpotPrice{
			{Pool: a, Time: h(1), Price: money.MustParse("0.20")},
			{Pool: b, Time: h(1), Price: money.MustParse("0.70")},
			{Pool: c, Time: h(1), Price: money.MustParse("0.40")},
		})
	})
	if err != nil {
		t.Fatal(err)
	}

	s := poolsSeed{t, e}
	spot, od := cloud.MarketSpot, cloud.MarketOnDemand
	// Pool a. i1 (acme) runs from before any window until now.
	s.instance("i1", e.acmeID, "l4.1x", "zone-a", spot)
	s.run("i1", h(200), time.Time{})
	// i2 (globex) runs 10 h to 4 h ago and is reclaimed in that time; a
	// notice before the window does not count.
	s.instance("i2", e.globexID, "l4.1x", "zone-a", spot)
	s.run("i2", h(10), h(4))
	s.reclaim(e.globexID, "i2", h(4.1))
	s.reclaim(e.globexID, "i2", h(169))
	// i3 is on demand: neither its seconds nor its notices count.
	s.instance("i3", e.acmeID, "l4.1x", "zone-a", od)
	s.run("i3", h(5), time.Time{})
	// i6 gets a notice before it ever ran: it counts in the pool of its
	// offering and zone.
	s.instance("i6", e.acmeID, "l4.1x", "zone-a", spot)
	s.move("i6", cloud.Scheduled, "", h(30.5))
	s.reclaim(e.acmeID, "i6", h(30))

	// Pool b. i4 runs 3 h to 1 h ago, its start not on a whole second
	// (rating truncates bounds to seconds), with two notices.
	s.instance("i4", e.acmeID, "a100.1x", "zone-b", spot)
	s.run("i4", now.Add(-3*time.Hour+500*time.Millisecond), h(1))
	s.reclaim(e.acmeID, "i4", h(2))
	s.reclaim(e.acmeID, "i4", h(1.5))
	// i5 ran in pool b and was reclaimed there, then went back to pending
	// and now stands in another zone: the notice stays with pool b.
	s.instance("i5", e.globexID, "a100.1x", "zone-b", spot)
	s.run("i5", h(50), time.Time{})
	s.reclaim(e.globexID, "i5", h(48.1))
	s.move("i5", cloud.Pending, "zone-x", h(48))

	// Notices that never count: at now or later, of no instance, of a
	// missing instance, and another kind.
	s.reclaim(e.acmeID, "i1", now)
	s.reclaim(e.acmeID, "i1", now.Add(time.Hour))
	s.reclaim(e.acmeID, "", h(2))
	s.reclaim(e.acmeID, "i-gone", h(2))
	if err := e.store.Tx(ctx, func(tx cloud.Tx) error {
		return tx.AppendEvent(ctx, &cloud.Event{Time: h(2), Kind: cloud.EventSpotRebalance, TenantID: e.acmeID, InstanceID: "i1"})
	}); err != nil {
		t.Fatal(err)
	}

	type figures struct {
		window, reclaims, seconds, rate int64
	}
	check := func(desc string, c *client.Client, window time.Duration, want map[cloud.Pool]figures) {
		t.Helper()
		pools, err := c.SpotPoolsOver(ctx, window)
		if err != nil {
			t.Fatalf("%s: %v", desc, err)
		}
		got := map[cloud.Pool]figures{}
		for _, p := range pools {
			got[p.Pool] = figures{p.WindowSeconds, p.Reclaims, p.SpotSeconds, p.ReclaimRateBP}
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %+v\nwant %+v", desc, got, want)
		}
	}
	week := int64(168 * 3600)
	// Pool a: i1's whole week and i2's 6 hours; i2's and i6's notices.
	// 2 × 3600 × 10000 / 626400 = 114.9. Pool b: i4's 2 h and i5's 2 h;
	// i4's two notices and i5's. 3 × 3600 × 10000 / 14400 = 7500.
	defaults := map[cloud.Pool]figures{
		a: {week, 2, 604800 + 21600, 114},
		b: {week, 3, 7200 + 7200, 7500},
		c: {week, 0, 0, 0},
	}
	check("the default window, as a member", e.acme, 0, defaults)
	check("168h, as the other tenant's member", e.globex, 168*time.Hour, defaults)
	check("the default window, as an admin", e.admin, 0, defaults)
	// A day: i1's 24 h and i2's 6 h with i2's notice (i6's is 30 h ago);
	// i4 alone in pool b, with its two notices.
	check("24h", e.acme, 24*time.Hour, map[cloud.Pool]figures{
		a: {86400, 1, 86400 + 21600, 333},
		b: {86400, 2, 7200, 10000},
		c: {86400, 0, 0, 0},
	})
	// 2 hours and a half: i1's 2.5 h, i3 on demand; i4 from 2.5 h ago to
	// 1 h ago, with both notices. The rate may pass one per hour.
	check("2h30m", e.acme, 150*time.Minute, map[cloud.Pool]figures{
		a: {9000, 0, 9000, 0},
		b: {9000, 2, 5400, 13333},
		c: {9000, 0, 0, 0},
	})
	// 30 days: i1 from 200 h ago, i5's notice 48.1 h ago counted once.
	check("720h", e.acme, 720*time.Hour, map[cloud.Pool]figures{
		a: {720 * 3600, 3, 200*3600 + 21600, 3 * 36_000_000 / (200*3600 + 21600)},
		b: {720 * 3600, 3, 14400, 7500},
		c: {720 * 3600, 0, 0, 0},
	})

	// The raw fields, and nothing about tenants or instances.
	code, _, body := e.raw("GET", "/v1/spot/pools?window=24h", e.acmeToken, nil, nil)
	for _, want := range []string{`"window_seconds":86400`, `"reclaims":1`, `"spot_seconds":108000`, `"reclaim_rate_bp":333`} {
		if code != http.StatusOK || !strings.Contains(string(body), want) {
			t.Errorf("GET ?window=24h = %d %s, want %s", code, body, want)
		}
	}
	for _, leak := range []string{e.globexID, e.acmeID, `"i2"`, `"i5"`, "tenant", "instance"} {
		if strings.Contains(string(body), leak) {
			t.Errorf("a member's pool list mentions %q: %s", leak, body)
		}
	}

	before := e.billingCounts()
	for _, q := range []string{"window=0", "window=-1h", "window=721h", "window=720h1s", "window=500ms", "window=1.5s",
		"window=week", "window=7d", "window=%20"} {
		code, _, body := e.raw("GET", "/v1/spot/pools?"+q, e.acmeToken, nil, nil)
		eb := decodeErr(t, body)
		if code != http.StatusBadRequest || eb.Code != cloud.Invalid || eb.Details["field"] != "window" ||
			!strings.Contains(eb.Message, "window") {
			t.Errorf("?%s = %d %s", q, code, body)
		}
	}
	e.billingUnchanged(before, "bad windows")
	for _, q := range []string{"window=1s", "window=720h", "window=90m"} {
		if code, _, body := e.raw("GET", "/v1/spot/pools?"+q, e.acmeToken, nil, nil); code != http.StatusOK {
			t.Errorf("?%s = %d %s", q, code, body)
		}
	}
}

// TestSpotPoolsNoPools: no spot prices yet is an empty list, whatever the
// ledger holds.
func TestSpotPoolsNoPools(t *testing.T) {
	e := newEnv(t)
	s := poolsSeed{t, e}
	s.instance("i1", e.acmeID, "l4.1x", "zone-a", cloud.MarketSpot)
	s.run("i1", e.clock.Now().Add(-time.Hour), time.Time{})
	s.reclaim(e.acmeID, "i1", e.clock.Now().Add(-time.Minute))
	pools, err := e.acme.SpotPoolsOver(context.Background(), 24*time.Hour)
	if err != nil || len(pools) != 0 {
		t.Errorf("pools = %+v, %v", pools, err)
	}
}

// TestOpenAPISpotPools checks that the document describes every field of
// SpotPool and the window parameter of GET /v1/spot/pools.
func TestOpenAPISpotPools(t *testing.T) {
	doc := loadOpenAPI(t)
	var schema struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(doc.Components.Schemas["SpotPool"], &schema); err != nil {
		t.Fatal(err)
	}
	var fields []string
	var walk func(reflect.Type)
	walk = func(rt reflect.Type) {
		for i := range rt.NumField() {
			f := rt.Field(i)
			if f.Anonymous {
				walk(f.Type)
				continue
			}
			fields = append(fields, strings.Split(f.Tag.Get("json"), ",")[0])
		}
	}
	walk(reflect.TypeFor[api.SpotPool]())
	var documented []string
	for name := range schema.Properties {
		documented = append(documented, name)
	}
	slices.Sort(fields)
	slices.Sort(documented)
	if !slices.Equal(fields, documented) {
		t.Errorf("SpotPool schema has %v, the type %v", documented, fields)
	}
	op := doc.Paths["/v1/spot/pools"]["get"]
	if !slices.ContainsFunc(op.Parameters, func(p openAPIParam) bool { return p.Name == "window" && p.In == "query" }) {
		t.Errorf("listSpotPools does not declare ?window: %+v", op.Parameters)
	}
	if _, ok := op.Responses["400"]; !ok {
		t.Error("listSpotPools has no 400 response for a bad window")
	}
}
