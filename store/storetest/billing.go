package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
)

// Pricing, the spot market and billing (cloud.BillingTx), the instance
// fields of the spot market, and the usage ledger the store appends itself.

// bigMoney is an amount no float64 holds exactly: money must round-trip as
// an integer.
const bigMoney = money.Micros(9_007_199_254_740_993)

func wantExisting(t *testing.T, desc string, err error, existing string) {
	t.Helper()
	wantCode(t, desc, err, cloud.Conflict, "")
	ce, ok := err.(*cloud.Error)
	if !ok || ce.Details["existing_id"] != existing {
		t.Errorf("%s: error %#v, want Details[existing_id] = %q", desc, err, existing)
	}
}

func testPrices(t *testing.T, s cloud.Store) {
	ps := []*cloud.Price{
		{Kind: cloud.PriceCompute, Offering: "h100.8x", Amount: 2_490_001, EffectiveAt: t0.Add(time.Hour),
			CreatedAt: t0, Actor: "admin:ada"},
		{Kind: cloud.PriceCompute, Offering: "h100.8x", Amount: bigMoney, EffectiveAt: t0, CreatedAt: t0},
		{Kind: cloud.PriceCompute, Offering: "h100.8x", Zone: "eu-1a", Amount: 1, EffectiveAt: t0, CreatedAt: t0},
		{Kind: cloud.PriceVolume, Amount: 80_000, EffectiveAt: t0, CreatedAt: t0},
		{Kind: cloud.PriceAddress, Amount: 0, EffectiveAt: t0, CreatedAt: t0},
		{Kind: cloud.PriceCompute, Offering: "a100.1x", Amount: 1_100_000, EffectiveAt: t0, CreatedAt: t0},
	}
	inTx(t, s, func(tx cloud.Tx) error {
		for _, p := range ps {
			if err := tx.AddPrice(ctx, p); err != nil {
				return err
			}
		}
		return nil
	})
	for i, p := range ps {
		if i > 0 && p.ID <= ps[i-1].ID {
			t.Errorf("price %d has ID %d, not above the previous %d", i, p.ID, ps[i-1].ID)
		}
	}
	if !ps[0].EffectiveAt.Equal(us(t0.Add(time.Hour))) || ps[0].EffectiveAt.Location() != time.UTC {
		t.Errorf("AddPrice left EffectiveAt %v, want %v in UTC", ps[0].EffectiveAt, us(t0.Add(time.Hour)))
	}
	list := func(f cloud.PriceFilter) []*cloud.Price {
		return mustRead(t, s, func(tx cloud.Tx) ([]*cloud.Price, error) { return tx.ListPrices(ctx, f) })
	}
	// By kind, offering, zone, effective time.
	wantEqual(t, "all prices in order", list(cloud.PriceFilter{}),
		[]*cloud.Price{ps[4], ps[5], ps[1], ps[0], ps[2], ps[3]})
	wantEqual(t, "by kind", list(cloud.PriceFilter{Kind: cloud.PriceVolume}), []*cloud.Price{ps[3]})
	wantEqual(t, "by offering", list(cloud.PriceFilter{Offering: "h100.8x"}), []*cloud.Price{ps[1], ps[0], ps[2]})
	wantEqual(t, "by zone", list(cloud.PriceFilter{Zone: "eu-1a"}), []*cloud.Price{ps[2]})
	wantEqual(t, "nothing matches", list(cloud.PriceFilter{Offering: "x"}), []*cloud.Price{})
	if got := list(cloud.PriceFilter{Offering: "h100.8x"})[0].Amount; got != bigMoney {
		t.Errorf("amount %d read back as %d", bigMoney, got)
	}

	err := try(s, func(tx cloud.Tx) error { return tx.AddPrice(ctx, &cloud.Price{Kind: "gpu", Amount: 1}) })
	wantCode(t, "an unknown kind is Invalid", err, cloud.Invalid, "")
	err = try(s, func(tx cloud.Tx) error { return tx.AddPrice(ctx, &cloud.Price{Kind: cloud.PriceVolume, Amount: -1}) })
	wantCode(t, "a negative amount is Invalid", err, cloud.Invalid, "")
}

func commitment(id, tenant, key string) *cloud.Commitment {
	return &cloud.Commitment{ID: id, TenantID: tenant, Plan: cloud.PlanReservation, Offering: "h100.8x",
		Zone: "eu-1a", Quantity: 4, Payment: cloud.PaymentPartialUpfront, DiscountBP: 3500,
		UpfrontFee: bigMoney, HourlyFee: 12_345_678, UsageRate: 0,
		Start: t0, End: t0.AddDate(1, 0, 0), CreatedAt: t0.Add(-time.Minute), IdempotencyKey: key}
}

