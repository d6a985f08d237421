package storetest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
)

func testTimes(t *testing.T, s cloud.Store) {
	seedUsers(t, s)
	for i, c := range []struct {
		desc string
		at   time.Time
	}{
		{"nanoseconds in a zone east of UTC", t0},
		{"a zone west of UTC", time.Date(2024, 12, 31, 23, 59, 59, 999999999, time.FixedZone("PST", -8*3600))},
		{"whole microseconds in UTC stay exact", time.Date(2030, 1, 2, 3, 4, 5, 123456000, time.UTC)},
		{"a time with a monotonic clock reading", time.Now()},
		{"before 1970", time.Date(1969, 7, 20, 20, 17, 40, 1000, time.UTC)},
		{"the zero time", time.Time{}},
		{"far future", time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC)},
	} {
		id := fmt.Sprintf("k-%d", i)
		k := &cloud.Token{ID: id, UserID: "u-1", TenantID: "t-1", Hash: []byte(id),
			CreatedAt: c.at, ExpiresAt: ptr(c.at), RevokedAt: ptr(c.at)}
		if err := try(s, func(tx cloud.Tx) error { return tx.CreateToken(ctx, k) }); err != nil {
			t.Errorf("%s: %v", c.desc, err)
			continue
		}
		all := mustRead(t, s, func(tx cloud.Tx) ([]*cloud.Token, error) { return tx.ListTokens(ctx, "t-1") })
		var got *cloud.Token
		for _, g := range all {
			if g.ID == id {
				got = g
			}
		}
		if got == nil {
			t.Fatalf("%s: token %s not listed", c.desc, id)
		}
		want := c.at.Truncate(time.Microsecond)
		for _, tm := range []struct {
			name string
			t    *time.Time
		}{{"CreatedAt", &got.CreatedAt}, {"ExpiresAt", got.ExpiresAt}, {"RevokedAt", got.RevokedAt}} {
			if tm.t == nil || !tm.t.Equal(want) || tm.t.Location() != time.UTC {
				t.Errorf("%s: %s = %v, want %v in UTC", c.desc, tm.name, tm.t, want)
			}
		}
		wantEqual(t, c.desc+": the struct holds what was stored", got, k)
	}
}

func testRollback(t *testing.T, s cloud.Store) {
	seedTenants(t, s, "t-1")
	inTx(t, s, func(tx cloud.Tx) error {
		if err := tx.CreateInstance(ctx, &cloud.Instance{ID: "i-1", TenantID: "t-1", State: cloud.Pending}); err != nil {
			return err
		}
		return tx.PutHost(ctx, &cloud.Host{ID: "h-1", State: fleet.Schedulable})
	})
	rollbackWrites(t, s)
	checkRolledBack(t, s)
	rollbackStaleHost(t, s)
}

// rollbackWrites makes one write of each kind in a transaction whose
// function then fails.
func rollbackWrites(t *testing.T, s cloud.Store) {
	err := s.Tx(ctx, func(tx cloud.Tx) error {
		steps := []func() error{
			func() error { return tx.CreateTenant(ctx, &cloud.Tenant{ID: "t-2", Name: "two"}) },
			func() error { return tx.CreateUser(ctx, &cloud.User{ID: "u-2", TenantID: "t-2"}) },
			func() error {
				return tx.CreateToken(ctx, &cloud.Token{ID: "k-2", UserID: "u-2", TenantID: "t-2", Hash: []byte("h")})
			},
			func() error { return tx.PutQuota(ctx, &cloud.Quota{TenantID: "t-1", Instances: 1}) },
			func() error { return tx.CreateInstance(ctx, &cloud.Instance{ID: "i-2", TenantID: "t-2"}) },
			func() error {
				in, err := tx.GetInstance(ctx, "i-1")
				if err != nil {
					return err
				}
				in.State, in.HostID = cloud.Scheduled, "h-1"
				return tx.UpdateInstance(ctx, in)
			},
			func() error {
				h, err := tx.GetHost(ctx, "h-1")
				if err != nil {
					return err
				}
				h.State = fleet.Cordoned
				return tx.PutHost(ctx, h)
			},
			func() error { return tx.PutHost(ctx, &cloud.Host{ID: "h-2"}) },
			func() error { return tx.CreateVolume(ctx, &cloud.Volume{ID: "v-1", TenantID: "t-1"}) },
			func() error { return tx.AppendEvent(ctx, &cloud.Event{Kind: "instance.state", InstanceID: "i-1"}) },
		}
		for i, step := range steps {
			if err := step(); err != nil {
				return fmt.Errorf("step %d: %w", i, err)
			}
		}
		return errSentinel
	})
	if err != errSentinel {
		t.Fatalf("Tx returned %v, want exactly the function's error", err)
	}
}

