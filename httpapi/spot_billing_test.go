package httpapi

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/billing"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
)

func TestSpotPricesAndPools(t *testing.T) { onBothStores(t, testSpotPricesAndPools) }

func testSpotPricesAndPools(t *testing.T, e *env) {
	e.withPrices()
	ctx := context.Background()
	now := e.clock.Now()
	a := cloud.Pool{Offering: "l4.1x", Zone: "zone-a"}
	b := cloud.Pool{Offering: "a100.1x", Zone: "zone-b"}
	points := []cloud.SpotPrice{
		{Pool: a, Time: now.Add(-30 * time.Hour), Price: money.MustParse("0.10")},
		{Pool: a, Time: now.Add(-2 * time.Hour), Price: money.MustParse("0.20")},
		{Pool: b, Time: now.Add(-90 * time.Minute), Price: money.MustParse("0.70")},
		{Pool: a, Time: now.Add(-time.Hour), Price: money.MustParse("0.25")},
	}
	if err := e.store.Tx(ctx, func(tx cloud.Tx) error { return tx.AppendSpotPrices(ctx, points) }); err != nil {
		t.Fatal(err)
	}
	got, err := e.acme.SpotPrices(ctx, client.SpotPricesOptions{})
	if err != nil || len(got) != 3 || got[0].Price != money.MustParse("0.20") || got[2].Price != money.MustParse("0.25") {
		t.Errorf("last 24h = %v, %v", got, err)
	}
	got, err = e.acme.SpotPrices(ctx, client.SpotPricesOptions{Pools: []cloud.Pool{a}, Since: now.Add(-48 * time.Hour), Limit: 2})
	if err != nil || len(got) != 2 || got[0].Price != money.MustParse("0.10") || got[1].Pool != a {
		t.Errorf("pool a since 48h, 2 points = %v, %v", got, err)
	}
	got, err = e.acme.SpotPrices(ctx, client.SpotPricesOptions{Pools: []cloud.Pool{b, a}, Until: now.Add(-80 * time.Minute)})
	if err != nil || len(got) != 2 {
		t.Errorf("until -80m = %v, %v", got, err)
	}
	code, _, body := e.raw("GET", "/v1/spot/prices?pool=l4.1x/zone-a", e.acmeToken, nil, nil)
	if code != http.StatusOK || !strings.Contains(string(body), `"price":"0.25"`) || !strings.Contains(string(body), `"pool":{"offering":"l4.1x","zone":"zone-a"}`) {
		t.Errorf("raw spot prices: %d %s", code, body)
	}
	before := e.billingCounts()
	for _, q := range []string{"pool=l4.1x", "pool=/zone-a", "pool=h900.1x/zone-a", "since=yesterday",
		"limit=0", "limit=10001", "until=" + now.Add(-48*time.Hour).Format(time.RFC3339)} {
		code, _, body := e.raw("GET", "/v1/spot/prices?"+q, e.acmeToken, nil, nil)
		if eb := decodeErr(t, body); code != http.StatusBadRequest || eb.Code != cloud.Invalid {
			t.Errorf("?%s = %d %s", q, code, body)
		}
	}
	e.billingUnchanged(before, "bad spot price queries")

	pools, err := e.acme.SpotPools(ctx)
	if err != nil || len(pools) != 2 {
		t.Fatalf("pools = %v, %v", pools, err)
	}
	odA, _ := billing.ListPrice(catalog.Default(), "l4.1x")
	if pools[1].Pool != a || pools[1].Price != money.MustParse("0.25") || pools[1].OnDemand == nil || *pools[1].OnDemand != odA {
		t.Errorf("pool a = %+v", pools[1])
	}
	if pools[0].Pool != b || pools[0].Price != money.MustParse("0.70") {
		t.Errorf("pool b = %+v", pools[0])
	}
}

func TestSpotRequests(t *testing.T) { onBothStores(t, testSpotRequests) }