func testCommitments(t *testing.T, s cloud.Store) {
	seedTenants(t, s, "t-1", "t-2")
	c2 := commitment("c-2", "t-1", "k")
	c1 := &cloud.Commitment{ID: "c-1", TenantID: "t-2", Plan: cloud.PlanRetainer, Offering: "h100",
		Quantity: 1, HourlyFee: 100_000, UsageRate: 1_990_000, Start: t0, End: t0.Add(720 * time.Hour)}
	inTx(t, s, func(tx cloud.Tx) error {
		if err := tx.CreateCommitment(ctx, c2); err != nil {
			return err
		}
		return tx.CreateCommitment(ctx, c1)
	})
	if !c2.Start.Equal(us(t0)) || c2.Start.Location() != time.UTC {
		t.Errorf("CreateCommitment left Start %v, want %v in UTC", c2.Start, us(t0))
	}
	got := mustRead(t, s, func(tx cloud.Tx) (*cloud.Commitment, error) { return tx.GetCommitment(ctx, "c-2") })
	wantEqual(t, "GetCommitment", got, c2)
	want := commitment("c-2", "t-1", "k")
	want.Start, want.End, want.CreatedAt = us(want.Start), us(want.End), us(want.CreatedAt)
	wantEqual(t, "the fixture round-trips", got, want)

	all := mustRead(t, s, func(tx cloud.Tx) ([]*cloud.Commitment, error) { return tx.ListCommitments(ctx, "") })
	wantEqual(t, "ListCommitments of all (ID order)", all, []*cloud.Commitment{c1, c2})
	mine := mustRead(t, s, func(tx cloud.Tx) ([]*cloud.Commitment, error) { return tx.ListCommitments(ctx, "t-1") })
	wantEqual(t, "ListCommitments of a tenant", mine, []*cloud.Commitment{c2})
	none := mustRead(t, s, func(tx cloud.Tx) ([]*cloud.Commitment, error) { return tx.ListCommitments(ctx, "t-9") })
	wantEqual(t, "ListCommitments of a tenant without any", none, []*cloud.Commitment{})

	retry := commitment("c-3", "t-1", "k")
	retry.Quantity = 9
	wantExisting(t, "a repeated key", try(s, func(tx cloud.Tx) error { return tx.CreateCommitment(ctx, retry) }), "c-2")
	wantEqual(t, "the struct now holds the first commitment", retry, c2)
	inTx(t, s, func(tx cloud.Tx) error { return tx.CreateCommitment(ctx, commitment("c-4", "t-2", "k")) })
	inTx(t, s, func(tx cloud.Tx) error { return tx.CreateCommitment(ctx, commitment("c-5", "t-1", "")) })
	inTx(t, s, func(tx cloud.Tx) error { return tx.CreateCommitment(ctx, commitment("c-6", "t-1", "")) })

	for _, c := range []struct {
		desc string
		c    *cloud.Commitment
		code cloud.Code
		msg  string
	}{
		{"a duplicate ID", commitment("c-1", "t-1", ""), cloud.Conflict, "commitment c-1 already exists"},
		{"a missing tenant", commitment("c-7", "t-9", ""), cloud.NotFound, "tenant t-9 not found"},
		{"no ID", commitment("", "t-1", ""), cloud.Invalid, ""},
		{"an unknown plan", func() *cloud.Commitment { c := commitment("c-7", "t-1", ""); c.Plan = "lease"; return c }(),
			cloud.Invalid, ""},
		{"no quantity", func() *cloud.Commitment { c := commitment("c-7", "t-1", ""); c.Quantity = 0; return c }(),
			cloud.Invalid, ""},
		{"an end before the start", func() *cloud.Commitment {
			c := commitment("c-7", "t-1", "")
			c.End = c.Start.Add(-time.Second)
			return c
		}(), cloud.Invalid, ""},
	} {
		wantCode(t, c.desc, try(s, func(tx cloud.Tx) error { return tx.CreateCommitment(ctx, c.c) }), c.code, c.msg)
	}
	_, err := read(t, s, func(tx cloud.Tx) (*cloud.Commitment, error) { return tx.GetCommitment(ctx, "c-9") })
	wantCode(t, "a missing commitment", err, cloud.NotFound, "commitment c-9 not found")
	all = mustRead(t, s, func(tx cloud.Tx) ([]*cloud.Commitment, error) { return tx.ListCommitments(ctx, "") })
	if len(all) != 5 {
		t.Errorf("%d commitments after the failures, want 5", len(all))
	}
}

func spotRequest(id, tenant, key string) *cloud.SpotRequest {
	return &cloud.SpotRequest{ID: id, TenantID: tenant, Name: "batch-" + id, Type: cloud.SpotPersistent,
		MaxPrice: 1_234_567, Interruption: cloud.ActionStop,
		Pools: []cloud.Pool{{Offering: "h100.8x", Zone: "eu-1a"}, {Offering: "h100.8x", Zone: "eu-1b"}},
		State: cloud.SpotOpen, Reason: "waiting for capacity", InstanceID: "i-" + id, Launches: 2,
		Image: "ghcr.io/acme/train:1", Command: []string{"python", "train.py"}, Env: map[string]string{"A": "1", "EMPTY": ""},
		Volumes: []string{"v-1"}, Tags: map[string]string{"team": "ml"},
		Subnet: "subnet-1", SecurityGroups: []string{"sg-1", "sg-2"},
		IdempotencyKey: key, CreatedAt: t0, UpdatedAt: t0.Add(time.Second)}
}

