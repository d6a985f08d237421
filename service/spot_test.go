package service_test

import (
	"context"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

// TestSpotRequestIdempotency reuses a key with a request that differs in
// one field at a time: each is a conflict that names that field, stores
// no request and launches nothing; the identical request answers the
// first request without a second launch.
func TestSpotRequestIdempotency(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newBillFixture(t, st)
		ctx := context.Background()
		vol, vol2 := f.volume(f.acmeID, "zone-a"), f.volume(f.acmeID, "zone-a")
		capped, more := money.MustParse("2.50"), money.MustParse("3")
		base := api.CreateSpotRequestRequest{Name: "train", Type: cloud.SpotPersistent, MaxPrice: &capped, Interruption: cloud.ActionStop,
			Pools:   []cloud.Pool{{Offering: "l4.1x", Zone: "zone-a"}, {Offering: "l40s.1x", Zone: "zone-b"}},
			Command: []string{"python", "train.py"}, Env: map[string]string{"A": "1"}, Volumes: []string{vol},
			Tags: map[string]string{"team": "ml"}}
		before := f.counts()
		sr, created, err := f.svc.Spot.Create(ctx, f.acme, base, "spot-1")
		if err != nil || !created || sr.TenantID != f.acmeID || sr.State != cloud.SpotOpen || sr.Launches != 1 ||
			sr.InstanceID == "" || sr.MaxPrice != capped || sr.Version < 2 {
			t.Fatalf("create = %+v, %v, %v", sr, created, err)
		}
		// Its volume cannot be deleted while the request may launch with it.
		if _, err := f.svc.Volumes.Delete(ctx, f.acme, vol); cloud.ErrorCode(err) != cloud.Conflict {
			t.Errorf("delete the volume of a live spot request: %v", err)
		}
		after := f.counts()
		if after.SpotRequests != before.SpotRequests+1 || after.Instances != before.Instances+1 ||
			after.Attached != before.Attached+1 || after.Events != before.Events+3 {
			t.Errorf("counts %+v -> %+v: want a request, an instance with its volume, three events (the request's, the instance's creation, the volume's attachment)", before, after)
		}
		in, err := f.svc.Instances.Get(ctx, f.acme, sr.InstanceID)
		if err != nil || in.Market != cloud.MarketSpot || in.SpotRequestID != sr.ID || in.Offering != "l4.1x" ||
			in.State != cloud.Pending || len(in.Zones) != 1 || in.Zones[0] != "zone-a" || len(in.Volumes) != 1 {
			t.Errorf("launched instance = %+v, %v", in, err)
		}

		before = f.counts()
		for _, tc := range []struct {
			field string
			edit  func(s *api.CreateSpotRequestRequest)
		}{
			{"name", func(s *api.CreateSpotRequestRequest) { s.Name = "eval" }},
			{"name", func(s *api.CreateSpotRequestRequest) { s.Name = "" }},
			{"type", func(s *api.CreateSpotRequestRequest) { s.Type = cloud.SpotOneTime }},
			{"type", func(s *api.CreateSpotRequestRequest) { s.Type = "" }},
			{"pools", func(s *api.CreateSpotRequestRequest) { s.Pools = s.Pools[:1] }},
			{"image", func(s *api.CreateSpotRequestRequest) { s.Image = "python:3.12" }},
			{"pools", func(s *api.CreateSpotRequestRequest) { s.Pools = []cloud.Pool{s.Pools[1], s.Pools[0]} }},
			{"max_price", func(s *api.CreateSpotRequestRequest) { s.MaxPrice = &more }},
			{"max_price", func(s *api.CreateSpotRequestRequest) { s.MaxPrice = nil }},
			{"interruption", func(s *api.CreateSpotRequestRequest) { s.Interruption = cloud.ActionTerminate }},
			{"command", func(s *api.CreateSpotRequestRequest) { s.Command = []string{"python", "eval.py"} }},
			{"env", func(s *api.CreateSpotRequestRequest) { s.Env = map[string]string{"A": "2"} }},
			{"env", func(s *api.CreateSpotRequestRequest) { s.Env = nil }},
			{"volumes", func(s *api.CreateSpotRequestRequest) { s.Volumes = []string{vol2} }},
			{"volumes", func(s *api.CreateSpotRequestRequest) { s.Volumes = nil }},
			{"tags", func(s *api.CreateSpotRequestRequest) { s.Tags = map[string]string{"team": "infra"} }},
		} {
			spec := base
			tc.edit(&spec)
			_, created, err := f.svc.Spot.Create(ctx, f.acme, spec, "spot-1")
			if created {
				t.Errorf("%s: created", tc.field)
			}
			billKeyConflict(t, err, sr.ID, tc.field)
		}
		f.unchanged(before, "keys reused for other spot requests")

		// The identical request, with the defaults spelled out or not,
		// answers the first request; an admin for acme uses acme's keys.
		again, created, err := f.svc.Spot.Create(ctx, f.acme, base, "spot-1")
		if err != nil || created || again.ID != sr.ID || again.InstanceID != sr.InstanceID {
			t.Errorf("retry = %+v, %v, %v", again, created, err)
		}
		forAcme := base
		forAcme.Tenant = f.acmeID
		if again, created, err := f.svc.Spot.Create(ctx, f.admin, forAcme, "spot-1"); err != nil || created || again.ID != sr.ID {
			t.Errorf("admin retry for acme = %+v, %v, %v", again, created, err)
		}
		f.unchanged(before, "retries")
		plain := api.CreateSpotRequestRequest{Pools: []cloud.Pool{{Offering: "l4.1x", Zone: "zone-c"}}}
		p1, _, err := f.svc.Spot.Create(ctx, f.acme, plain, "plain")
		if err != nil || p1.Type != cloud.SpotOneTime || p1.Interruption != cloud.ActionTerminate || p1.MaxPrice != 0 {
			t.Fatalf("defaults = %+v, %v", p1, err)
		}
		spelled := plain
		spelled.Type, spelled.Interruption = cloud.SpotOneTime, cloud.ActionTerminate
		before = f.counts()
		if again, created, err := f.svc.Spot.Create(ctx, f.acme, spelled, "plain"); err != nil || created || again.ID != p1.ID {
			t.Errorf("retry with the defaults spelled out = %+v, %v, %v", again, created, err)
		}
		f.unchanged(before, "a retry with the defaults spelled out")

		// Another tenant has its own keys.
		g, created, err := f.svc.Spot.Create(ctx, f.globex, plain, "plain")
		if err != nil || !created || g.ID == p1.ID || g.TenantID != f.globexID {
			t.Errorf("globex with acme's key = %+v, %v, %v", g, created, err)
		}
	})
}

