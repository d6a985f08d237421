package service

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestCreateQueuesTakeAtTurn: a tenant's next batch of creates is cut
// when its transaction gets its turn (take), not when it starts waiting
// for it, so the creates that arrive meanwhile go in the same batch; a
// batch holds at most maxCreateBatch, and every create is answered once,
// in arrival order within the batches.
func TestCreateQueuesTakeAtTurn(t *testing.T) {
	for _, sent := range []int{1, 10, maxCreateBatch + 6} {
		t.Run(fmt.Sprint(sent), func(t *testing.T) {
			g := newCreateQueues(0, nil)
			turn := make(chan struct{})
			var batches [][]*createCall // appended by one run at a time
			run := func(first *createCall, take func() []*createCall) {
				<-turn // the store's turn
				b := take()
				if len(b) == 0 || b[0] != first {
					t.Errorf("the batch %v does not start with the first create waiting", b)
				}
				batches = append(batches, b)
				for _, c := range b {
					c.finish(nil, false, nil)
				}
			}
			calls := make([]*createCall, sent)
			var wg sync.WaitGroup
			for i := range calls {
				calls[i] = &createCall{done: make(chan struct{})}
				wg.Add(1)
				go func() {
					defer wg.Done()
					g.submit("tn-a", calls[i], run)
				}()
				// Each create is queued before the next is sent, so
				// that the arrival order is known.
				waitFor(t, func() bool {
					g.mu.Lock()
					defer g.mu.Unlock()
					q := g.queues["tn-a"]
					return q != nil && len(q.waiting) == i+1
				})
			}
			close(turn)
			wg.Wait()
			var got []*createCall
			for _, b := range batches {
				if len(b) > maxCreateBatch {
					t.Errorf("a batch of %d creates", len(b))
				}
				got = append(got, b...)
			}
			want := (sent + maxCreateBatch - 1) / maxCreateBatch
			if len(batches) != want || len(got) != sent {
				t.Fatalf("%d creates sent while the first waited for its turn: %d batches of %d in all, want %d",
					sent, len(batches), len(got), want)
			}
			for i := range got {
				if got[i] != calls[i] {
					t.Fatalf("create %d answered out of order", i)
				}
			}
			g.mu.Lock()
			defer g.mu.Unlock()
			if len(g.queues) != 0 {
				t.Errorf("queues left behind: %v", g.queues)
			}
		})
	}
}

// TestCreateQueuesSlots: with n slots, at most n tenants' batches run at
// once; a tenant whose batch waits for a slot keeps gathering its creates
// into it, a lone create with a slot free runs at once, and every slot is
// free again at the end.
func TestCreateQueuesSlots(t *testing.T) {
	for _, n := range []int{1, 2, 3} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			const tenants, perTenant = 5, 7
			g := newCreateQueues(n, nil)
			release := make(chan struct{})
			var mu sync.Mutex
			running, most := 0, 0
			sizes := map[string][]int{}
			run := func(first *createCall, take func() []*createCall) {
				mu.Lock()
				running++
				most = max(most, running)
				mu.Unlock()
				<-release
				b := take()
				mu.Lock()
				running--
				sizes[first.key] = append(sizes[first.key], len(b))
				mu.Unlock()
				for _, c := range b {
					c.finish(nil, false, nil)
				}
			}
			var wg sync.WaitGroup
			send := func(tenant string) {
				c := &createCall{key: tenant, done: make(chan struct{})}
				wg.Add(1)
				go func() {
					defer wg.Done()
					g.submit(tenant, c, run)
				}()
			}
			// One create of each tenant first: n of them take the slots,
			// the others wait for one.
			for i := range tenants {
				send(fmt.Sprint("tn-", i))
			}
			waitFor(t, func() bool {
				mu.Lock()
				defer mu.Unlock()
				return running == n
			})
			// The rest arrive while every tenant's first batch waits
			// (for the store's turn or for a slot).
			for i := range tenants {
				for range perTenant - 1 {
					send(fmt.Sprint("tn-", i))
				}
			}
			waitFor(t, func() bool {
				g.mu.Lock()
				defer g.mu.Unlock()
				queued := 0
				for _, q := range g.queues {
					queued += len(q.waiting)
				}
				return queued == tenants*perTenant
			})
			close(release)
			wg.Wait()
			if most > n {
				t.Errorf("%d batches ran at once, want at most %d", most, n)
			}
			// Every tenant's creates all went in its first batch: they
			// were all queued before any batch took them.
			for tenant, s := range sizes {
				if len(s) != 1 || s[0] != perTenant {
					t.Errorf("%s: batches of %v, want one of %d", tenant, s, perTenant)
				}
			}
			if len(sizes) != tenants {
				t.Errorf("%d tenants' batches ran, want %d", len(sizes), tenants)
			}
			if len(g.slots) != 0 || len(g.queues) != 0 {
				t.Errorf("%d slots held and %d queues left at the end", len(g.slots), len(g.queues))
			}
			// A lone create afterwards runs at once.
			c := &createCall{key: "tn-late", done: make(chan struct{})}
			done := make(chan struct{})
			go func() { g.submit("tn-late", c, run); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("a lone create waited with every slot free")
			}
		})
	}
}

