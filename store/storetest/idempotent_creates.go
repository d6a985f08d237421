package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
)

// Idempotency keys of volumes, addresses and prices: a repeated key
// returns a Conflict naming the first row and writes nothing (no second
// usage entry), keys are per tenant (prices: one key space, the
// operator's), and the empty key never conflicts.

// wantExistingID is wantExisting for any type of ID (prices have int64
// IDs).
func wantExistingID(t *testing.T, desc string, err error, existing any) {
	t.Helper()
	wantCode(t, desc, err, cloud.Conflict, "")
	var ce *cloud.Error
	if !errors.As(err, &ce) || ce.Details["existing_id"] != existing {
		t.Errorf("%s: error %#v, want Details[existing_id] = %#v", desc, err, existing)
	}
}

func testVolumeIdempotency(t *testing.T, s cloud.Store) {
	seedTenants(t, s, "t-1", "t-2")
	first := &cloud.Volume{ID: "v-1", TenantID: "t-1", Name: "data", SizeGiB: 500, Zone: "eu-1a",
		CreatedAt: t0, IdempotencyKey: "k"}
	inTx(t, s, func(tx cloud.Tx) error { return tx.CreateVolume(ctx, first) })
	got := mustRead(t, s, func(tx cloud.Tx) (*cloud.Volume, error) { return tx.GetVolume(ctx, "v-1") })
	wantEqual(t, "the key round-trips", got, first)
	usage := usageOf(t, s, "t-1")

	retry := &cloud.Volume{ID: "v-2", TenantID: "t-1", Name: "other", SizeGiB: 1, CreatedAt: t0.Add(time.Hour),
		IdempotencyKey: "k"}
	wantExisting(t, "a repeated key", try(s, func(tx cloud.Tx) error { return tx.CreateVolume(ctx, retry) }), "v-1")
	wantEqual(t, "the struct now holds the first volume", retry, first)
	// The same ID again with the key is the same retry, not a duplicate.
	again := &cloud.Volume{ID: "v-1", TenantID: "t-1", Name: "data", SizeGiB: 500, IdempotencyKey: "k"}
	wantExisting(t, "a repeated key and ID", try(s, func(tx cloud.Tx) error { return tx.CreateVolume(ctx, again) }), "v-1")
	// A retry in a transaction that goes on: it wrote nothing, so the
	// transaction can still commit other work.
	inTx(t, s, func(tx cloud.Tx) error {
		v := &cloud.Volume{ID: "v-3", TenantID: "t-1", Name: "data", SizeGiB: 500, IdempotencyKey: "k"}
		if err := tx.CreateVolume(ctx, v); !cloud.IsConflict(err) {
			return fmt.Errorf("retry in a transaction: %v, want a Conflict", err)
		}
		return nil
	})
	wantUsage(t, "retries append no usage", usageOf(t, s, "t-1"), usage)

	// Another tenant's key space; empty keys never conflict.
	inTx(t, s, func(tx cloud.Tx) error {
		for _, v := range []*cloud.Volume{
			{ID: "v-4", TenantID: "t-2", Name: "data", SizeGiB: 1, IdempotencyKey: "k"},
			{ID: "v-5", TenantID: "t-1", Name: "a", SizeGiB: 1},
			{ID: "v-6", TenantID: "t-1", Name: "b", SizeGiB: 1},
			{ID: "v-7", TenantID: "t-1", Name: "c", SizeGiB: 1, IdempotencyKey: "k2"},
		} {
			if err := tx.CreateVolume(ctx, v); err != nil {
				return err
			}
		}
		return nil
	})
	vs := mustRead(t, s, func(tx cloud.Tx) ([]*cloud.Volume, error) { return tx.ListVolumes(ctx, "") })
	ids := []string{}
	for _, v := range vs {
		ids = append(ids, v.ID)
	}
	wantEqual(t, "volumes after the retries", ids, []string{"v-1", "v-4", "v-5", "v-6", "v-7"})
	if n := len(usageOf(t, s, "t-1")); n != 4 {
		t.Errorf("%d usage entries of t-1, want 4 (one On per volume)", n)
	}

	// The key is fixed at creation.
	changed := *got
	changed.IdempotencyKey, changed.Name = "other", "renamed"
	inTx(t, s, func(tx cloud.Tx) error { return tx.UpdateVolume(ctx, &changed) })
	after := mustRead(t, s, func(tx cloud.Tx) (*cloud.Volume, error) { return tx.GetVolume(ctx, "v-1") })
	if after.IdempotencyKey != "k" || after.Name != "renamed" {
		t.Errorf("after UpdateVolume: key %q name %q, want key k kept and the name written", after.IdempotencyKey, after.Name)
	}
}

