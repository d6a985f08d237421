package controlplane

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/store/postgres"
)

// The changes of the replicas on one PostgreSQL database, carried among
// them by LISTEN/NOTIFY (issue 26): the keys of what this replica commits
// are sent on one of the store's channels, and the keys the others send
// are noted here as if committed here. So an agent whose watch is on this
// replica hears of the leader's placements (service.AssignmentChanges)
// and of a security group changed through another replica
// (service.NetworkChanges) at once, instead of at its next timed re-read.
// While a channel is down (its connection broke, or the replica's own
// probe did not come back) the assignment watches fall back to their timer (service.AssignmentChanges.SetPeered); the network views
// keep theirs (one second) in any case.

// peerNote is one notification: the keys a replica committed, or a
// probe of its own channel.
type peerNote struct {
	From  string   `json:"from"`
	Keys  []string `json:"keys"`
	Probe uint64   `json:"probe,omitempty"`
}

// notifyTimeout bounds one notification's send.
const notifyTimeout = 5 * time.Second

// A listening connection may listen and hear nothing (a pooler in
// transaction mode between the replica and PostgreSQL drops what is
// notified to a session): each carrier sends itself a probe every
// probeEvery and counts its channel up only while the probe comes back
// within probeWait. Variables for tests.
var (
	probeEvery = 10 * time.Second
	probeWait  = 5 * time.Second
)

// peerNotes is what a change notifier offers the carrier.
type peerNotes interface {
	Publish(func(keys []string))
	NoteRemote(keys []string)
}

// carryChanges connects c to the other replicas through n until ctx ends:
// self is this start's name (a notification from it is its own), up is
// told (on a change) whether the channel carries: its connection listens
// and hears its own probes. It returns at once.
func carryChanges(ctx context.Context, wg *sync.WaitGroup, n *postgres.Notifier, c peerNotes, up func(bool), self string, log *slog.Logger) {
	p := &publisher{signal: make(chan struct{}, 1), pending: map[string]bool{}}
	c.Publish(p.add)
	pr := &prober{up: up, listening: make(chan bool, 1), echo: make(chan uint64, 1)}
	wg.Add(3)
	go func() {
		defer wg.Done()
		p.run(ctx, func(ctx context.Context, payload string) error { return n.Notify(ctx, payload) }, self, log.With("channel", n.Channel()))
	}()
	go func() {
		defer wg.Done()
		n.Listen(ctx, pr.setListening, func(payload string) {
			var note peerNote
			if err := json.Unmarshal([]byte(payload), &note); err != nil {
				return // not ours to read
			}
			if note.From == self {
				if note.Probe != 0 {
					select {
					case pr.echo <- note.Probe:
					default:
					}
				}
				return
			}
			c.NoteRemote(note.Keys)
		})
	}()
	go func() {
		defer wg.Done()
		pr.run(ctx, func(ctx context.Context, probe uint64) error {
			b, _ := json.Marshal(peerNote{From: self, Keys: []string{}, Probe: probe})
			return n.Notify(ctx, string(b))
		})
	}()
}

// prober tells up whether a channel carries: while its connection
// listens, a probe sent on it comes back.
type prober struct {
	up        func(bool)
	listening chan bool   // the listening connection's ups and downs
	echo      chan uint64 // probes heard back
	state     bool        // what up was last told
}

func (p *prober) setListening(on bool) {
	// The latest state wins: drop one the prober has not taken yet.
	select {
	case <-p.listening:
	default:
	}
	p.listening <- on
}

func (p *prober) tell(on bool) {
	if on != p.state {
		p.state = on
		p.up(on)
	}
}

func (p *prober) run(ctx context.Context, send func(context.Context, uint64) error) {
	listening := false
	var seq uint64
	tick := time.NewTicker(probeEvery)
	defer tick.Stop()
	for {
		probeNow := false
		select {
		case <-ctx.Done():
			p.tell(false)
			return
		case listening = <-p.listening:
			if !listening {
				p.tell(false)
				continue
			}
			probeNow = true
		case <-tick.C:
			probeNow = listening
		}
		if !probeNow {
			continue
		}
		seq++
		sctx, cancel := context.WithTimeout(ctx, probeWait)
		ok := send(sctx, seq) == nil && p.awaitEcho(sctx, seq)
		cancel()
		if ctx.Err() != nil {
			p.tell(false)
			return
		}
		p.tell(ok)
	}
}