// TestSpotRequestLaunchRules: the first launch is an instance's create, so
// the quota and the volume rule refuse it, and then nothing is stored.
func TestSpotRequestLaunchRules(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newBillFixture(t, st)
		ctx := context.Background()
		pool := []cloud.Pool{{Offering: "l4.1x", Zone: "zone-a"}}
		other := f.volume(f.globexID, "zone-a")
		elsewhere := f.volume(f.acmeID, "zone-b")
		before := f.counts()
		_, _, err := f.svc.Spot.Create(ctx, f.acme, api.CreateSpotRequestRequest{Pools: pool, Volumes: []string{other}}, "")
		if billCode(t, err, cloud.Invalid).Details["field"] != "volumes[0]" {
			t.Errorf("another tenant's volume: %v", err)
		}
		_, _, err = f.svc.Spot.Create(ctx, f.acme, api.CreateSpotRequestRequest{Pools: pool, Volumes: []string{elsewhere}}, "k")
		if billCode(t, err, cloud.Invalid).Details["field"] != "volumes[0]" {
			t.Errorf("a volume in another zone: %v", err)
		}
		f.unchanged(before, "refused volumes")
		err = st.Tx(ctx, func(tx cloud.Tx) error { return tx.PutQuota(ctx, &cloud.Quota{TenantID: f.acmeID, Instances: 1}) })
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := f.svc.Instances.Create(ctx, f.acme, api.CreateInstanceRequest{Offering: "l4.1x"}, ""); err != nil {
			t.Fatal(err)
		}
		before = f.counts()
		_, _, err = f.svc.Spot.Create(ctx, f.acme, api.CreateSpotRequestRequest{Pools: pool}, "k")
		billCode(t, err, cloud.QuotaExceeded)
		f.unchanged(before, "refused launches")
		for _, tc := range []struct {
			field string
			spec  api.CreateSpotRequestRequest
		}{
			{"pools", api.CreateSpotRequestRequest{}},
			{"pools[1]", api.CreateSpotRequestRequest{Pools: append(pool, pool[0])}},
			{"pools[0].offering", api.CreateSpotRequestRequest{Pools: []cloud.Pool{{Offering: "h900.1x"}}}},
			{"type", api.CreateSpotRequestRequest{Pools: pool, Type: "sometimes"}},
			{"interruption", api.CreateSpotRequestRequest{Pools: pool, Interruption: "hibernate"}},
			{"env", api.CreateSpotRequestRequest{Pools: pool, Env: map[string]string{"1X": "y"}}},
		} {
			_, _, err := f.svc.Spot.Create(ctx, f.acme, tc.spec, "")
			if billCode(t, err, cloud.Invalid).Details["field"] != tc.field {
				t.Errorf("field %v, want %s (%v)", billCode(t, err, cloud.Invalid).Details["field"], tc.field, err)
			}
		}
		f.unchanged(before, "invalid requests")
	})
}