func testAddressIdempotency(t *testing.T, s cloud.Store) {
	seedTenants(t, s, "t-1", "t-2")
	first := &cloud.Address{ID: "a-1", TenantID: "t-1", IP: "203.0.113.7", Zone: "eu-1a", CreatedAt: t0,
		IdempotencyKey: "k"}
	inTx(t, s, func(tx cloud.Tx) error { return tx.CreateAddress(ctx, first) })
	got := mustRead(t, s, func(tx cloud.Tx) (*cloud.Address, error) { return tx.GetAddress(ctx, "a-1") })
	wantEqual(t, "the key round-trips", got, first)
	usage := usageOf(t, s, "t-1")

	for _, c := range []struct {
		desc string
		a    *cloud.Address
	}{
		{"a repeated key", &cloud.Address{ID: "a-2", TenantID: "t-1", IP: "203.0.113.8", IdempotencyKey: "k"}},
		// The key is looked up before the IP: a retry that picked the
		// same IP again is a retry, not an IP conflict.
		{"a repeated key and IP", &cloud.Address{ID: "a-2", TenantID: "t-1", IP: "203.0.113.7", IdempotencyKey: "k"}},
		{"a repeated key and ID", &cloud.Address{ID: "a-1", TenantID: "t-1", IP: "203.0.113.9", IdempotencyKey: "k"}},
	} {
		wantExisting(t, c.desc, try(s, func(tx cloud.Tx) error { return tx.CreateAddress(ctx, c.a) }), "a-1")
		wantEqual(t, c.desc+": the struct now holds the first address", c.a, first)
	}
	wantUsage(t, "retries append no usage", usageOf(t, s, "t-1"), usage)

	// A released address still holds its key.
	got.ReleasedAt = ptr(t0.Add(time.Hour))
	inTx(t, s, func(tx cloud.Tx) error { return tx.UpdateAddress(ctx, got) })
	retry := &cloud.Address{ID: "a-2", TenantID: "t-1", IP: "203.0.113.7", IdempotencyKey: "k"}
	wantExisting(t, "a repeated key of a released address",
		try(s, func(tx cloud.Tx) error { return tx.CreateAddress(ctx, retry) }), "a-1")
	if retry.ReleasedAt == nil || retry.IdempotencyKey != "k" {
		t.Errorf("the struct holds %+v, want the released first address", retry)
	}

	inTx(t, s, func(tx cloud.Tx) error {
		for _, a := range []*cloud.Address{
			{ID: "a-3", TenantID: "t-2", IP: "203.0.113.10", IdempotencyKey: "k"},
			{ID: "a-4", TenantID: "t-1", IP: "203.0.113.11"},
			{ID: "a-5", TenantID: "t-1", IP: "203.0.113.12"},
		} {
			if err := tx.CreateAddress(ctx, a); err != nil {
				return err
			}
		}
		return nil
	})
	as := mustRead(t, s, func(tx cloud.Tx) ([]*cloud.Address, error) { return tx.ListAddresses(ctx, "") })
	ids := []string{}
	for _, a := range as {
		ids = append(ids, a.ID)
	}
	wantEqual(t, "addresses after the retries", ids, []string{"a-1", "a-3", "a-4", "a-5"})
	// Without a key, an IP conflict is still one.
	wantCode(t, "a held IP without a key", try(s, func(tx cloud.Tx) error {
		return tx.CreateAddress(ctx, &cloud.Address{ID: "a-6", TenantID: "t-1", IP: "203.0.113.11"})
	}), cloud.Conflict, "held by another address")
	// A new key for a held IP is an IP conflict, not an idempotent one.
	err := try(s, func(tx cloud.Tx) error {
		return tx.CreateAddress(ctx, &cloud.Address{ID: "a-6", TenantID: "t-1", IP: "203.0.113.11", IdempotencyKey: "k3"})
	})
	wantCode(t, "a held IP with a new key", err, cloud.Conflict, "held by another address")
	if ce, ok := err.(*cloud.Error); ok && ce.Details["existing_id"] != nil {
		t.Errorf("an IP conflict carries existing_id %v", ce.Details["existing_id"])
	}
}

