// Package testkit is the shared scaffolding of gpucloud's tests: a
// settable clock (Clock), one wait helper (Eventually, and EventuallySays
// for a condition that says where it stands), the stores every
// store-backed test runs on (SQLite always, PostgreSQL when
// GPUCLOUD_TEST_POSTGRES_URL is set, as in CI), one way to move an
// instance in a test (Move, one step, and Walk, the steps to any state,
// both through the same service.MoveInstance production code uses), and
// the environment of the tests that go through the API (NewAPI: a server
// over a store, bootstrapped, with the admin's client; Member; Rows).
// Only tests import it; it does not import the API server (httpapi's own
// tests use it), which a test passes in.
package testkit

import (
	"cmp"
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
	EventuallySays(t, timeout, what, func() (bool, string) { return cond(), "" })
}

// EventuallySays is Eventually for a condition that also says where things
// stand (an instance's state and reason, a count): the failure quotes what
// it said last, which is most of a diagnosis.
func EventuallySays(t testing.TB, timeout time.Duration, what string, cond func() (ok bool, last string)) {
	t.Helper()
	if timeout <= 0 {
		timeout = WaitTimeout
	}
	deadline := time.Now().Add(timeout)
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			if last != "" {
				t.Fatalf("gave up after %s waiting for %s; last: %s", timeout, what, last)
			}
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
			m.Zone = hostZone(tx, p.HostID, "")
		}
		if err := service.MoveInstance(context.Background(), tx, in, m, now); err != nil {
			return err
		}
		out = in
		return nil
	})
	return out, err
}

// hostZone is the zone of the stored host id, or def when there is none.
func hostZone(tx cloud.Tx, id, def string) string {
	if h, err := tx.GetHost(context.Background(), id); err == nil {
		return h.Spec.Zone
	}
	return def
}

// Host is the host Walk places an instance on when Via names none. No
// such host is stored unless a test stores one.
const Host = "host-test"

// Via says how Walk moves an instance: where it puts it when the way
// passes through scheduled, on Host (testkit.Host when empty) in Zone
// (when empty, the zone of Host as stored, or else the instance's zone as
// it is), and the Reason of the last move, which becomes the instance's
// (each move's is "test moves it to <state>" by default). The placement
// holds no devices; a test that needs some writes them after the walk.
type Via struct {
	Host, Zone string
	Reason     string
}

// Walk moves instance id to state to along the shortest way the lifecycle
// allows (cloud.CanMove), each step through service.MoveInstance at now,
// as the scheduler and the agents would move it there one report at a
// time (pending to running is pending, scheduled, starting, running), all
// in one transaction; it returns the instance as written. Walking to the
// state the instance is in moves nothing. It fails the test when there is
// no way (out of terminated) or a step fails.
func Walk(t testing.TB, st cloud.Store, id string, to cloud.State, via Via, now time.Time) *cloud.Instance {
	t.Helper()
	in, err := TryWalk(st, id, to, via, now)
	if err != nil {
		t.Fatalf("walk %s to %s: %v", id, to, err)
	}
	return in
}

// TryWalk is Walk that returns the error instead of failing the test.
func TryWalk(st cloud.Store, id string, to cloud.State, via Via, now time.Time) (*cloud.Instance, error) {
	var out *cloud.Instance
	err := st.Tx(context.Background(), func(tx cloud.Tx) error {
		in, err := tx.GetInstance(context.Background(), id)
		if err != nil {
			return err
		}
		way := Way(in.State, to)
		if way == nil && in.State != to {
			return fmt.Errorf("the lifecycle has no way from %s to %s", in.State, to)
		}
		for i, s := range way {
			m := service.Move{To: s, Reason: fmt.Sprintf("test moves it to %s", s), Actor: "test"}
			if s == cloud.Scheduled {
				host := cmp.Or(via.Host, Host)
				m.Placement = &fleet.Placement{ID: in.ID, HostID: host}
				m.Zone = cmp.Or(via.Zone, hostZone(tx, host, in.Zone))
			}
			if i == len(way)-1 && via.Reason != "" {
				m.Reason = via.Reason
			}
			if err := service.MoveInstance(context.Background(), tx, in, m, now); err != nil {
				return err
			}
		}
		out = in
		return nil
	})
	return out, err
}

// states are the lifecycle's states, in the order Way tries them.
var states = []cloud.State{cloud.Pending, cloud.Scheduled, cloud.Starting, cloud.Running, cloud.Paused, cloud.Stopping,
	cloud.Stopped, cloud.Terminating, cloud.Terminated, cloud.Failed, cloud.Lost}

// Way is the shortest sequence of moves cloud.CanMove allows from one
// state to another (the states after from, to last), nil when from is to
// or there is none. Among ways of one length it takes the one through the
// earlier states of the lifecycle.
func Way(from, to cloud.State) []cloud.State {
	prev := map[cloud.State]cloud.State{from: ""}
	queue := []cloud.State{from}
	for len(queue) > 0 && from != to {
		s := queue[0]
		queue = queue[1:]
		for _, n := range states {
			if _, seen := prev[n]; seen || !cloud.CanMove(s, n) {
				continue
			}
			prev[n] = s
			if n == to {
				var way []cloud.State
				for x := to; x != from; x = prev[x] {
					way = append([]cloud.State{x}, way...)
				}
				return way
			}
			queue = append(queue, n)
		}
	}
	return nil
}