// awaitEcho waits for probe seq to come back (an older one, late, is
// passed over) until ctx ends.
func (p *prober) awaitEcho(ctx context.Context, seq uint64) bool {
	for {
		select {
		case got := <-p.echo:
			if got == seq {
				return true
			}
		case <-ctx.Done():
			return false
		}
	}
}

// carryReplicaChanges carries the assignment and network changes of this
// replica (self) on pg's channels "assignments" and "networks".
func (s *Replica) carryReplicaChanges(ctx, runCtx context.Context, pg *postgres.Store, self string, log *slog.Logger) {
	asg, err := pg.Notifier(ctx, "assignments")
	if err == nil {
		carryChanges(runCtx, &s.wg, asg, s.asgChanges, func(on bool) {
			if !on && runCtx.Err() == nil {
				log.Warn("assignment changes: the channel to the other replicas is down (its connection broke, or its probe did not come back); agents' watches re-read on a timer until it is back")
			}
			s.asgChanges.SetPeered(on)
		}, self, log)
	}
	nets, nerr := pg.Notifier(ctx, "networks")
	if nerr == nil {
		carryChanges(runCtx, &s.wg, nets, s.netChanges, func(on bool) {
			if on {
				// What was sent while no connection listened is lost:
				// every view reads again.
				s.netChanges.NoteRemote([]string{service.NetworkKeyAll})
			}
		}, self, log)
	}
	if err = errors.Join(err, nerr); err != nil {
		log.Warn("changes are not carried among the replicas; agents' watches re-read on a timer", "err", err)
	}
}

// publisher sends the keys of local commits, gathered while a send is
// under way, in as few notifications as their size allows.
type publisher struct {
	mu      sync.Mutex
	pending map[string]bool
	signal  chan struct{}
}

// add queues keys; it never blocks (AssignmentChanges calls it under its
// lock).
func (p *publisher) add(keys []string) {
	p.mu.Lock()
	for _, k := range keys {
		p.pending[k] = true
	}
	p.mu.Unlock()
	select {
	case p.signal <- struct{}{}:
	default:
	}
}

// take empties the queue.
func (p *publisher) take() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	keys := make([]string, 0, len(p.pending))
	for k := range p.pending {
		keys = append(keys, k)
	}
	clear(p.pending)
	return keys
}

func (p *publisher) run(ctx context.Context, send func(context.Context, string) error, self string, log *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.signal:
		}
		for _, payload := range notePayloads(self, p.take(), postgres.MaxPayload) {
			sctx, cancel := context.WithTimeout(ctx, notifyTimeout)
			err := send(sctx, payload)
			cancel()
			if err != nil && ctx.Err() == nil {
				// The others' waiters see the change at their next
				// re-read: at the end of their wait, at most
				// agentapi.MaxAssignmentWait later.
				log.Warn("replica changes: notifying the other replicas failed", "err", err)
			}
		}
	}
}

// notePayloads splits keys into notifications of at most max bytes each.
// A key too long for one alone is left out (keys are IDs and names, far
// shorter).
func notePayloads(self string, keys []string, max int) []string {
	empty, _ := json.Marshal(peerNote{From: self, Keys: []string{}})
	var out []string
	var cur []string
	size := len(empty)
	flush := func() {
		if len(cur) > 0 {
			b, _ := json.Marshal(peerNote{From: self, Keys: cur})
			out = append(out, string(b))
		}
		cur, size = nil, len(empty)
	}
	for _, k := range keys {
		q, _ := json.Marshal(k)
		n := len(q) + 1 // and a comma
		if len(empty)+n > max {
			continue
		}
		if size+n > max {
			flush()
		}
		cur = append(cur, k)
		size += n
	}
	flush()
	return out
}