// testSpotRequests creates sr-1 (the full fixture, key "k") and sr-2 of
// t-1 and sr-0 of t-2, then updates, lists and fails to create requests.
func testSpotRequests(t *testing.T, s cloud.Store) {
	seedTenants(t, s, "t-1", "t-2")
	full := spotRequest("sr-1", "t-1", "k")
	small := &cloud.SpotRequest{ID: "sr-0", TenantID: "t-2", Type: cloud.SpotOneTime, Interruption: cloud.ActionTerminate,
		Pools: []cloud.Pool{{Offering: "l4.1x", Zone: "us-1a"}}, State: cloud.SpotOpen, Version: 7}
	empty := spotRequest("sr-2", "t-1", "")
	empty.Command, empty.Env, empty.Volumes, empty.Tags = []string{}, map[string]string{}, []string{}, map[string]string{}
	inTx(t, s, func(tx cloud.Tx) error {
		for _, r := range []*cloud.SpotRequest{full, small, empty} {
			if err := tx.CreateSpotRequest(ctx, r); err != nil {
				return err
			}
		}
		return nil
	})
	for _, r := range []*cloud.SpotRequest{full, small, empty} {
		if r.Version != 1 {
			t.Errorf("%s: CreateSpotRequest set Version %d, want 1", r.ID, r.Version)
		}
		got := mustRead(t, s, func(tx cloud.Tx) (*cloud.SpotRequest, error) { return tx.GetSpotRequest(ctx, r.ID) })
		wantEqual(t, "GetSpotRequest "+r.ID, got, r)
	}
	want := spotRequest("sr-1", "t-1", "k")
	want.Version, want.CreatedAt, want.UpdatedAt = 1, us(want.CreatedAt), us(want.UpdatedAt)
	wantEqual(t, "the fixture round-trips", full, want)

	retry := spotRequest("sr-3", "t-1", "k")
	wantExisting(t, "a repeated key", try(s, func(tx cloud.Tx) error { return tx.CreateSpotRequest(ctx, retry) }), "sr-1")
	wantEqual(t, "the struct now holds the first request", retry, full)
	spotRequestUpdates(t, s)
	spotRequestLists(t, s)
	spotRequestErrors(t, s)
}

// spotRequestUpdates updates sr-1: the version is checked and bumped, the
// fixed fields are kept.
func spotRequestUpdates(t *testing.T, s cloud.Store) {
	cur := mustRead(t, s, func(tx cloud.Tx) (*cloud.SpotRequest, error) { return tx.GetSpotRequest(ctx, "sr-1") })
	cur.State, cur.Reason, cur.InstanceID, cur.Launches = cloud.SpotActive, "launched", "i-2", 3
	cur.Pools, cur.Tags, cur.MaxPrice = []cloud.Pool{{Offering: "h200.8x", Zone: "eu-1c"}}, nil, bigMoney
	cur.Image = "ghcr.io/acme/train@sha256:" + imageDigest
	cur.Subnet, cur.SecurityGroups = "subnet-2", []string{"sg-3"}
	cur.UpdatedAt = t0.Add(time.Hour)
	cur.TenantID, cur.IdempotencyKey, cur.CreatedAt = "t-2", "other", t0.Add(time.Hour)
	inTx(t, s, func(tx cloud.Tx) error { return tx.UpdateSpotRequest(ctx, cur) })
	if cur.Version != 2 {
		t.Errorf("UpdateSpotRequest set Version %d, want 2", cur.Version)
	}
	got := mustRead(t, s, func(tx cloud.Tx) (*cloud.SpotRequest, error) { return tx.GetSpotRequest(ctx, "sr-1") })
	exp := *cur
	exp.TenantID, exp.IdempotencyKey, exp.CreatedAt = "t-1", "k", us(t0)
	wantEqual(t, "the update is written, the fixed fields are not", got, &exp)

	stale := *got
	stale.Version, stale.Reason = 1, "lost update"
	err := try(s, func(tx cloud.Tx) error { return tx.UpdateSpotRequest(ctx, &stale) })
	wantCode(t, "a stale version", err, cloud.Conflict, "")
	if ce, ok := err.(*cloud.Error); !ok || ce.Details["version"] != int64(2) {
		t.Errorf("the conflict carries the stored version: %#v", err)
	}
	after := mustRead(t, s, func(tx cloud.Tx) (*cloud.SpotRequest, error) { return tx.GetSpotRequest(ctx, "sr-1") })
	wantEqual(t, "a stale update changes nothing", after, got)
	missing := spotRequest("sr-9", "t-1", "")
	missing.Version = 1
	err = try(s, func(tx cloud.Tx) error { return tx.UpdateSpotRequest(ctx, missing) })
	wantCode(t, "updating a missing request", err, cloud.NotFound, "spot request sr-9 not found")
}

