package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/store/sqlite"
	"github.com/gpucloud/gpucloud/store/storetest"
)

func open(t *testing.T, path string) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatalf("Open(%q): %v", path, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// TestFile runs the conformance suite on a database file, the production
// setup: WAL journal, a fresh file per test.
func TestFile(t *testing.T) {
	storetest.Run(t, func(t *testing.T) cloud.Store {
		return open(t, filepath.Join(t.TempDir(), "gpucloud.db"))
	})
}

// TestMemory runs it on private in-memory databases, what other packages'
// tests use.
func TestMemory(t *testing.T) {
	storetest.Run(t, func(t *testing.T) cloud.Store { return open(t, ":memory:") })
}

// TestReopen checks that data survives closing and reopening a file, and
// that reopening does not apply the migrations again.
func TestReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "gpucloud.db")
	s, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	err = s.Tx(ctx, func(tx cloud.Tx) error {
		return tx.CreateTenant(ctx, &cloud.Tenant{ID: "t-1", Name: "one"})
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, path)
	err = s.Tx(ctx, func(tx cloud.Tx) error {
		_, err := tx.GetTenant(ctx, "t-1")
		return err
	})
	if err != nil {
		t.Errorf("after reopening: %v", err)
	}
}

// TestMemoryIsPrivate checks that two in-memory stores do not share data.
func TestMemoryIsPrivate(t *testing.T) {
	ctx := context.Background()
	a, b := open(t, ""), open(t, ":memory:")
	err := a.Tx(ctx, func(tx cloud.Tx) error {
		return tx.CreateTenant(ctx, &cloud.Tenant{ID: "t-1", Name: "one"})
	})
	if err != nil {
		t.Fatal(err)
	}
	err = b.Tx(ctx, func(tx cloud.Tx) error {
		_, err := tx.GetTenant(ctx, "t-1")
		return err
	})
	if !cloud.IsNotFound(err) {
		t.Errorf("the second in-memory store sees the first's tenant: %v", err)
	}
}