// TestSpotRequestTenancy: another tenant's member can neither read nor
// cancel a spot request, which answers like a missing one; an admin can,
// and cancelling with its instance terminates the instance through the
// lifecycle (its volume detached).
func TestSpotRequestTenancy(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newBillFixture(t, st)
		ctx := context.Background()
		vol := f.volume(f.acmeID, "zone-a")
		sr, _, err := f.svc.Spot.Create(ctx, f.acme, api.CreateSpotRequestRequest{Pools: []cloud.Pool{{Offering: "l4.1x", Zone: "zone-a"}},
			Volumes: []string{vol}}, "")
		if err != nil {
			t.Fatal(err)
		}
		before := f.counts()
		_, missing := f.svc.Spot.Get(ctx, f.globex, "sr-missing")
		_, err = f.svc.Spot.Get(ctx, f.globex, sr.ID)
		billHidden(t, err, missing, "spot request", sr.ID)
		_, missing = f.svc.Spot.Cancel(ctx, f.globex, "sr-missing", true, 0)
		_, err = f.svc.Spot.Cancel(ctx, f.globex, sr.ID, true, 0)
		billHidden(t, err, missing, "spot request", sr.ID)
		if rs, err := f.svc.Spot.List(ctx, f.globex, ""); err != nil || len(rs) != 0 {
			t.Errorf("globex's requests = %v, %v", rs, err)
		}
		_, err = f.svc.Spot.List(ctx, f.globex, f.acmeID)
		billHidden(t, err, service.NotFound("tenant", "tn-none"), "tenant", f.acmeID)
		f.unchanged(before, "another tenant's reads and cancels")

		if got, err := f.svc.Spot.Get(ctx, f.admin, sr.ID); err != nil || got.ID != sr.ID {
			t.Errorf("admin reads acme's = %+v, %v", got, err)
		}
		if rs, err := f.svc.Spot.List(ctx, f.admin, f.acmeID); err != nil || len(rs) != 1 {
			t.Errorf("admin lists acme's = %v, %v", rs, err)
		}
		if rs, err := f.svc.Spot.List(ctx, f.acme, "", cloud.SpotCancelled); err != nil || len(rs) != 0 {
			t.Errorf("acme's cancelled requests = %v, %v", rs, err)
		}
		_, err = f.svc.Spot.Cancel(ctx, f.admin, sr.ID, true, sr.Version+1)
		billCode(t, err, cloud.Conflict)
		got, err := f.svc.Spot.Cancel(ctx, f.admin, sr.ID, true, sr.Version)
		if err != nil || got.State != cloud.SpotCancelled || got.Reason != "cancelled by "+f.admin.ID {
			t.Fatalf("admin cancels acme's = %+v, %v", got, err)
		}
		in, err := f.svc.Instances.Get(ctx, f.acme, sr.InstanceID)
		if err != nil || in.State != cloud.Terminated && in.State != cloud.Terminating {
			t.Errorf("the request's instance = %+v, %v; want it terminated", in, err)
		}
		if c := f.counts(); c.Attached != 0 {
			t.Errorf("%d volumes still attached", c.Attached)
		}
		// Cancelling again answers the request unchanged.
		before = f.counts()
		if again, err := f.svc.Spot.Cancel(ctx, f.acme, sr.ID, true, 0); err != nil || again.Version != got.Version {
			t.Errorf("cancel again = %+v, %v", again, err)
		}
		f.unchanged(before, "a second cancel")
	})
}