// spotRequestLists lists the requests by tenant and state.
func spotRequestLists(t *testing.T, s cloud.Store) {
	list := func(f cloud.SpotRequestFilter) []string {
		rs := mustRead(t, s, func(tx cloud.Tx) ([]*cloud.SpotRequest, error) { return tx.ListSpotRequests(ctx, f) })
		out := []string{}
		for _, r := range rs {
			out = append(out, r.ID)
		}
		return out
	}
	wantEqual(t, "all requests (ID order)", list(cloud.SpotRequestFilter{}), []string{"sr-0", "sr-1", "sr-2"})
	wantEqual(t, "by tenant", list(cloud.SpotRequestFilter{TenantID: "t-1"}), []string{"sr-1", "sr-2"})
	wantEqual(t, "by state", list(cloud.SpotRequestFilter{States: []cloud.SpotRequestState{cloud.SpotOpen}}),
		[]string{"sr-0", "sr-2"})
	wantEqual(t, "by states and tenant", list(cloud.SpotRequestFilter{TenantID: "t-1",
		States: []cloud.SpotRequestState{cloud.SpotActive, cloud.SpotClosed}}), []string{"sr-1"})
	wantEqual(t, "nothing matches", list(cloud.SpotRequestFilter{TenantID: "t-9"}), []string{})
}

// spotRequestErrors checks the refused creates and a missing request.
func spotRequestErrors(t *testing.T, s cloud.Store) {
	for _, c := range []struct {
		desc   string
		change func(*cloud.SpotRequest)
		code   cloud.Code
	}{
		{"a duplicate ID", func(r *cloud.SpotRequest) { r.ID = "sr-0" }, cloud.Conflict},
		{"a missing tenant", func(r *cloud.SpotRequest) { r.TenantID = "t-9" }, cloud.NotFound},
		{"no pools", func(r *cloud.SpotRequest) { r.Pools = nil }, cloud.Invalid},
		{"a pool without offering", func(r *cloud.SpotRequest) { r.Pools = []cloud.Pool{{Zone: "z"}} }, cloud.Invalid},
		{"an unknown type", func(r *cloud.SpotRequest) { r.Type = "sometimes" }, cloud.Invalid},
		{"an unknown behaviour", func(r *cloud.SpotRequest) { r.Interruption = "hibernate" }, cloud.Invalid},
		{"an unknown state", func(r *cloud.SpotRequest) { r.State = "pending" }, cloud.Invalid},
		{"a negative max price", func(r *cloud.SpotRequest) { r.MaxPrice = -1 }, cloud.Invalid},
	} {
		r := spotRequest("sr-5", "t-1", "")
		c.change(r)
		wantCode(t, c.desc, try(s, func(tx cloud.Tx) error { return tx.CreateSpotRequest(ctx, r) }), c.code, "")
	}
	_, err := read(t, s, func(tx cloud.Tx) (*cloud.SpotRequest, error) { return tx.GetSpotRequest(ctx, "sr-9") })
	wantCode(t, "a missing request", err, cloud.NotFound, "spot request sr-9 not found")
}

