package service

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
)

// Heartbeats without an inventory are committed in groups (issue 26): at
// thousands of hosts a heartbeat a second each, one transaction per
// heartbeat queues every other transaction (tenants' creates among them)
// behind them, and on SQLite, which commits one write at a time, the
// queue only grows. A heartbeat joins the group that waits for the
// transaction in flight; when that commits, the next group is written in
// one transaction (one read and one write per host), and each heartbeat
// answers once its group committed. An idle server writes each heartbeat
// at once, as before; a busy one writes one transaction per round trip of
// the store, whatever the number of hosts. A host the group cannot simply
// stamp (an unhealthy one, which a heartbeat heals, with an event) and
// every heartbeat of a group whose transaction failed take the one-host
// transaction instead.

// beatGroups is the group commit of heartbeats, shared by the services
// built by one New.
type beatGroups struct {
	mu      sync.Mutex
	queue   []*beatWaiter
	running bool
}

type beatWaiter struct {
	host string
	done chan error // errAlone: take the one-host transaction
}

// errAlone tells a heartbeat that its group did not record it.
var errAlone = errors.New("heartbeat: record alone")

// maxBeatGroup bounds one group's transaction.
const maxBeatGroup = 2000

// beat records a heartbeat without an inventory of host through the group
// commit; it answers errAlone when the caller must record it alone.
func (s *Agents) beat(ctx context.Context, host string) error {
	g := s.beats
	w := &beatWaiter{host: host, done: make(chan error, 1)}
	g.mu.Lock()
	g.queue = append(g.queue, w)
	if !g.running {
		g.running = true
		go s.writeGroups()
	}
	g.mu.Unlock()
	select {
	case err := <-w.done:
		return err
	case <-ctx.Done():
		// The group may still record it: a heartbeat is idempotent.
		return ctx.Err()
	}
}

// writeGroups writes the queued heartbeats, a group per transaction, until
// none is queued.
func (s *Agents) writeGroups() {
	g := s.beats
	for {
		g.mu.Lock()
		n := min(len(g.queue), maxBeatGroup)
		group := g.queue[:n:n]
		g.queue = g.queue[n:]
		if n == 0 {
			g.queue, g.running = nil, false
		}
		g.mu.Unlock()
		if n == 0 {
			return
		}
		s.writeGroup(group)
	}
}

// writeGroup stamps the group's hosts in one transaction (a statement per
// 512 hosts, cloud.Tx.StampHeartbeats) and answers each heartbeat: nil,
// or errAlone (a missing or unhealthy host, which the one-host
// transaction answers or heals, or a failed transaction).
func (s *Agents) writeGroup(group []*beatWaiter) {
	ctx, cancel := context.WithTimeout(cloud.WithLane(context.Background(), cloud.LaneFleet), time.Minute)
	defer cancel()
	hosts := make([]string, 0, len(group))
	seen := make(map[string]bool, len(group))
	for _, w := range group {
		if !seen[w.host] {
			seen[w.host] = true
			hosts = append(hosts, w.host)
		}
	}
	var stamped map[string]bool
	err := s.tx(ctx, func(tx cloud.Tx) error {
		ids, err := tx.StampHeartbeats(ctx, hosts, s.now())
		stamped = make(map[string]bool, len(ids))
		for _, id := range ids {
			stamped[id] = true
		}
		return err
	})
	for _, w := range group {
		if err != nil || !stamped[w.host] {
			w.done <- errAlone
		} else {
			w.done <- nil
		}
	}
}