// TestSpotReads: prices and pools are public; their parameters are
// checked.
func TestSpotReads(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newBillFixture(t, st)
		ctx := context.Background()
		now := f.clock.Now()
		pool := cloud.Pool{Offering: "l4.1x", Zone: "zone-a"}
		err := st.Tx(ctx, func(tx cloud.Tx) error {
			return tx.AppendSpotPrices(ctx, []cloud.SpotPrice{{Pool: pool, Time: now.Add(-time.Hour), Price: money.MustParse("0.3")}})
		})
		if err != nil {
			t.Fatal(err)
		}
		ps, err := f.svc.Spot.Prices(ctx, f.acme, service.SpotPriceQuery{Pools: []string{"l4.1x/zone-a", "l4.1x/zone-a"}})
		if err != nil || len(ps) != 1 || ps[0].Pool != pool {
			t.Errorf("prices = %v, %v", ps, err)
		}
		for _, q := range []struct {
			field string
			q     service.SpotPriceQuery
		}{
			{"pool", service.SpotPriceQuery{Pools: []string{"l4.1x"}}},
			{"pool", service.SpotPriceQuery{Pools: []string{"h900.1x/zone-a"}}},
			{"until", service.SpotPriceQuery{Since: now, Until: now}},
			{"limit", service.SpotPriceQuery{Limit: service.MaxSpotPoints + 1}},
		} {
			_, err := f.svc.Spot.Prices(ctx, f.acme, q.q)
			if billCode(t, err, cloud.Invalid).Details["field"] != q.field {
				t.Errorf("%+v: %v, want field %s", q.q, err, q.field)
			}
		}
		pools, err := f.svc.Spot.Pools(ctx, f.acme, 0)
		if err != nil || len(pools) != 1 || pools[0].Pool != pool || pools[0].OnDemand == nil ||
			pools[0].Window != service.DefaultReclaimWindow {
			t.Errorf("pools = %+v, %v", pools, err)
		}
		for _, w := range []time.Duration{-time.Hour, time.Millisecond, service.MaxReclaimWindow + time.Second, 1500 * time.Millisecond} {
			_, err := f.svc.Spot.Pools(ctx, f.acme, w)
			if billCode(t, err, cloud.Invalid).Details["field"] != "window" {
				t.Errorf("window %s: %v", w, err)
			}
		}
	})
}

func TestReclaimRateBP(t *testing.T) {
	for _, c := range []struct{ reclaims, seconds, want int64 }{
		{0, 0, 0}, {3, 0, 0}, {0, 3600, 0}, {1, 3600, 10_000}, {1, 20 * 3600, 500}, {1, 7 * 24 * 3600, 59},
		{31, 1000 * 3600, 310}, {5, 1800, 100_000},
	} {
		if got := service.ReclaimRateBP(c.reclaims, c.seconds); got != c.want {
			t.Errorf("ReclaimRateBP(%d, %d) = %d, want %d", c.reclaims, c.seconds, got, c.want)
		}
	}
}