func testPriceIdempotency(t *testing.T, s cloud.Store) {
	first := &cloud.Price{Kind: cloud.PriceCompute, Offering: "h100.8x", Amount: 2_000_000, EffectiveAt: t0,
		CreatedAt: t0, Actor: "admin:ada", IdempotencyKey: "k"}
	inTx(t, s, func(tx cloud.Tx) error { return tx.AddPrice(ctx, first) })
	list := func() []*cloud.Price {
		return mustRead(t, s, func(tx cloud.Tx) ([]*cloud.Price, error) { return tx.ListPrices(ctx, cloud.PriceFilter{}) })
	}
	wantEqual(t, "the key round-trips", list(), []*cloud.Price{first})

	for _, c := range []struct {
		desc string
		p    *cloud.Price
	}{
		{"a repeated key", &cloud.Price{Kind: cloud.PriceCompute, Offering: "h100.8x", Amount: 2_000_000,
			EffectiveAt: t0.Add(time.Minute), CreatedAt: t0.Add(time.Minute), IdempotencyKey: "k"}},
		// Prices are the operator's: the key is one across kinds and
		// offerings.
		{"a repeated key for another price", &cloud.Price{Kind: cloud.PriceVolume, Amount: 1,
			EffectiveAt: t0, CreatedAt: t0, IdempotencyKey: "k"}},
	} {
		wantExistingID(t, c.desc, try(s, func(tx cloud.Tx) error { return tx.AddPrice(ctx, c.p) }), first.ID)
		wantEqual(t, c.desc+": the struct now holds the first version", c.p, first)
	}
	wantEqual(t, "retries add no version", list(), []*cloud.Price{first})

	second := &cloud.Price{Kind: cloud.PriceCompute, Offering: "h100.8x", Amount: 3, EffectiveAt: t0.Add(time.Hour),
		CreatedAt: t0, IdempotencyKey: "k2"}
	noKey := []*cloud.Price{
		{Kind: cloud.PriceCompute, Offering: "h100.8x", Amount: 4, EffectiveAt: t0.Add(2 * time.Hour), CreatedAt: t0},
		{Kind: cloud.PriceCompute, Offering: "h100.8x", Amount: 5, EffectiveAt: t0.Add(3 * time.Hour), CreatedAt: t0},
	}
	inTx(t, s, func(tx cloud.Tx) error {
		for _, p := range append([]*cloud.Price{second}, noKey...) {
			if err := tx.AddPrice(ctx, p); err != nil {
				return err
			}
		}
		return nil
	})
	if second.ID <= first.ID || noKey[0].ID <= second.ID || noKey[1].ID <= noKey[0].ID {
		t.Errorf("IDs %d, %d, %d, %d do not grow", first.ID, second.ID, noKey[0].ID, noKey[1].ID)
	}
	wantEqual(t, "prices after the retries", list(), []*cloud.Price{first, second, noKey[0], noKey[1]})
}

// testConcurrentIdempotentCreates is testConcurrentIdempotentCreate for
// volumes, addresses and prices: of the writers that share one key, one
// creates and the others get the Conflict naming it, with one usage On.
// Half the writers run at read committed, where the insert finds the key
// taken rather than losing a serialization race.
func testConcurrentIdempotentCreates(t *testing.T, s cloud.Store) {
	seedTenants(t, s, "t-1")
	var wg sync.WaitGroup
	errs := make([][3]error, Writers)
	for w := 0; w < Writers; w++ {
		ctx := ctx
		if w%2 == 1 {
			ctx = cloud.WithIsolation(ctx, cloud.ReadCommitted)
		}
		wg.Add(3)
		go func() {
			defer wg.Done()
			v := &cloud.Volume{ID: fmt.Sprintf("v-%d", w), TenantID: "t-1", Name: "data", SizeGiB: 1,
				IdempotencyKey: "same", CreatedAt: t0}
			errs[w][0] = s.Tx(ctx, func(tx cloud.Tx) error { return tx.CreateVolume(ctx, v) })
		}()
		go func() {
			defer wg.Done()
			a := &cloud.Address{ID: fmt.Sprintf("a-%d", w), TenantID: "t-1", IP: fmt.Sprintf("203.0.113.%d", w+1),
				IdempotencyKey: "same", CreatedAt: t0}
			errs[w][1] = s.Tx(ctx, func(tx cloud.Tx) error { return tx.CreateAddress(ctx, a) })
		}()
		go func() {
			defer wg.Done()
			p := &cloud.Price{Kind: cloud.PriceVolume, Amount: 1, EffectiveAt: t0, CreatedAt: t0, IdempotencyKey: "same"}
			errs[w][2] = s.Tx(ctx, func(tx cloud.Tx) error { return tx.AddPrice(ctx, p) })
		}()
	}
	wg.Wait()
	for k, what := range []string{"volume", "address", "price"} {
		created := 0
		for w := range Writers {
			switch err := errs[w][k]; {
			case err == nil:
				created++
			case cloud.ErrorCode(err) != cloud.Conflict:
				t.Errorf("%s writer %d: %v, want success or a Conflict", what, w, err)
			}
		}
		if created != 1 {
			t.Errorf("%d %ss created with one key, want 1", created, what)
		}
	}
	vs := mustRead(t, s, func(tx cloud.Tx) ([]*cloud.Volume, error) { return tx.ListVolumes(ctx, "") })
	as := mustRead(t, s, func(tx cloud.Tx) ([]*cloud.Address, error) { return tx.ListAddresses(ctx, "") })
	ps := mustRead(t, s, func(tx cloud.Tx) ([]*cloud.Price, error) { return tx.ListPrices(ctx, cloud.PriceFilter{}) })
	if len(vs) != 1 || len(as) != 1 || len(ps) != 1 {
		t.Fatalf("%d volumes, %d addresses, %d prices; want 1 of each", len(vs), len(as), len(ps))
	}
	for k, id := range []any{vs[0].ID, as[0].ID, ps[0].ID} {
		for w := range Writers {
			if err := errs[w][k]; err != nil {
				wantExistingID(t, fmt.Sprintf("writer %d of kind %d", w, k), err, id)
			}
		}
	}
	if n := len(usageOf(t, s, "t-1")); n != 2 {
		t.Errorf("%d usage entries, want 2 (one On for the volume, one for the address)", n)
	}
}
