package postgres_test

import (
	"context"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/store/pgtest"
	"github.com/gpucloud/gpucloud/store/postgres"
	"github.com/gpucloud/gpucloud/store/storetest"
)

// baseURL skips the test when no PostgreSQL server is configured.
func baseURL(t *testing.T) string {
	t.Helper()
	u := os.Getenv("GPUCLOUD_TEST_POSTGRES_URL")
	if u == "" {
		t.Skip("GPUCLOUD_TEST_POSTGRES_URL not set: PostgreSQL tests skipped (CI sets it; see .ci/postgres.sh)")
	}
	return u
}

// freshSchema returns a URL whose connections use a new schema, dropped
// when the test ends.
func freshSchema(t *testing.T) string { return pgtest.URL(t) }

// open opens a store on a fresh schema. Cleanups run last-registered first,
// so the store closes before its schema is dropped.
func open(t *testing.T) *postgres.Store {
	t.Helper()
	u := freshSchema(t)
	s, err := postgres.Open(context.Background(), u)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestConformance runs the store conformance suite.
func TestConformance(t *testing.T) {
	baseURL(t)
	storetest.Run(t, func(t *testing.T) cloud.Store { return open(t) })
}

// TestConcurrentOpen checks that replicas starting together on one empty
// schema all succeed: the advisory lock lets one migrate while the others
// wait and then find nothing to do.
func TestConcurrentOpen(t *testing.T) {
	t.Parallel()
	u := freshSchema(t)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := postgres.Open(context.Background(), u)
			if err == nil {
				s.Close()
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Open %d: %v", i, err)
		}
	}
}

// TestRetry makes the first attempt of a transaction lose a serialization
// race on purpose: after it read the instance, another transaction updates
// it. Tx must run the function again and succeed on the fresh data. (This
// cannot be in the shared suite: on SQLite the second transaction would
// wait for the first, which waits for it.)
func TestRetry(t *testing.T) {
	t.Parallel()
	s := open(t)
	ctx := context.Background()
	err := s.Tx(ctx, func(tx cloud.Tx) error {
		if err := tx.CreateTenant(ctx, &cloud.Tenant{ID: "t-1", Name: "one"}); err != nil {
			return err
		}
		return tx.CreateInstance(ctx, &cloud.Instance{ID: "i-1", TenantID: "t-1", State: cloud.Pending})
	})
	if err != nil {
		t.Fatal(err)
	}
	bump := func(reason string) error {
		return s.Tx(ctx, func(tx cloud.Tx) error {
			in, err := tx.GetInstance(ctx, "i-1")
			if err != nil {
				return err
			}
			in.Reason = reason
			return tx.UpdateInstance(ctx, in)
		})
	}

	for _, c := range []struct {
		desc   string
		races  int32 // attempts that lose a race
		want   cloud.Code
		reason string // the stored reason afterwards
	}{
		{"one lost race is retried", 1, "", "mine"},
		{"five lost races are retried", 5, "", "mine"},
		{"six lost races give a Conflict", 6, cloud.Conflict, "theirs"},
	} {
		var attempts atomic.Int32
		err := s.Tx(ctx, func(tx cloud.Tx) error {
			n := attempts.Add(1)
			in, err := tx.GetInstance(ctx, "i-1")
			if err != nil {
				return err
			}
			if n <= c.races {
				if err := bump("theirs"); err != nil {
					t.Errorf("%s: the racing transaction failed: %v", c.desc, err)
				}
			}
			in.Reason = "mine"
			return tx.UpdateInstance(ctx, in)
		})
		if got := cloud.ErrorCode(err); got != c.want {
			t.Errorf("%s: Tx returned %v, want code %q", c.desc, err, c.want)
		}
		if want := min(c.races+1, postgres.Retries+1); attempts.Load() != want {
			t.Errorf("%s: %d attempts, want %d", c.desc, attempts.Load(), want)
		}
		var reason string
		err = s.Tx(ctx, func(tx cloud.Tx) error {
			in, err := tx.GetInstance(ctx, "i-1")
			if err == nil {
				reason = in.Reason
			}
			return err
		})
		if err != nil || reason != c.reason {
			t.Errorf("%s: stored reason %q (%v), want %q", c.desc, reason, err, c.reason)
		}
	}
}

// TestOpenBadURL checks that Open reports an unreachable server at once
// instead of returning a store that fails on first use.
func TestOpenBadURL(t *testing.T) {
	baseURL(t)
	_, err := postgres.Open(context.Background(), "postgres://nobody@127.0.0.1:1/none?sslmode=disable&connect_timeout=2")
	if err == nil {
		t.Fatal("Open of an unreachable server succeeded")
	}
}
