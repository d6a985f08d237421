package metrics

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpucloud/gpucloud/billing"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
	"github.com/gpucloud/gpucloud/testkit"
)

// accruedStore is a store with the built-in price book and three tenants:
// t-a runs an l40s.1x from 10:00, t-b has nothing yet, and t-c ran an
// h100.1x from 11:00 to 11:30 (on 2 December 2026, UTC).
func accruedStore(t *testing.T, st cloud.Store) {
	t.Helper()
	ctx := context.Background()
	day := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	err := st.Tx(ctx, func(tx cloud.Tx) error {
		ps, err := billing.DefaultPrices(catalog.Default())
		if err != nil {
			return err
		}
		for _, p := range ps {
			if err := tx.AddPrice(ctx, p); err != nil {
				return err
			}
		}
		for _, id := range []string{"t-a", "t-b", "t-c"} {
			if err := tx.CreateTenant(ctx, &cloud.Tenant{ID: id, Name: id, CreatedAt: testkit.Epoch}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	launch(t, st, "i-a", "t-a", "l40s.1x", day.Add(10*time.Hour))
	launch(t, st, "i-c", "t-c", "h100.1x", day.Add(11*time.Hour))
	testkit.Walk(t, st, "i-c", cloud.Terminated, testkit.Via{}, day.Add(11*time.Hour+30*time.Minute))
}

// launch creates an on-demand instance and walks it to running at.
func launch(t *testing.T, st cloud.Store, id, tenant, offering string, at time.Time) {
	t.Helper()
	err := st.Tx(context.Background(), func(tx cloud.Tx) error {
		return tx.CreateInstance(context.Background(), &cloud.Instance{ID: id, TenantID: tenant, Offering: offering,
			State: cloud.Pending, Market: cloud.MarketOnDemand, CreatedAt: at, UpdatedAt: at})
	})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Walk(t, st, id, cloud.Running, testkit.Via{Host: "h-1", Zone: "z-1"}, at)
}

func listPrice(t *testing.T, offering string) money.Micros {
	t.Helper()
	p, err := billing.ListPrice(catalog.Default(), offering)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func accruedOf(t *testing.T, c *AccruedCollector) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, line := range strings.Split(gather(t, c), "\n") {
		rest, ok := strings.CutPrefix(line, `gpucloud_tenant_accrued_dollars{tenant="`)
		if !ok {
			continue
		}
		tenant, value, _ := strings.Cut(rest, `"} `)
		var v float64
		if _, err := fmt.Sscan(value, &v); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		out[tenant] = v
	}
	return out
}

// TestAccruedCollector: each tenant's running invoice total for the month,
// 0 for a tenant with nothing; one rating serves the scrapes of the
// refresh period, and the next scrape after it rates again.
func TestAccruedCollector(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		accruedStore(t, st)
		clock := testkit.NewClock(time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC))
		c := NewAccruedCollector(st)
		c.Now, c.Refresh = clock.Now, time.Minute
		l40s, h100 := listPrice(t, "l40s.1x"), listPrice(t, "h100.1x")
		want := map[string]float64{"t-a": dollars(2 * l40s), "t-b": 0, "t-c": dollars(h100 / 2)}
		if got := accruedOf(t, c); !equal(got, want) {
			t.Fatalf("accrued %v, want %v", got, want)
		}
		// t-b starts an instance; within the refresh period the scrape
		// serves the rating it has.
		launch(t, st, "i-b", "t-b", "l40s.1x", clock.Now().Add(-time.Hour))
		clock.Advance(59 * time.Second)
		if got := accruedOf(t, c); !equal(got, want) {
			t.Fatalf("within the refresh: %v, want %v", got, want)
		}
		// Once it is stale, a scrape serves it still and rates anew in the
		// background; a later scrape serves the new rating.
		clock.Advance(time.Second)
		if got := accruedOf(t, c); !equal(got, want) {
			t.Fatalf("the first scrape after the refresh: %v, want the last rating %v", got, want)
		}
		l40sPerSecond := float64(l40s) / 3600 / 1e6
		want = map[string]float64{"t-a": dollars(2*l40s) + 60*l40sPerSecond, "t-b": dollars(l40s) + 60*l40sPerSecond, "t-c": dollars(h100 / 2)}
		waitAccrued(t, c, want)
		// Next month starts from 0 (t-a's and t-b's instances still run:
		// they accrue from midnight).
		clock.Set(time.Date(2027, 1, 1, 0, 30, 0, 0, time.UTC))
		want = map[string]float64{"t-a": dollars(l40s / 2), "t-b": dollars(l40s / 2), "t-c": 0}
		waitAccrued(t, c, want)
	})
}

// waitAccrued scrapes until the scrape serves want (the background rating
// is done), for a few seconds at most.
func waitAccrued(t *testing.T, c *AccruedCollector, want map[string]float64) {
	t.Helper()
	var got map[string]float64
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if got = accruedOf(t, c); equal(got, want) {
			return
		}
	}
	t.Fatalf("accrued %v, want %v", got, want)
}