func testSpotPrices(t *testing.T, s cloud.Store) {
	a := cloud.Pool{Offering: "h100.8x", Zone: "eu-1a"}
	b := cloud.Pool{Offering: "h100.8x", Zone: "eu-1b"}
	c := cloud.Pool{Offering: "a100.1x", Zone: "eu-1a"}
	at := func(m int) time.Time { return us(t0.Add(time.Duration(m) * time.Minute)) }
	p := func(pool cloud.Pool, m int, price money.Micros) cloud.SpotPrice {
		return cloud.SpotPrice{Pool: pool, Time: at(m), Price: price}
	}
	inTx(t, s, func(tx cloud.Tx) error {
		return tx.AppendSpotPrices(ctx, []cloud.SpotPrice{p(a, 0, 900_000), p(b, 0, 800_000), p(a, 10, bigMoney)})
	})
	// A time with nanoseconds and a zone is kept as UTC microseconds.
	inTx(t, s, func(tx cloud.Tx) error {
		return tx.AppendSpotPrices(ctx, []cloud.SpotPrice{{Pool: c, Time: t0.Add(5 * time.Minute), Price: 1}, p(b, 20, 700_000)})
	})
	inTx(t, s, func(tx cloud.Tx) error { return tx.AppendSpotPrices(ctx, nil) })
	list := func(f cloud.SpotPriceFilter) []cloud.SpotPrice {
		return mustRead(t, s, func(tx cloud.Tx) ([]cloud.SpotPrice, error) { return tx.ListSpotPrices(ctx, f) })
	}
	all := []cloud.SpotPrice{p(a, 0, 900_000), p(b, 0, 800_000), p(c, 5, 1), p(a, 10, bigMoney), p(b, 20, 700_000)}
	wantEqual(t, "all points in time order, then by pool", list(cloud.SpotPriceFilter{}), all)
	wantEqual(t, "by pools", list(cloud.SpotPriceFilter{Pools: []cloud.Pool{a, c}}), []cloud.SpotPrice{all[0], all[2], all[3]})
	wantEqual(t, "Since is inclusive", list(cloud.SpotPriceFilter{Since: at(5)}), all[2:])
	wantEqual(t, "Until is exclusive", list(cloud.SpotPriceFilter{Until: at(10)}), all[:3])
	wantEqual(t, "Since, Until, pools and Limit", list(cloud.SpotPriceFilter{Pools: []cloud.Pool{a, b},
		Since: at(0), Until: at(30), Limit: 2}), all[:2])
	wantEqual(t, "nothing matches", list(cloud.SpotPriceFilter{Since: at(60)}), []cloud.SpotPrice{})
	_, err := read(t, s, func(tx cloud.Tx) ([]cloud.SpotPrice, error) {
		return tx.ListSpotPrices(ctx, cloud.SpotPriceFilter{Limit: -1})
	})
	wantCode(t, "a negative Limit", err, cloud.Invalid, "")

	latest := mustRead(t, s, func(tx cloud.Tx) ([]cloud.SpotPrice, error) { return tx.LatestSpotPrices(ctx) })
	wantEqual(t, "the newest point of each pool", latest, []cloud.SpotPrice{all[2], all[3], all[4]})

	err = try(s, func(tx cloud.Tx) error {
		return tx.AppendSpotPrices(ctx, []cloud.SpotPrice{p(c, 30, 2), p(a, 10, 5)})
	})
	wantCode(t, "a point at a stored time of its pool", err, cloud.Conflict, "")
	err = try(s, func(tx cloud.Tx) error {
		return tx.AppendSpotPrices(ctx, []cloud.SpotPrice{p(c, 30, 2), p(c, 30, 3)})
	})
	wantCode(t, "a point given twice", err, cloud.Conflict, "")
	inTx(t, s, func(tx cloud.Tx) error {
		err := tx.AppendSpotPrices(ctx, []cloud.SpotPrice{p(c, 40, 2), p(b, 0, 5)})
		if !cloud.IsConflict(err) {
			return fmt.Errorf("AppendSpotPrices with a clash: %v, want Conflict", err)
		}
		return nil
	})
	err = try(s, func(tx cloud.Tx) error {
		return tx.AppendSpotPrices(ctx, []cloud.SpotPrice{{Pool: cloud.Pool{Offering: "x"}, Time: t0}})
	})
	wantCode(t, "a pool without zone", err, cloud.Invalid, "")
	err = try(s, func(tx cloud.Tx) error { return tx.AppendSpotPrices(ctx, []cloud.SpotPrice{p(c, 50, -1)}) })
	wantCode(t, "a negative price", err, cloud.Invalid, "")
	wantEqual(t, "the failed appends stored nothing", list(cloud.SpotPriceFilter{}), all)

	// More than one statement's worth.
	var many []cloud.SpotPrice
	for i := 0; i < 600; i++ {
		many = append(many, p(c, 100+i, money.Micros(i)))
	}
	inTx(t, s, func(tx cloud.Tx) error { return tx.AppendSpotPrices(ctx, many) })
	got := list(cloud.SpotPriceFilter{Pools: []cloud.Pool{c}, Since: at(100)})
	wantEqual(t, "a large append", got, many)
}

// testAddresses allocates a-1 of t-1 (attached to i-1) and a-2 of t-2,
// refuses clashing allocations, releases a-1 and allocates its IP again.
func testAddresses(t *testing.T, s cloud.Store) {
	seedTenants(t, s, "t-1", "t-2")
	inTx(t, s, func(tx cloud.Tx) error {
		return tx.CreateInstance(ctx, &cloud.Instance{ID: "i-1", TenantID: "t-1", State: cloud.Running})
	})
	a1 := &cloud.Address{ID: "a-1", TenantID: "t-1", IP: "203.0.113.7", Zone: "eu-1a", InstanceID: "i-1", CreatedAt: t0}
	a2 := &cloud.Address{ID: "a-2", TenantID: "t-2", IP: "2001:DB8::0:1", CreatedAt: t0}
	inTx(t, s, func(tx cloud.Tx) error {
		if err := tx.CreateAddress(ctx, a2); err != nil {
			return err
		}
		return tx.CreateAddress(ctx, a1)
	})
	if a2.IP != "2001:db8::1" {
		t.Errorf("CreateAddress left IP %q, want the canonical 2001:db8::1", a2.IP)
	}
	got := mustRead(t, s, func(tx cloud.Tx) (*cloud.Address, error) { return tx.GetAddress(ctx, "a-1") })
	wantEqual(t, "GetAddress", got, a1)
	if !got.CreatedAt.Equal(us(t0)) || got.ReleasedAt != nil {
		t.Errorf("GetAddress: CreatedAt %v ReleasedAt %v", got.CreatedAt, got.ReleasedAt)
	}
	wantEqual(t, "allocating appends the usage On", usageOf(t, s, "t-1"), []cloud.Usage{
		{Time: us(t0), TenantID: "t-1", Kind: cloud.UsageAddress, ResourceID: "a-1", On: true, Zone: "eu-1a", Quantity: 1}})
	addressCreateErrors(t, s)
	released := addressRelease(t, s, got)
	addressReuse(t, s, released, a2)
}