// checkRolledBack checks that none of rollbackWrites' writes was kept.
func checkRolledBack(t *testing.T, s cloud.Store) {
	for _, c := range []struct {
		desc string
		fn   func(cloud.Tx) error
	}{
		{"the new tenant is gone", func(tx cloud.Tx) error { _, err := tx.GetTenant(ctx, "t-2"); return err }},
		{"the new user is gone", func(tx cloud.Tx) error { _, err := tx.GetUser(ctx, "u-2"); return err }},
		{"the new token is gone", func(tx cloud.Tx) error {
			_, err := tx.TokenByHash(ctx, []byte("h"), t0)
			return err
		}},
		{"the quota is gone", func(tx cloud.Tx) error { _, err := tx.GetQuota(ctx, "t-1"); return err }},
		{"the new instance is gone", func(tx cloud.Tx) error { _, err := tx.GetInstance(ctx, "i-2"); return err }},
		{"the new host is gone", func(tx cloud.Tx) error { _, err := tx.GetHost(ctx, "h-2"); return err }},
		{"the new volume is gone", func(tx cloud.Tx) error { _, err := tx.GetVolume(ctx, "v-1"); return err }},
	} {
		wantCode(t, c.desc, try(s, c.fn), cloud.NotFound, "")
	}
	in := mustRead(t, s, func(tx cloud.Tx) (*cloud.Instance, error) { return tx.GetInstance(ctx, "i-1") })
	if in.Version != 1 || in.State != cloud.Pending || in.HostID != "" {
		t.Errorf("the instance update was kept: %+v", in)
	}
	h := mustRead(t, s, func(tx cloud.Tx) (*cloud.Host, error) { return tx.GetHost(ctx, "h-1") })
	if h.Version != 1 || h.State != fleet.Schedulable {
		t.Errorf("the host update was kept: %+v", h)
	}
	es := mustRead(t, s, func(tx cloud.Tx) ([]*cloud.Event, error) { return tx.ListEvents(ctx, cloud.EventFilter{}) })
	if len(es) != 0 {
		t.Errorf("the event was kept: %d events", len(es))
	}
}

// rollbackStaleHost follows the scheduler's pattern: a second scheduler
// that planned on the same host version loses, and its instance update
// goes with it.
func rollbackStaleHost(t *testing.T, s cloud.Store) {
	plan := func(instance string, hostVersion int64) error {
		return try(s, func(tx cloud.Tx) error {
			in, err := tx.GetInstance(ctx, instance)
			if err != nil {
				return err
			}
			in.State, in.HostID = cloud.Scheduled, "h-1"
			if err := tx.UpdateInstance(ctx, in); err != nil {
				return err
			}
			h, err := tx.GetHost(ctx, "h-1")
			if err != nil {
				return err
			}
			h.Version = hostVersion
			h.Spec.Allocs++
			return tx.PutHost(ctx, h)
		})
	}
	inTx(t, s, func(tx cloud.Tx) error {
		return tx.CreateInstance(ctx, &cloud.Instance{ID: "i-3", TenantID: "t-1", State: cloud.Pending})
	})
	if err := plan("i-1", 1); err != nil {
		t.Fatalf("first scheduler: %v", err)
	}
	wantCode(t, "the second scheduler on a stale host version", plan("i-3", 1), cloud.Conflict, "")
	in := mustRead(t, s, func(tx cloud.Tx) (*cloud.Instance, error) { return tx.GetInstance(ctx, "i-3") })
	if in.State != cloud.Pending || in.Version != 1 {
		t.Errorf("the losing scheduler's instance update was kept: %+v", in)
	}
}

