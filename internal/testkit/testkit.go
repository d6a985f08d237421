// Package testkit is the shared scaffolding of gpucloud's tests: a
// settable clock, one wait helper, the stores every store-backed test runs
// on (SQLite always, PostgreSQL when GPUCLOUD_TEST_POSTGRES_URL is set, as
// in CI), and one way to move an instance in a test (through the same
// service.MoveInstance production code uses). Only tests import it.
package testkit

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/store/pgtest"
	"github.com/gpucloud/gpucloud/store/postgres"
	"github.com/gpucloud/gpucloud/store/sqlite"
)

// Epoch is where test clocks start: a fixed instant, so that tests never
// depend on the wall clock.
var Epoch = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// Clock is a settable clock, safe for concurrent use. The zero value
// reads Epoch.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a clock at t (Epoch when zero).
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now is the clock's time; pass the method value as a Now option.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.t.IsZero() {
		c.t = Epoch
	}
	return c.t
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.t.IsZero() {
		c.t = Epoch
	}
	c.t = c.t.Add(d)
}

// Set sets the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// WaitTimeout is how long Eventually waits by default: generous, because
// CI machines are shared and slow; a test that passes waits far less.
const WaitTimeout = 30 * time.Second

// Eventually polls cond every few milliseconds until it holds, and fails
// the test, saying what it waited for, when it does not within timeout
// (WaitTimeout when zero). It is the one wait helper of the tests: waits
// are for a condition, never for a fixed time.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if timeout <= 0 {
		timeout = WaitTimeout
	}
	deadline := time.Now().Add(timeout)
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %s waiting for %s", timeout, what)
		}
		time.Sleep(delay)
	}
}

// Backend opens a fresh, empty store of one kind.
type Backend struct {
	Name string
	Open func(t testing.TB) cloud.Store
}

// Backends are the stores store-backed tests run on: SQLite in memory and
// PostgreSQL (a fresh schema; skipped, saying so, when
// GPUCLOUD_TEST_POSTGRES_URL is not set).
func Backends() []Backend {
	return []Backend{
		{Name: "sqlite", Open: func(t testing.TB) cloud.Store {
			t.Helper()
			st, err := sqlite.Open(context.Background(), "")
			if err != nil {
				t.Fatalf("open sqlite: %v", err)
			}
			t.Cleanup(func() { st.Close() })
			return st
		}},
		{Name: "postgres", Open: func(t testing.TB) cloud.Store {
			t.Helper()
			st, err := postgres.Open(context.Background(), pgtest.URL(t))
			if err != nil {
				t.Fatalf("open postgres: %v", err)
			}
			t.Cleanup(func() { st.Close() })
			return st
		}},
	}
}

// EachStore runs fn as a subtest on every backend, with a fresh store.
func EachStore(t *testing.T, fn func(t *testing.T, st cloud.Store)) {
	t.Helper()
	for _, b := range Backends() {
		t.Run(b.Name, func(t *testing.T) { fn(t, b.Open(t)) })
	}
}

// Move moves instance id to state to through service.MoveInstance, as a
// controller would (placement is required for scheduled), and returns the
// instance as written. It fails the test on any error.
func Move(t testing.TB, st cloud.Store, id string, to cloud.State, p *fleet.Placement, now time.Time) *cloud.Instance {
	t.Helper()
	in, err := TryMove(st, id, to, p, now)
	if err != nil {
		t.Fatalf("move %s to %s: %v", id, to, err)
	}
	return in
}

// TryMove is Move that returns the error instead of failing the test.
func TryMove(st cloud.Store, id string, to cloud.State, p *fleet.Placement, now time.Time) (*cloud.Instance, error) {
	var out *cloud.Instance
	err := st.Tx(context.Background(), func(tx cloud.Tx) error {
		in, err := tx.GetInstance(context.Background(), id)
		if err != nil {
			return err
		}
		m := service.Move{To: to, Reason: fmt.Sprintf("test moves it to %s", to), Actor: "test", Placement: p}
		if p != nil {
			h, err := tx.GetHost(context.Background(), p.HostID)
			if err == nil {
				m.Zone = h.Spec.Zone
			}
		}
		if err := service.MoveInstance(context.Background(), tx, in, m, now); err != nil {
			return err
		}
		out = in
		return nil
	})
	return out, err
}
