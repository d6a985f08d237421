package storetest

import (
	"context"
	"testing"

	"github.com/gpucloud/gpucloud/cloud"
)

// testClusterSecrets: a secret is stored once; a second create of the
// name is a Conflict that keeps the first value; a missing one is
// NotFound; bad input is Invalid. An update is a compare and swap.
func testClusterSecrets(t *testing.T, s cloud.Store) {
	ctx := context.Background()
	do := func(fn func(cloud.Tx) error) error { return s.Tx(ctx, fn) }
	if err := do(func(tx cloud.Tx) error { _, err := tx.ClusterSecret(ctx, "ca"); return err }); !cloud.IsNotFound(err) {
		t.Fatalf("missing secret: %v", err)
	}
	pem := []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
	if err := do(func(tx cloud.Tx) error { return tx.CreateClusterSecret(ctx, "ca", pem, t0) }); err != nil {
		t.Fatal(err)
	}
	if err := do(func(tx cloud.Tx) error { return tx.CreateClusterSecret(ctx, "ca", []byte("other"), t0) }); !cloud.IsConflict(err) {
		t.Fatalf("second create: %v", err)
	}
	var got []byte
	if err := do(func(tx cloud.Tx) (err error) { got, err = tx.ClusterSecret(ctx, "ca"); return }); err != nil || string(got) != string(pem) {
		t.Fatalf("read back %q, %v", got, err)
	}
	// An update applies only over the value read.
	if err := do(func(tx cloud.Tx) error { return tx.UpdateClusterSecret(ctx, "ca", []byte("stale"), []byte("new")) }); !cloud.IsConflict(err) {
		t.Fatalf("update over a stale value: %v", err)
	}
	if err := do(func(tx cloud.Tx) error { return tx.UpdateClusterSecret(ctx, "nope", pem, []byte("new")) }); !cloud.IsNotFound(err) {
		t.Fatalf("update of a missing secret: %v", err)
	}
	if err := do(func(tx cloud.Tx) error { return tx.UpdateClusterSecret(ctx, "ca", pem, []byte("new")) }); err != nil {
		t.Fatalf("update: %v", err)
	}
	if err := do(func(tx cloud.Tx) (err error) { got, err = tx.ClusterSecret(ctx, "ca"); return }); err != nil || string(got) != "new" {
		t.Fatalf("read back after update %q, %v", got, err)
	}
	if err := do(func(tx cloud.Tx) error { return tx.UpdateClusterSecret(ctx, "ca", []byte("new"), nil) }); cloud.ErrorCode(err) != cloud.Invalid {
		t.Errorf("update to nothing: %v", err)
	}
	for _, c := range []struct {
		name  string
		value []byte
	}{{"", pem}, {"x", nil}} {
		if err := do(func(tx cloud.Tx) error { return tx.CreateClusterSecret(ctx, c.name, c.value, t0) }); cloud.ErrorCode(err) != cloud.Invalid {
			t.Errorf("create %q: %v", c.name, err)
		}
	}
}
