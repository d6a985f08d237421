package storetest

import (
	"testing"

	"github.com/gpucloud/gpucloud/cloud"
)

// testKeys: a key round-trips; a tenant's names and fingerprints are
// unique (another tenant may hold the same key); a repeated idempotency key
// answers the first key; lists are per tenant in ID order; a delete
// removes the row.
func testKeys(t *testing.T, s cloud.Store) {
	seedTenants(t, s, "t-1", "t-2")
	mk := func(id, tenant, name, fp, idem string) *cloud.Key {
		return &cloud.Key{ID: id, TenantID: tenant, Name: name, Type: "ssh-ed25519", Bits: 256,
			PublicKey: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI" + id + " me@laptop", Fingerprint: fp,
			CreatedAt: t0, IdempotencyKey: idem}
	}
	create := func(k *cloud.Key) error { return try(s, func(tx cloud.Tx) error { return tx.CreateKey(ctx, k) }) }
	first := mk("k-1", "t-1", "laptop", "SHA256:aaa", "idem")
	if err := create(first); err != nil {
		t.Fatal(err)
	}
	want := *first
	want.CreatedAt = us(t0)
	wantEqual(t, "create normalizes the time", first, &want)
	got := mustRead(t, s, func(tx cloud.Tx) (*cloud.Key, error) { return tx.GetKey(ctx, "k-1") })
	wantEqual(t, "the key round-trips", got, &want)

	retry := mk("k-9", "t-1", "other", "SHA256:zzz", "idem")
	wantExisting(t, "a repeated idempotency key", create(retry), "k-1")
	wantEqual(t, "the retry holds the first key", retry, &want)

	for _, c := range []struct {
		desc string
		k    *cloud.Key
		code cloud.Code
		msg  string
	}{
		{"a taken name", mk("k-2", "t-1", "laptop", "SHA256:bbb", ""), cloud.Conflict, "named"},
		{"a taken fingerprint", mk("k-2", "t-1", "desk", "SHA256:aaa", ""), cloud.Conflict, "fingerprint"},
		{"a taken ID", mk("k-1", "t-1", "desk", "SHA256:bbb", ""), cloud.Conflict, ""},
		{"a missing tenant", mk("k-2", "t-404", "desk", "SHA256:bbb", ""), cloud.NotFound, ""},
		{"no name", mk("k-2", "t-1", "", "SHA256:bbb", ""), cloud.Invalid, ""},
		{"no fingerprint", mk("k-2", "t-1", "desk", "", ""), cloud.Invalid, ""},
		{"no ID", mk("", "t-1", "desk", "SHA256:bbb", ""), cloud.Invalid, ""},
	} {
		wantCode(t, c.desc, create(c.k), c.code, c.msg)
	}
	// Another tenant may hold the same key, name and idempotency key.
	if err := create(mk("k-3", "t-2", "laptop", "SHA256:aaa", "idem")); err != nil {
		t.Fatalf("the same key in another tenant: %v", err)
	}
	if err := create(mk("k-2", "t-1", "desk", "SHA256:bbb", "")); err != nil {
		t.Fatal(err)
	}
	list := func(tenant string) []string {
		ks := mustRead(t, s, func(tx cloud.Tx) ([]*cloud.Key, error) { return tx.ListKeys(ctx, tenant) })
		out := []string{}
		for _, k := range ks {
			out = append(out, k.ID)
		}
		return out
	}
	wantEqual(t, "t-1's keys", list("t-1"), []string{"k-1", "k-2"})
	wantEqual(t, "t-2's keys", list("t-2"), []string{"k-3"})
	wantEqual(t, "every key", list(""), []string{"k-1", "k-2", "k-3"})

	inTx(t, s, func(tx cloud.Tx) error { return tx.DeleteKey(ctx, "k-1") })
	wantCode(t, "a second delete", try(s, func(tx cloud.Tx) error { return tx.DeleteKey(ctx, "k-1") }), cloud.NotFound, "")
	_, err := read(t, s, func(tx cloud.Tx) (*cloud.Key, error) { return tx.GetKey(ctx, "k-1") })
	wantCode(t, "a deleted key", err, cloud.NotFound, "")
	wantEqual(t, "t-1's keys after the delete", list("t-1"), []string{"k-2"})
	// A deleted key's name, fingerprint and idempotency key are free again.
	if err := create(mk("k-4", "t-1", "laptop", "SHA256:aaa", "idem")); err != nil {
		t.Errorf("re-import after delete: %v", err)
	}
}
