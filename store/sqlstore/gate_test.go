package sqlstore_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/store/pgtest"
	"github.com/gpucloud/gpucloud/store/postgres"
	"github.com/gpucloud/gpucloud/store/sqlite"
	"github.com/gpucloud/gpucloud/testkit"
)

// TestTxFirstComeFirstServed: transactions that wait for the store's one
// connection (SQLite) run in the order they came, not in the random order
// in which database/sql hands out a freed connection.
func TestTxFirstComeFirstServed(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	hold := holdTx(ctx, st)
	var (
		mu    sync.Mutex
		order []int
		wg    sync.WaitGroup
	)
	const n = 12
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := st.Tx(ctx, func(cloud.Tx) error {
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		}()
		// Let each one wait at the gate before the next comes.
		testkit.Eventually(t, 0, "transaction to wait", func() bool { return st.Waiting() == i+1 })
		time.Sleep(time.Millisecond)
	}
	close(hold)
	wg.Wait()
	want := make([]int, n)
	for i := range want {
		want[i] = i
	}
	if !slices.Equal(order, want) {
		t.Errorf("transactions ran in the order %v, want %v", order, want)
	}
}

// TestLimitTx: on PostgreSQL, whose pool has no cap, LimitTx bounds how
// many transactions run at once, and lifting it lets them all run.
func TestLimitTx(t *testing.T) {
	ctx := context.Background()
	st, err := postgres.Open(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// Each transaction stays until as many run as the limit allows (or
	// every other one is done), so the most that ran at once does not
	// depend on how fast the machine starts goroutines; a transaction that
	// the limit wrongly let in would raise the count past it.
	most := func(limit int) int {
		const n = 6
		var mu sync.Mutex
		running, most, done := 0, 0, 0
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := st.Tx(ctx, func(cloud.Tx) error {
					mu.Lock()
					running++
					most = max(most, running)
					mu.Unlock()
					deadline := time.Now().Add(testkit.WaitTimeout)
					for time.Now().Before(deadline) {
						mu.Lock()
						full := running >= limit || running+done == n
						mu.Unlock()
						if full {
							break
						}
						time.Sleep(time.Millisecond)
					}
					time.Sleep(5 * time.Millisecond) // room for a wrongly admitted one
					mu.Lock()
					running--
					done++
					mu.Unlock()
					return nil
				})
				if err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		return most
	}
	if n := most(6); n != 6 {
		t.Errorf("%d of 6 transactions ran at once with no limit", n)
	}
	st.LimitTx(2)
	if n := most(2); n != 2 {
		t.Errorf("%d transactions ran at once with a limit of 2", n)
	}
	st.LimitTx(0)
	if n := most(6); n != 6 {
		t.Errorf("%d of 6 transactions ran at once with the limit lifted", n)
	}
}

// TestFleetLane: a transaction of the fleet's lane (an agent's heartbeat)
// does not wait behind the queue of other transactions. On PostgreSQL it
// runs while the others' turns are all taken; on SQLite, whose one
// connection the lanes share, it runs as soon as the transaction in
// flight ends, before the others that queued first.
func TestFleetLane(t *testing.T) {
	ctx := context.Background()
	fleet := cloud.WithLane(ctx, cloud.LaneFleet)
	t.Run("postgres", func(t *testing.T) {
		st, err := postgres.Open(ctx, pgtest.URL(t))
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		st.LimitTx(2)
		hold := make(chan struct{})
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				_ = st.Tx(ctx, func(cloud.Tx) error { <-hold; return nil })
			})
		}
		testkit.Eventually(t, 0, "two transactions to wait", func() bool { return st.Waiting() == 2 })
		done := make(chan error, 1)
		go func() { done <- st.Tx(fleet, func(cloud.Tx) error { return nil }) }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(testkit.WaitTimeout):
			t.Fatal("the fleet's transaction waited behind the others")
		}
		close(hold)
		wg.Wait()
	})
	t.Run("sqlite", func(t *testing.T) {
		st, err := sqlite.Open(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		hold := holdTx(ctx, st)
		var (
			mu    sync.Mutex
			order []string
			wg    sync.WaitGroup
		)
		run := func(ctx context.Context, name string) {
			wg.Go(func() {
				if err := st.Tx(ctx, func(cloud.Tx) error {
					mu.Lock()
					order = append(order, name)
					mu.Unlock()
					return nil
				}); err != nil {
					t.Error(err)
				}
			})
		}
		for i := range 5 {
			run(ctx, "tenant")
			testkit.Eventually(t, 0, "transaction to wait", func() bool { return st.Waiting() == i+1 })
		}
		run(fleet, "fleet")
		// The fleet's transaction passes its gate and waits for the
		// connection.
		time.Sleep(20 * time.Millisecond)
		close(hold)
		wg.Wait()
		if order[0] != "fleet" {
			t.Errorf("transactions ran in the order %v; want the fleet's first", order)
		}
	})
}

// holdTx starts a transaction of st and returns once it runs; it ends
// when the returned channel is closed.
func holdTx(ctx context.Context, st cloud.Store) chan struct{} {
	hold, held := make(chan struct{}), make(chan struct{})
	go st.Tx(ctx, func(cloud.Tx) error {
		close(held)
		<-hold
		return nil
	})
	<-held
	return hold
}