// TestAccruedPriceGap: a tenant whose usage no price covers is left out;
// the others are still served.
func TestAccruedPriceGap(t *testing.T) {
	st := testkit.Backends()[0].Open(t)
	accruedStore(t, st)
	launch(t, st, "i-x", "t-b", "no.such.offering", time.Date(2026, 12, 2, 11, 0, 0, 0, time.UTC))
	c := NewAccruedCollector(st)
	c.Now, c.Log = func() time.Time { return time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC) }, quietLog()
	got := accruedOf(t, c)
	if _, ok := got["t-b"]; ok || len(got) != 2 || got["t-a"] == 0 {
		t.Fatalf("accrued %v: want t-a and t-c, not t-b", got)
	}
}

// TestAccruedStoreDown: a rating that fails is the scrape's error, served
// for the refresh period, and the rest of the scrape is still served.
func TestAccruedStoreDown(t *testing.T) {
	st := testkit.Backends()[0].Open(t)
	st.Close()
	s := NewRegistry()
	s.Log = quietLog()
	s.WatchAccrued(st, time.Hour, nil)
	exp := exposition(t, s)
	if strings.Contains(exp, "gpucloud_tenant_accrued_dollars") || !strings.Contains(exp, "gpucloud_scheduler_placements_total") {
		t.Errorf("scrape with the store down:\n%s", exp)
	}
}

// TestAccruedConcurrentScrapes: scrapes at the same time rate once, and
// every one is served; once the rating is stale, concurrent scrapes start
// one rating between them.
func TestAccruedConcurrentScrapes(t *testing.T) {
	st := &countingStore{Store: testkit.Backends()[0].Open(t)}
	accruedStore(t, st.Store)
	clock := testkit.NewClock(time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC))
	c := NewAccruedCollector(st)
	c.Now = clock.Now
	scrapes := func() {
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if n := testutil.CollectAndCount(c); n != 3 {
					t.Errorf("%d series, want 3", n)
				}
			}()
		}
		wg.Wait()
	}
	scrapes()
	if n := st.txs(); n != 1 {
		t.Errorf("%d ratings for scrapes within the refresh, want 1", n)
	}
	clock.Advance(DefaultAccruedRefresh)
	scrapes()
	c.rating.Lock() // the background rating is done
	c.rating.Unlock()
	if n := st.txs(); n != 2 {
		t.Errorf("%d ratings, want 2: one more once stale", n)
	}
}

// countingStore counts transactions.
type countingStore struct {
	cloud.Store
	mu sync.Mutex
	n  int
}

func (s *countingStore) Tx(ctx context.Context, fn func(cloud.Tx) error) error {
	s.mu.Lock()
	s.n++
	s.mu.Unlock()
	return s.Store.Tx(ctx, fn)
}

func (s *countingStore) txs() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// equal compares amounts to the micro-dollar.
func equal(a, b map[string]float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok || v-w > 1e-6 || w-v > 1e-6 {
			return false
		}
	}
	return true
}