func testSpotRequests(t *testing.T, e *env) {
	e.withPrices()
	ctx := context.Background()
	max := money.MustParse("0.50")
	req := api.CreateSpotRequestRequest{Name: "train", Type: cloud.SpotPersistent, MaxPrice: &max, Interruption: cloud.ActionStop,
		Pools:   []cloud.Pool{{Offering: "l4.1x", Zone: "zone-a"}, {Offering: "l40s.1x", Zone: "zone-b"}},
		Command: []string{"python", "train.py"}, Env: map[string]string{"A": "1"}, Tags: map[string]string{"team": "ml"}}
	sr, err := e.acme.CreateSpotRequest(ctx, req, "spot-1")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(sr.ID, "sr-") || sr.TenantID != e.acmeID || sr.State != cloud.SpotOpen || sr.Launches != 1 ||
		sr.InstanceID == "" || sr.MaxPrice != max || sr.Interruption != cloud.ActionStop || len(sr.Pools) != 2 || sr.Version < 2 {
		t.Errorf("spot request = %+v", sr)
	}
	in, err := e.acme.GetInstance(ctx, sr.InstanceID)
	if err != nil || in.Market != cloud.MarketSpot || in.SpotRequestID != sr.ID || in.Offering != "l4.1x" ||
		in.State != cloud.Pending || len(in.Zones) != 1 || in.Zones[0] != "zone-a" || in.Env["A"] != "1" {
		t.Errorf("launched instance = %+v, %v", in, err)
	}
	code, _, body := e.raw("GET", "/v1/instances/"+in.ID, e.acmeToken, nil, nil)
	if code != http.StatusOK || !strings.Contains(string(body), `"market":"spot"`) || !strings.Contains(string(body), `"spot_request_id":"`+sr.ID+`"`) {
		t.Errorf("instance JSON: %s", body)
	}

	// Idempotency.
	before := e.billingCounts()
	again, err := e.acme.CreateSpotRequest(ctx, req, "spot-1")
	if err != nil || again.ID != sr.ID || again.InstanceID != sr.InstanceID {
		t.Errorf("retry = %+v, %v", again, err)
	}
	other := req
	other.Pools = []cloud.Pool{{Offering: "l4.1x", Zone: "zone-a"}}
	_, err = e.acme.CreateSpotRequest(ctx, other, "spot-1")
	if ce := wantCode(t, err, cloud.Conflict); ce.Details["existing_id"] != sr.ID {
		t.Errorf("reused key: %v", ce)
	}
	e.billingUnchanged(before, "spot retries")

	// Defaults: one-time, terminate, no cap.
	plain, err := e.acme.CreateSpotRequest(ctx, api.CreateSpotRequestRequest{Pools: []cloud.Pool{{Offering: "l4.1x", Zone: "zone-c"}}}, "")
	if err != nil || plain.Type != cloud.SpotOneTime || plain.Interruption != cloud.ActionTerminate || plain.MaxPrice != 0 {
		t.Errorf("defaults = %+v, %v", plain, err)
	}

	// Tenancy.
	_, err = e.globex.GetSpotRequest(ctx, sr.ID)
	wantCode(t, err, cloud.NotFound)
	_, err = e.globex.CancelSpotRequest(ctx, sr.ID, true, 0)
	wantCode(t, err, cloud.NotFound)
	if rs, err := e.globex.SpotRequests(ctx, ""); err != nil || len(rs) != 0 {
		t.Errorf("globex requests = %v, %v", rs, err)
	}
	if rs, err := e.acme.SpotRequests(ctx, ""); err != nil || len(rs) != 2 {
		t.Errorf("acme requests = %v, %v", rs, err)
	}
	if rs, err := e.admin.SpotRequests(ctx, e.acmeID, cloud.SpotCancelled); err != nil || len(rs) != 0 {
		t.Errorf("admin: acme's cancelled requests = %v, %v", rs, err)
	}

	// Cancel: a stale If-Match is a conflict; the instance keeps running
	// unless asked; cancelling again terminates it when asked.
	before = e.billingCounts()
	_, err = e.acme.CancelSpotRequest(ctx, sr.ID, false, sr.Version-1)
	wantCode(t, err, cloud.Conflict)
	code, _, body = e.raw("POST", "/v1/spot/requests/"+sr.ID+"/cancel?terminate_instance=maybe", e.acmeToken, nil, nil)
	if eb := decodeErr(t, body); code != http.StatusBadRequest || eb.Details["field"] != "terminate_instance" {
		t.Errorf("terminate_instance=maybe: %d %s", code, body)
	}
	e.billingUnchanged(before, "rejected cancels")
	got, err := e.acme.CancelSpotRequest(ctx, sr.ID, false, sr.Version)
	if err != nil || got.State != cloud.SpotCancelled {
		t.Fatalf("cancel = %+v, %v", got, err)
	}
	if in, _ := e.acme.GetInstance(ctx, sr.InstanceID); in.State != cloud.Pending {
		t.Errorf("instance %s after cancel", in.State)
	}
	got, err = e.acme.CancelSpotRequest(ctx, sr.ID, true, 0)
	if err != nil || got.State != cloud.SpotCancelled {
		t.Fatalf("cancel again = %+v, %v", got, err)
	}
	in, _ = e.acme.GetInstance(ctx, sr.InstanceID)
	if in.State != cloud.Terminated || !strings.Contains(in.Reason, "cancelled") {
		t.Errorf("instance %s (%s) after cancel --terminate-instance", in.State, in.Reason)
	}
	// A running instance goes to terminating, as the terminate route does.
	e.move(plain.InstanceID, cloud.Running, "zone-a")
	if _, err := e.acme.CancelSpotRequest(ctx, plain.ID, true, 0); err != nil {
		t.Fatal(err)
	}
	if in, _ := e.acme.GetInstance(ctx, plain.InstanceID); in.State != cloud.Terminating {
		t.Errorf("running instance %s after cancel --terminate-instance", in.State)
	}
}