// addressCreateErrors checks the refused allocations: clashing IPs and
// IDs, bad IPs, missing tenants and instances.
func addressCreateErrors(t *testing.T, s cloud.Store) {
	for _, c := range []struct {
		desc string
		a    *cloud.Address
		code cloud.Code
		msg  string
	}{
		{"an IP held by an unreleased address", &cloud.Address{ID: "a-3", TenantID: "t-1", IP: "203.0.113.7"},
			cloud.Conflict, "203.0.113.7"},
		{"another spelling of a held IP", &cloud.Address{ID: "a-3", TenantID: "t-1", IP: "2001:db8:0::1"},
			cloud.Conflict, "2001:db8::1"},
		{"a duplicate ID", &cloud.Address{ID: "a-1", TenantID: "t-1", IP: "203.0.113.8"},
			cloud.Conflict, "address a-1 already exists"},
		{"not an IP", &cloud.Address{ID: "a-3", TenantID: "t-1", IP: "example.com"}, cloud.Invalid, ""},
		{"a missing tenant", &cloud.Address{ID: "a-3", TenantID: "t-9", IP: "203.0.113.8"}, cloud.NotFound, ""},
		{"a missing instance", &cloud.Address{ID: "a-3", TenantID: "t-1", IP: "203.0.113.8", InstanceID: "i-9"},
			cloud.NotFound, "instance i-9 not found"},
		{"no ID", &cloud.Address{TenantID: "t-1", IP: "203.0.113.8"}, cloud.Invalid, ""},
	} {
		wantCode(t, c.desc, try(s, func(tx cloud.Tx) error { return tx.CreateAddress(ctx, c.a) }), c.code, c.msg)
	}
}

// addressRelease detaches, then releases address got (a-1 of t-1), which
// meters the Off at ReleasedAt, and returns it as stored. Writing the same
// release again is harmless; releasing at another time or taking the
// address back is refused.
func addressRelease(t *testing.T, s cloud.Store, got *cloud.Address) *cloud.Address {
	got.InstanceID = ""
	inTx(t, s, func(tx cloud.Tx) error { return tx.UpdateAddress(ctx, got) })
	got.ReleasedAt = ptr(t0.Add(90 * time.Minute))
	inTx(t, s, func(tx cloud.Tx) error { return tx.UpdateAddress(ctx, got) })
	released := mustRead(t, s, func(tx cloud.Tx) (*cloud.Address, error) { return tx.GetAddress(ctx, "a-1") })
	wantEqual(t, "the release is written", released, got)
	wantEqual(t, "releasing appends the usage Off", usageOf(t, s, "t-1"), []cloud.Usage{
		{Time: us(t0), TenantID: "t-1", Kind: cloud.UsageAddress, ResourceID: "a-1", On: true, Zone: "eu-1a", Quantity: 1},
		{Time: us(t0.Add(90 * time.Minute)), TenantID: "t-1", Kind: cloud.UsageAddress, ResourceID: "a-1",
			Zone: "eu-1a", Quantity: 1},
	})
	inTx(t, s, func(tx cloud.Tx) error { return tx.UpdateAddress(ctx, released) })
	again := *released
	again.ReleasedAt = ptr(t0.Add(2 * time.Hour))
	wantCode(t, "releasing twice", try(s, func(tx cloud.Tx) error { return tx.UpdateAddress(ctx, &again) }),
		cloud.Conflict, "already released")
	back := *released
	back.ReleasedAt = nil
	wantCode(t, "un-releasing", try(s, func(tx cloud.Tx) error { return tx.UpdateAddress(ctx, &back) }),
		cloud.Invalid, "")
	if n := len(usageOf(t, s, "t-1")); n != 2 {
		t.Errorf("%d usage entries after the refused updates, want 2", n)
	}
	wantCode(t, "updating a missing address", try(s, func(tx cloud.Tx) error {
		return tx.UpdateAddress(ctx, &cloud.Address{ID: "a-9"})
	}), cloud.NotFound, "address a-9 not found")
	return released
}

// addressReuse allocates the IP of released address a-1 again, to t-2,
// and lists the addresses; a2 is t-2's other address.
func addressReuse(t *testing.T, s cloud.Store, released, a2 *cloud.Address) {
	a3 := &cloud.Address{ID: "a-3", TenantID: "t-2", IP: "203.0.113.7", CreatedAt: t0.Add(3 * time.Hour)}
	inTx(t, s, func(tx cloud.Tx) error { return tx.CreateAddress(ctx, a3) })
	list := func(tenant string) []*cloud.Address {
		return mustRead(t, s, func(tx cloud.Tx) ([]*cloud.Address, error) { return tx.ListAddresses(ctx, tenant) })
	}
	wantEqual(t, "ListAddresses of all (ID order)", list(""), []*cloud.Address{released, a2, a3})
	wantEqual(t, "ListAddresses of a tenant", list("t-2"), []*cloud.Address{a2, a3})
	wantEqual(t, "ListAddresses of a tenant without any", list("t-9"), []*cloud.Address{})
}

