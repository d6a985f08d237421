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
			g := newCreateQueues()
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