func testTxErrors(t *testing.T, s cloud.Store) {
	// fn's error comes back as is: the same value, not a copy or a wrap.
	want := &cloud.Error{Code: cloud.QuotaExceeded, Message: "over quota"}
	if err := try(s, func(cloud.Tx) error { return want }); err != want {
		t.Errorf("Tx returned %v, want the function's *cloud.Error itself", err)
	}

	// A Tx kept past its function is refused rather than used.
	var kept cloud.Tx
	inTx(t, s, func(tx cloud.Tx) error { kept = tx; return nil })
	_, err := kept.ListTenants(ctx)
	wantCode(t, "a Tx used after its function returned", err, cloud.Internal, "")
	err = kept.CreateTenant(ctx, &cloud.Tenant{ID: "t-late", Name: "late"})
	wantCode(t, "a write on a Tx after its function returned", err, cloud.Internal, "")

	// A panic rolls back and leaves the store usable (on SQLite, the one
	// connection must go back to the pool).
	func() {
		defer func() {
			if r := recover(); r == nil {
				t.Errorf("the panic did not propagate")
			}
		}()
		_ = s.Tx(ctx, func(tx cloud.Tx) error {
			if err := tx.CreateTenant(ctx, &cloud.Tenant{ID: "t-panic", Name: "panic"}); err != nil {
				return err
			}
			panic("storetest: on purpose")
		})
	}()
	tenants := mustRead(t, s, func(tx cloud.Tx) ([]*cloud.Tenant, error) { return tx.ListTenants(ctx) })
	if len(tenants) != 0 {
		t.Errorf("the panicking transaction was kept: %d tenants", len(tenants))
	}

	// A cancelled context stops Tx with the context's error.
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	err = s.Tx(cancelled, func(tx cloud.Tx) error {
		_, err := tx.ListTenants(cancelled)
		return err
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Tx with a cancelled context returned %v, want context.Canceled", err)
	}
}

// Writers is how many goroutines race in the concurrency tests; each makes
// Rounds increments.
const (
	Writers = 8
	Rounds  = 15
)

// counted returns the instance's counter, kept in a tag.
func counted(in *cloud.Instance) int {
	n, _ := strconv.Atoi(in.Tags["n"])
	return n
}

// race runs Writers goroutines that each call inc Rounds times, retrying
// while it returns a Conflict, and fails the test on any other error. It
// returns how many Conflicts were retried.
func race(t *testing.T, inc func() error) int {
	var wg sync.WaitGroup
	var mu sync.Mutex
	conflicts := 0
	for w := 0; w < Writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < Rounds; r++ {
				for attempt := 0; ; attempt++ {
					err := inc()
					if err == nil {
						break
					}
					if !cloud.IsConflict(err) || attempt > 1000 {
						t.Errorf("increment: %v", err)
						return
					}
					mu.Lock()
					conflicts++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return conflicts
}

func seedCounter(t *testing.T, s cloud.Store) {
	seedTenants(t, s, "t-1")
	inTx(t, s, func(tx cloud.Tx) error {
		return tx.CreateInstance(ctx, &cloud.Instance{ID: "i-1", TenantID: "t-1", State: cloud.Running,
			Tags: map[string]string{"n": "0"}})
	})
}

func checkCounter(t *testing.T, s cloud.Store, conflicts int) {
	in := mustRead(t, s, func(tx cloud.Tx) (*cloud.Instance, error) { return tx.GetInstance(ctx, "i-1") })
	if n := counted(in); n != Writers*Rounds {
		t.Errorf("counter = %d, want %d: updates were lost", n, Writers*Rounds)
	}
	if in.Version != 1+Writers*Rounds {
		t.Errorf("version = %d, want %d", in.Version, 1+Writers*Rounds)
	}
	t.Logf("%d increments by %d writers; %d conflicts retried by the callers", Writers*Rounds, Writers, conflicts)
}

func testConcurrentIncrement(t *testing.T, s cloud.Store) {
	seedCounter(t, s)
	// Read-modify-write inside one transaction: the store either serializes
	// the transactions or makes all but one lose and retries them.
	conflicts := race(t, func() error {
		return s.Tx(ctx, func(tx cloud.Tx) error {
			in, err := tx.GetInstance(ctx, "i-1")
			if err != nil {
				return err
			}
			in.Tags = map[string]string{"n": strconv.Itoa(counted(in) + 1)}
			return tx.UpdateInstance(ctx, in)
		})
	})
	checkCounter(t, s, conflicts)
}

func testConcurrentIfMatch(t *testing.T, s cloud.Store) {
	seedCounter(t, s)
	// Read in one transaction and write in another, as an HTTP client does
	// with If-Match: only the version protects the update.
	conflicts := race(t, func() error {
		in, err := read(t, s, func(tx cloud.Tx) (*cloud.Instance, error) { return tx.GetInstance(ctx, "i-1") })
		if err != nil {
			return err
		}
		in.Tags = map[string]string{"n": strconv.Itoa(counted(in) + 1)}
		return s.Tx(ctx, func(tx cloud.Tx) error { return tx.UpdateInstance(ctx, in) })
	})
	checkCounter(t, s, conflicts)
}

func testConcurrentIdempotentCreate(t *testing.T, s cloud.Store) {
	seedTenants(t, s, "t-1")
	var wg sync.WaitGroup
	errs := make([]error, Writers)
	got := make([]*cloud.Instance, Writers)
	for w := 0; w < Writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in := &cloud.Instance{ID: fmt.Sprintf("i-%d", w), TenantID: "t-1", IdempotencyKey: "same"}
			errs[w] = s.Tx(ctx, func(tx cloud.Tx) error { return tx.CreateInstance(ctx, in) })
			got[w] = in
		}()
	}
	wg.Wait()
	winner := ""
	for w, err := range errs {
		if err == nil {
			if winner != "" {
				t.Errorf("both %s and %s were created with one idempotency key", winner, got[w].ID)
			}
			winner = got[w].ID
		}
	}
	if winner == "" {
		t.Fatalf("no create succeeded: %v", errs)
	}
	for w, err := range errs {
		if err == nil {
			continue
		}
		var ce *cloud.Error
		if !errors.As(err, &ce) || ce.Code != cloud.Conflict || ce.Details["existing_id"] != winner {
			t.Errorf("writer %d: %v, want a Conflict with existing_id %s", w, err, winner)
		} else if got[w].ID != winner {
			t.Errorf("writer %d holds instance %s, want %s", w, got[w].ID, winner)
		}
	}
	all := mustRead(t, s, func(tx cloud.Tx) ([]*cloud.Instance, error) {
		return tx.ListInstances(ctx, cloud.InstanceFilter{})
	})
	if len(all) != 1 {
		t.Errorf("%d instances, want 1", len(all))
	}
}