func TestSpotRequestRejects(t *testing.T) { onBothStores(t, testSpotRequestRejects) }

func testSpotRequestRejects(t *testing.T, e *env) {
	ctx := context.Background()
	zero, neg := money.Micros(0), money.Micros(-1)
	pool := []cloud.Pool{{Offering: "l4.1x", Zone: "zone-a"}}
	nine := make([]cloud.Pool, 9)
	for i := range nine {
		nine[i] = cloud.Pool{Offering: "l4.1x", Zone: "z" + string(rune('a'+i))}
	}
	vol, err := e.globex.CreateVolume(ctx, api.CreateVolumeRequest{Name: "data", SizeGiB: 1}, "")
	if err != nil {
		t.Fatal(err)
	}
	before := e.billingCounts()
	for _, tc := range []struct {
		name  string
		req   api.CreateSpotRequestRequest
		field string
	}{
		{"no pools", api.CreateSpotRequestRequest{}, "pools"},
		{"nine pools", api.CreateSpotRequestRequest{Pools: nine}, "pools"},
		{"duplicate pools", api.CreateSpotRequestRequest{Pools: append(pool, pool[0])}, "pools[1]"},
		{"unknown offering", api.CreateSpotRequestRequest{Pools: []cloud.Pool{{Offering: "h900.1x"}}}, "pools[0].offering"},
		{"bad zone", api.CreateSpotRequestRequest{Pools: []cloud.Pool{{Offering: "l4.1x", Zone: "zone a"}}}, "pools[0].zone"},
		{"unknown type", api.CreateSpotRequestRequest{Pools: pool, Type: "sometimes"}, "type"},
		{"unknown interruption", api.CreateSpotRequestRequest{Pools: pool, Interruption: "hibernate"}, "interruption"},
		{"zero max price", api.CreateSpotRequestRequest{Pools: pool, MaxPrice: &zero}, "max_price"},
		{"negative max price", api.CreateSpotRequestRequest{Pools: pool, MaxPrice: &neg}, "max_price"},
		{"bad env", api.CreateSpotRequestRequest{Pools: pool, Env: map[string]string{"1X": "y"}}, "env"},
		{"another tenant's volume", api.CreateSpotRequestRequest{Pools: pool, Volumes: []string{vol.ID}}, "volumes[0]"},
	} {
		_, err := e.acme.CreateSpotRequest(ctx, tc.req, "")
		if ce := wantCode(t, err, cloud.Invalid); ce.Details["field"] != tc.field {
			t.Errorf("%s: field %v, want %s (%s)", tc.name, ce.Details["field"], tc.field, ce.Message)
		}
	}
	code, _, body := e.raw("POST", "/v1/spot/requests", e.acmeToken,
		strings.NewReader(`{"pools":[{"offering":"l4.1x"}],"max_price":"cheap"}`), nil)
	if eb := decodeErr(t, body); code != http.StatusBadRequest || eb.Details["field"] != "max_price" {
		t.Errorf("max_price cheap: %d %s", code, body)
	}
	e.billingUnchanged(before, "invalid spot requests")
	// The quota counts spot instances as any other.
	if _, err := e.admin.SetQuota(ctx, e.acmeID, api.QuotaSpec{Instances: 1}); err != nil {
		t.Fatal(err)
	}
	e.mustCreate(e.acme, "l4.1x")
	before = e.billingCounts()
	_, err = e.acme.CreateSpotRequest(ctx, api.CreateSpotRequestRequest{Pools: pool}, "")
	wantCode(t, err, cloud.QuotaExceeded)
	e.billingUnchanged(before, "rejected spot requests")
}