// TestCreateQueuesIdle: the idle hook (Options.CreatesIdle) runs once
// each time the last running batch ends with nothing waiting, after its
// creates are answered: never while another tenant's batch runs or waits
// for a slot, not for a batch that leaves creates waiting, and not when
// nothing was created since its last call (creates refused, or answered
// with the instance their key made).
func TestCreateQueuesIdle(t *testing.T) {
	for _, n := range []int{0, 1} {
		t.Run(fmt.Sprint("slots=", n), func(t *testing.T) {
			var mu sync.Mutex
			idles := 0
			var answered []bool // whether every create sent was answered, at each idle
			var calls []*createCall
			g := newCreateQueues(n, func() {
				mu.Lock()
				defer mu.Unlock()
				idles++
				all := true
				for _, c := range calls {
					select {
					case <-c.done:
					default:
						all = false
					}
				}
				answered = append(answered, all)
			})
			turns := map[string]chan struct{}{"tn-a": make(chan struct{}), "tn-b": make(chan struct{})}
			started := make(chan string, 8)
			refuse := false // set between sends, never while one is in flight
			run := func(first *createCall, take func() []*createCall) {
				started <- first.key
				<-turns[first.key]
				for _, c := range take() {
					// A create whose spec names "refused" fails.
					if c.spec.Name == "refused" {
						c.finish(nil, false, fmt.Errorf("refused"))
					} else {
						c.finish(nil, true, nil)
					}
				}
			}
			var wg sync.WaitGroup
			send := func(tenant string) *createCall {
				c := &createCall{key: tenant, done: make(chan struct{})}
				if refuse {
					c.spec.Name = "refused"
				}
				mu.Lock()
				calls = append(calls, c)
				mu.Unlock()
				wg.Add(1)
				go func() {
					defer wg.Done()
					g.submit(tenant, c, run)
				}()
				return c
			}
			count := func() int {
				mu.Lock()
				defer mu.Unlock()
				return idles
			}
			// A lone create that is refused: nothing to place, no idle.
			close(turns["tn-a"])
			refuse = true
			send("tn-a")
			wg.Wait()
			<-started
			refuse = false
			if got := count(); got != 0 {
				t.Fatalf("a refused create: %d idles, want 0", got)
			}
			// A lone create: one idle, after its answer.
			send("tn-a")
			wg.Wait()
			if got := count(); got != 1 {
				t.Fatalf("a lone create: %d idles, want 1", got)
			}
			<-started
			// Two tenants at once: a's batch ends while b's runs (or waits
			// for the one slot): no idle until b's ends too.
			turns["tn-a"] = make(chan struct{})
			send("tn-a")
			if <-started != "tn-a" {
				t.Fatal("tn-a's batch did not start first")
			}
			send("tn-b")
			waitFor(t, func() bool {
				g.mu.Lock()
				defer g.mu.Unlock()
				return g.queues["tn-b"] != nil
			})
			// A second create of a's arrives while its batch waits for
			// the store: the batch takes it.
			send("tn-a")
			waitFor(t, func() bool {
				g.mu.Lock()
				defer g.mu.Unlock()
				return len(g.queues["tn-a"].waiting) == 2
			})
			close(turns["tn-a"])
			if <-started != "tn-b" {
				t.Fatal("tn-b's batch did not start")
			}
			time.Sleep(20 * time.Millisecond) // an idle now would be counted
			if got := count(); got != 1 {
				t.Fatalf("%d idles while tn-b's batch runs, want still 1", got)
			}
			close(turns["tn-b"])
			wg.Wait()
			waitFor(t, func() bool { return count() == 2 })
			mu.Lock()
			defer mu.Unlock()
			for i, all := range answered {
				if !all {
					t.Errorf("idle %d ran before every create was answered", i+1)
				}
			}
			if len(g.queues) != 0 {
				t.Errorf("queues left behind: %v", g.queues)
			}
		})
	}
}

// waitFor polls cond until it holds, for at most 10 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(time.Millisecond)
	}
}