func testBudgets(t *testing.T, s cloud.Store) {
	seedTenants(t, s, "t-1", "t-2")
	b2 := &cloud.Budget{TenantID: "t-2", Amount: bigMoney, Thresholds: []int{50, 80, 100}, UpdatedAt: t0}
	b1 := &cloud.Budget{TenantID: "t-1", Amount: 1_000_000_000, Thresholds: []int{}, UpdatedAt: t0}
	inTx(t, s, func(tx cloud.Tx) error {
		if err := tx.PutBudget(ctx, b2); err != nil {
			return err
		}
		return tx.PutBudget(ctx, b1)
	})
	got := mustRead(t, s, func(tx cloud.Tx) (*cloud.Budget, error) { return tx.GetBudget(ctx, "t-2") })
	wantEqual(t, "GetBudget", got, b2)
	if !got.UpdatedAt.Equal(us(t0)) {
		t.Errorf("UpdatedAt %v, want %v", got.UpdatedAt, us(t0))
	}
	b1.Amount, b1.Thresholds, b1.UpdatedAt = 5, nil, t0.Add(time.Hour)
	inTx(t, s, func(tx cloud.Tx) error { return tx.PutBudget(ctx, b1) })
	all := mustRead(t, s, func(tx cloud.Tx) ([]*cloud.Budget, error) { return tx.ListBudgets(ctx) })
	wantEqual(t, "ListBudgets (tenant order) after a replace", all, []*cloud.Budget{b1, b2})
	_, err := read(t, s, func(tx cloud.Tx) (*cloud.Budget, error) { return tx.GetBudget(ctx, "t-9") })
	wantCode(t, "a tenant without a budget", err, cloud.NotFound, "")
	wantCode(t, "a budget of a missing tenant", try(s, func(tx cloud.Tx) error {
		return tx.PutBudget(ctx, &cloud.Budget{TenantID: "t-9", Amount: 1})
	}), cloud.NotFound, "tenant t-9 not found")
	wantCode(t, "a negative budget", try(s, func(tx cloud.Tx) error {
		return tx.PutBudget(ctx, &cloud.Budget{TenantID: "t-1", Amount: -1})
	}), cloud.Invalid, "")

	alerts := []*cloud.BudgetAlert{
		{TenantID: "t-2", Month: "2026-12", Threshold: 80, Spent: bigMoney, Time: t0.Add(time.Hour)},
		{TenantID: "t-2", Month: "2026-12", Threshold: 50, Spent: 1, Time: t0},
		{TenantID: "t-1", Month: "2027-01", Threshold: 100, Spent: 5, Time: t0},
		{TenantID: "t-2", Month: "2026-11", Threshold: 100, Spent: 7, Time: t0},
	}
	inTx(t, s, func(tx cloud.Tx) error {
		for _, a := range alerts {
			if err := tx.RecordBudgetAlert(ctx, a); err != nil {
				return err
			}
		}
		return nil
	})
	listAlerts := func(tenant string) []*cloud.BudgetAlert {
		return mustRead(t, s, func(tx cloud.Tx) ([]*cloud.BudgetAlert, error) { return tx.ListBudgetAlerts(ctx, tenant) })
	}
	wantEqual(t, "ListBudgetAlerts of a tenant (month, threshold order)", listAlerts("t-2"),
		[]*cloud.BudgetAlert{alerts[3], alerts[1], alerts[0]})
	wantEqual(t, "ListBudgetAlerts of all", listAlerts(""),
		[]*cloud.BudgetAlert{alerts[2], alerts[3], alerts[1], alerts[0]})
	wantEqual(t, "ListBudgetAlerts of a tenant without any", listAlerts("t-9"), []*cloud.BudgetAlert{})

	dup := &cloud.BudgetAlert{TenantID: "t-2", Month: "2026-12", Threshold: 80, Spent: 9, Time: t0.Add(2 * time.Hour)}
	wantCode(t, "a repeated alert", try(s, func(tx cloud.Tx) error { return tx.RecordBudgetAlert(ctx, dup) }),
		cloud.Conflict, "")
	inTx(t, s, func(tx cloud.Tx) error {
		if err := tx.RecordBudgetAlert(ctx, dup); !cloud.IsConflict(err) {
			return fmt.Errorf("a repeated alert: %v, want Conflict", err)
		}
		// The transaction goes on after the Conflict.
		return tx.RecordBudgetAlert(ctx, &cloud.BudgetAlert{TenantID: "t-2", Month: "2026-12", Threshold: 100, Time: t0})
	})
	wantEqual(t, "the repeat changed nothing", listAlerts("t-2")[2], alerts[0])
	for _, m := range []string{"2026-13", "2026-1", "Dec 2026", ""} {
		wantCode(t, "month "+m, try(s, func(tx cloud.Tx) error {
			return tx.RecordBudgetAlert(ctx, &cloud.BudgetAlert{TenantID: "t-1", Month: m, Threshold: 50})
		}), cloud.Invalid, "")
	}
	wantCode(t, "an alert of a missing tenant", try(s, func(tx cloud.Tx) error {
		return tx.RecordBudgetAlert(ctx, &cloud.BudgetAlert{TenantID: "t-9", Month: "2026-12", Threshold: 50})
	}), cloud.NotFound, "")
}

