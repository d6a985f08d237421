package storetest

import (
	"testing"

	"github.com/gpucloud/gpucloud/cloud"
)

// testByKey: every create that takes an idempotency key can be found by
// it in one indexed read (what a retried create looks up), within the
// tenant's key space; an empty or unknown key, or another tenant's, is
// NotFound.
func testByKey(t *testing.T, s cloud.Store) {
	seedTenants(t, s, "t-1", "t-2")
	vol := &cloud.Volume{ID: "v-1", TenantID: "t-1", Name: "data", SizeGiB: 5, CreatedAt: t0, IdempotencyKey: "k"}
	price := &cloud.Price{Kind: cloud.PriceCompute, Offering: "h100.8x", Amount: 2_000_000, EffectiveAt: t0,
		CreatedAt: t0, Actor: "admin:ada", IdempotencyKey: "k"}
	inTx(t, s, func(tx cloud.Tx) error {
		if err := tx.CreateVolume(ctx, vol); err != nil {
			return err
		}
		if err := tx.CreateVolume(ctx, &cloud.Volume{ID: "v-2", TenantID: "t-1", Name: "nokey", SizeGiB: 1, CreatedAt: t0}); err != nil {
			return err
		}
		if err := tx.AddPrice(ctx, price); err != nil {
			return err
		}
		if err := tx.CreateCommitment(ctx, commitment("c-1", "t-1", "k")); err != nil {
			return err
		}
		if err := tx.CreateCommitment(ctx, commitment("c-2", "t-1", "")); err != nil {
			return err
		}
		if err := tx.CreateSpotRequest(ctx, spotRequest("sr-1", "t-1", "k")); err != nil {
			return err
		}
		return tx.CreateSpotRequest(ctx, spotRequest("sr-2", "t-1", ""))
	})
	type lookup struct {
		kind string
		find func(tx cloud.Tx, tenant, key string) (string, error)
		want string
	}
	for _, l := range []lookup{
		{"volume", func(tx cloud.Tx, tenant, key string) (string, error) {
			v, err := tx.VolumeByKey(ctx, tenant, key)
			if err != nil {
				return "", err
			}
			return v.ID, nil
		}, "v-1"},
		{"commitment", func(tx cloud.Tx, tenant, key string) (string, error) {
			c, err := tx.CommitmentByKey(ctx, tenant, key)
			if err != nil {
				return "", err
			}
			return c.ID, nil
		}, "c-1"},
		{"spot request", func(tx cloud.Tx, tenant, key string) (string, error) {
			r, err := tx.SpotRequestByKey(ctx, tenant, key)
			if err != nil {
				return "", err
			}
			return r.ID, nil
		}, "sr-1"},
	} {
		got := mustRead(t, s, func(tx cloud.Tx) (*string, error) {
			id, err := l.find(tx, "t-1", "k")
			return &id, err
		})
		if *got != l.want {
			t.Errorf("%s by key: %s, want %s", l.kind, *got, l.want)
		}
		for _, miss := range []struct{ tenant, key string }{{"t-2", "k"}, {"t-1", ""}, {"t-1", "nope"}} {
			err := try(s, func(tx cloud.Tx) error { _, err := l.find(tx, miss.tenant, miss.key); return err })
			if !cloud.IsNotFound(err) {
				t.Errorf("%s by key %q of %s: %v, want NotFound", l.kind, miss.key, miss.tenant, err)
			}
		}
	}
	got := mustRead(t, s, func(tx cloud.Tx) (*cloud.Price, error) { return tx.PriceByKey(ctx, "k") })
	if got.ID != price.ID || got.Amount != price.Amount {
		t.Errorf("price by key: %+v, want %+v", got, price)
	}
	for _, key := range []string{"", "nope"} {
		if err := try(s, func(tx cloud.Tx) error { _, err := tx.PriceByKey(ctx, key); return err }); !cloud.IsNotFound(err) {
			t.Errorf("price by key %q: %v, want NotFound", key, err)
		}
	}
}