func testSpotInstances(t *testing.T, s cloud.Store) {
	seedTenants(t, s, "t-1")
	intr := &cloud.Interruption{Action: cloud.ActionTerminate, Reason: cloud.ReclaimPrice,
		NoticedAt: t0, Deadline: t0.Add(2 * time.Minute)}
	ins := []*cloud.Instance{
		{ID: "i-1", TenantID: "t-1", State: cloud.Pending},
		{ID: "i-2", TenantID: "t-1", State: cloud.Pending, Market: cloud.MarketOnDemand, Zone: "eu-1a"},
		{ID: "i-3", TenantID: "t-1", State: cloud.Running, Market: cloud.MarketSpot, SpotRequestID: "sr-1",
			Zone: "eu-1b", Interruption: intr},
		{ID: "i-4", TenantID: "t-1", State: cloud.Stopped, Market: cloud.MarketSpot, SpotRequestID: "sr-2"},
	}
	inTx(t, s, func(tx cloud.Tx) error {
		for _, in := range ins {
			if err := tx.CreateInstance(ctx, in); err != nil {
				return err
			}
		}
		return nil
	})
	if ins[0].Market != cloud.MarketOnDemand {
		t.Errorf("CreateInstance left Market %q, want on_demand", ins[0].Market)
	}
	if ins[2].Interruption == intr || !ins[2].Interruption.Deadline.Equal(us(intr.Deadline)) ||
		ins[2].Interruption.Deadline.Location() != time.UTC || intr.NoticedAt != t0 {
		t.Errorf("CreateInstance: the interruption must be a normalized copy: %+v (given %+v)", ins[2].Interruption, intr)
	}
	for _, in := range ins {
		got := mustRead(t, s, func(tx cloud.Tx) (*cloud.Instance, error) { return tx.GetInstance(ctx, in.ID) })
		wantEqual(t, "instance "+in.ID, got, in)
	}
	for _, c := range []struct {
		desc string
		f    cloud.InstanceFilter
		want []string
	}{
		{"on demand (an empty market is on demand)", cloud.InstanceFilter{Market: cloud.MarketOnDemand}, []string{"i-1", "i-2"}},
		{"spot", cloud.InstanceFilter{Market: cloud.MarketSpot}, []string{"i-3", "i-4"}},
		{"by spot request", cloud.InstanceFilter{SpotRequestID: "sr-2"}, []string{"i-4"}},
		{"with other fields", cloud.InstanceFilter{Market: cloud.MarketSpot, States: []cloud.State{cloud.Running}},
			[]string{"i-3"}},
		{"interrupted", cloud.InstanceFilter{Interrupted: true}, []string{"i-3"}},
	} {
		got := mustRead(t, s, func(tx cloud.Tx) ([]*cloud.Instance, error) { return tx.ListInstances(ctx, c.f) })
		wantEqual(t, c.desc, ids(got), c.want)
		only := mustRead(t, s, func(tx cloud.Tx) ([]string, error) { return tx.InstanceIDs(ctx, c.f) })
		wantEqual(t, c.desc+" (InstanceIDs)", only, c.want)
	}

	// UpdateInstance and UpdateInstances write the spot fields; an empty
	// market is written as on demand.
	in := mustRead(t, s, func(tx cloud.Tx) (*cloud.Instance, error) { return tx.GetInstance(ctx, "i-3") })
	in.Interruption, in.Market, in.Zone = nil, "", "eu-1c"
	inTx(t, s, func(tx cloud.Tx) error { return tx.UpdateInstance(ctx, in) })
	got := mustRead(t, s, func(tx cloud.Tx) (*cloud.Instance, error) { return tx.GetInstance(ctx, "i-3") })
	wantEqual(t, "UpdateInstance", got, in)
	if got.Market != cloud.MarketOnDemand || got.Interruption != nil || got.Zone != "eu-1c" {
		t.Errorf("UpdateInstance: market %q interruption %v zone %q", got.Market, got.Interruption, got.Zone)
	}
	in2 := mustRead(t, s, func(tx cloud.Tx) (*cloud.Instance, error) { return tx.GetInstance(ctx, "i-1") })
	in2.Market, in2.SpotRequestID, in2.Zone, in2.Interruption = cloud.MarketSpot, "sr-3", "us-1a", intr
	in.Market = ""
	inTx(t, s, func(tx cloud.Tx) error {
		stale, err := tx.UpdateInstances(ctx, []*cloud.Instance{in2, in})
		if err == nil && len(stale) > 0 {
			err = fmt.Errorf("stale: %v", stale)
		}
		return err
	})
	for _, want := range []*cloud.Instance{in2, in} {
		got := mustRead(t, s, func(tx cloud.Tx) (*cloud.Instance, error) { return tx.GetInstance(ctx, want.ID) })
		wantEqual(t, "UpdateInstances "+want.ID, got, want)
	}
	if in.Market != cloud.MarketOnDemand || in2.Interruption == intr {
		t.Errorf("UpdateInstances did not normalize: market %q, interruption %p", in.Market, in2.Interruption)
	}
}
