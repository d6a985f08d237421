package service

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"sync"
	"time"

	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/cloud"
)

// AssignmentChanges tells the agents waiting on their assignments
// (GET /v1/agent/assignments?version=&wait=) that what a host's list
// shows may have changed: an instance placed on the host, moved while
// there or released from it (its instance.state events name the host),
// any other write of an instance the host holds (an interruption, a
// scale-in lock, an address), and a write of an instance of a stack job
// whose members a host's list names as peers. It is fed by
// WatchAssignments, the store decorator the composition root installs,
// so that every writer is covered without knowing of it. A waiter wakes
// only for its own keys (its host and the jobs its list shows): a
// placement on one host wakes no other host's agent.
//
// Other replicas' writes reach it through a carrier the composition root
// connects (PostgreSQL's LISTEN/NOTIFY): Publish hands it the keys of
// this replica's commits, NoteRemote takes the others', and SetPeered
// says whether the carrier is live. While it is not, a waiter also
// re-reads on a timer for the others' writes. Safe for concurrent use.
type AssignmentChanges struct {
	mu  sync.Mutex
	seq uint64
	// keys maps a key (hostKey, jobKeyOf) to its last change and its
	// waiters.
	keys map[string]*changeKey
	// swept is when keys was last pruned.
	swept time.Time
	// publish, when set, is handed the keys of every local commit.
	publish func(keys []string)
	// peered: the carrier delivers the other replicas' changes.
	peered bool
	// epoch is the seq of the last SetPeered: a wait from before it
	// answers at once.
	epoch uint64
}

// HostAssignmentKey is the key under which the changes of host's
// assignments are noted.
func HostAssignmentKey(host string) string { return hostKey(host) }

// Publish has fn handed the keys of every change this replica commits
// from now on, for the other replicas; fn must not block.
func (c *AssignmentChanges) Publish(fn func(keys []string)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.publish = fn
}

// NoteRemote notes keys another replica changed: their waiters wake, and
// nothing is published again.
func (c *AssignmentChanges) NoteRemote(keys []string) { c.noteFrom(keys, false) }

// SetPeered says whether the other replicas' changes reach NoteRemote.
// Either way every waiter wakes and reads again: one that waited while
// the carrier was down may have missed a change, and one that waits
// without a timer must start one when the carrier goes down.
func (c *AssignmentChanges) SetPeered(on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.peered = on
	c.seq++
	c.epoch = c.seq
	for _, e := range c.keys {
		for ch := range e.waiters {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
}

// Peered reports whether the other replicas' changes are delivered here
// (SetPeered), so that a waiter needs no timer for them.
func (c *AssignmentChanges) Peered() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.peered
}

type changeKey struct {
	seq     uint64
	at      time.Time
	waiters map[chan struct{}]struct{}
}

// keyRetention is how long a key with no waiter keeps the sequence of its
// last change: longer than any waiter takes from reading Seq to calling
// Wait (a store read, at most a request's timeout).
const keyRetention = 10 * time.Minute

// NewAssignmentChanges returns a notifier with no changes.
func NewAssignmentChanges() *AssignmentChanges {
	return &AssignmentChanges{keys: map[string]*changeKey{}}
}

// hostKey is the key of a host's assignments.
func hostKey(host string) string { return "host/" + host }

// jobKeyOf is the key of a stack job's members.
func jobKeyOf(k jobKey) string { return "job/" + k.tenant + "/" + k.stack + "/" + k.job }

// Seq is the number of the latest change: a waiter reads it before it
// reads the state it will wait on.
func (c *AssignmentChanges) Seq() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seq
}

// note records a committed change of the keys and wakes their waiters.
func (c *AssignmentChanges) note(keys []string) { c.noteFrom(keys, true) }

// noteFrom is note; local changes are also published.
func (c *AssignmentChanges) noteFrom(keys []string, local bool) {
	if len(keys) == 0 {
		return
	}
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if local && c.publish != nil {
		c.publish(keys)
	}
	c.seq++
	for _, k := range keys {
		e := c.keys[k]
		if e == nil {
			e = &changeKey{}
			c.keys[k] = e
		}
		e.seq, e.at = c.seq, now
		for ch := range e.waiters {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
	if now.Sub(c.swept) > keyRetention {
		c.swept = now
		for k, e := range c.keys {
			if len(e.waiters) == 0 && now.Sub(e.at) > keyRetention {
				delete(c.keys, k)
			}
		}
	}
}

// Wait blocks until any of keys changed after since, or ctx ends; it
// answers whether something changed.
func (c *AssignmentChanges) Wait(ctx context.Context, since uint64, keys []string) bool {
	ch := make(chan struct{}, 1)
	c.mu.Lock()
	if since < c.epoch {
		c.mu.Unlock()
		return true
	}
	for _, k := range keys {
		if e := c.keys[k]; e != nil && e.seq > since {
			c.mu.Unlock()
			return true
		}
	}
	for _, k := range keys {
		e := c.keys[k]
		if e == nil {
			e = &changeKey{at: time.Now()}
			c.keys[k] = e
		}
		if e.waiters == nil {
			e.waiters = map[chan struct{}]struct{}{}
		}
		e.waiters[ch] = struct{}{}
	}
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		for _, k := range keys {
			if e := c.keys[k]; e != nil {
				delete(e.waiters, ch)
			}
		}
		c.mu.Unlock()
	}()
	select {
	case <-ctx.Done():
		return false
	case <-ch:
		return true
	}
}

// Waiters is how many waits are registered now, over all keys (for
// tests).
func (c *AssignmentChanges) Waiters() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, e := range c.keys {
		n += len(e.waiters)
	}
	return n
}

// AssignmentView is a's host's assignments (Assignments) with their
// version, which changes whenever anything in the list does, and the keys
// a waiter for the next version waits on (AssignmentChanges.Wait): the
// host's and those of the stack jobs the list names.
func (s *Agents) AssignmentView(ctx context.Context, a Actor) (list *agentapi.AssignmentList, keys []string, err error) {
	as, err := s.Assignments(ctx, a)
	if err != nil {
		return nil, nil, err
	}
	if as == nil {
		as = []agentapi.Assignment{}
	}
	list = &agentapi.AssignmentList{Assignments: as}
	raw, err := json.Marshal(as)
	if err != nil {
		return nil, nil, err
	}
	sum := sha256.Sum256(raw)
	list.Version = hex.EncodeToString(sum[:12])
	keys = []string{hostKey(a.HostID)}
	seen := map[string]bool{}
	for _, as := range as {
		if as.Stack == nil {
			continue
		}
		k := jobKeyOf(jobKey{tenant: as.TenantID, stack: as.Tags[TagStack], job: as.Tags[TagStackJob]})
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	return list, keys, nil
}

// WatchAssignments wraps st so that every committed transaction that wrote
// something an agent's assignments show is noted in c. Reads and other
// writes pass through untouched.
func WatchAssignments(st cloud.Store, c *AssignmentChanges) cloud.Store {
	return &assignWatchedStore{Store: st, c: c}
}

type assignWatchedStore struct {
	cloud.Store
	c *AssignmentChanges
}

func (w *assignWatchedStore) Tx(ctx context.Context, fn func(cloud.Tx) error) error {
	var t *assignWatchedTx
	err := w.Store.Tx(ctx, func(tx cloud.Tx) error {
		// A retried transaction starts over: only the last attempt's
		// writes are noted.
		t = &assignWatchedTx{Tx: tx}
		return fn(t)
	})
	if err == nil && t != nil {
		w.c.note(t.keys)
	}
	return err
}

// Unwrap is the store WatchAssignments wrapped.
func (w *assignWatchedStore) Unwrap() cloud.Store { return w.Store }

// assignWatchedTx notes the writes of a transaction that concern
// assignments.
type assignWatchedTx struct {
	cloud.Tx
	keys []string
}

func (t *assignWatchedTx) instance(in *cloud.Instance) {
	if in.HostID != "" {
		t.keys = append(t.keys, hostKey(in.HostID))
	}
	if k, ok := jobOf(in); ok {
		t.keys = append(t.keys, jobKeyOf(k))
	}
}

func (t *assignWatchedTx) event(e *cloud.Event) {
	if e.Kind == cloud.EventInstanceState && e.HostID != "" {
		t.keys = append(t.keys, hostKey(e.HostID))
	}
}

func (t *assignWatchedTx) UpdateInstance(ctx context.Context, in *cloud.Instance) error {
	err := t.Tx.UpdateInstance(ctx, in)
	if err == nil {
		t.instance(in)
	}
	return err
}

func (t *assignWatchedTx) UpdateInstances(ctx context.Context, ins []*cloud.Instance) ([]string, error) {
	return t.writeInstances(ctx, ins, t.Tx.UpdateInstances)
}

func (t *assignWatchedTx) UpdateInstanceStates(ctx context.Context, ins []*cloud.Instance) ([]string, error) {
	return t.writeInstances(ctx, ins, t.Tx.UpdateInstanceStates)
}

// writeInstances writes ins with write (one of the store's batched
// updates) and notes each instance once it is written.
func (t *assignWatchedTx) writeInstances(ctx context.Context, ins []*cloud.Instance,
	write func(context.Context, []*cloud.Instance) ([]string, error)) ([]string, error) {
	stale, err := write(ctx, ins)
	if err == nil {
		for _, in := range ins {
			t.instance(in)
		}
	}
	return stale, err
}

func (t *assignWatchedTx) AppendEvent(ctx context.Context, e *cloud.Event) error {
	err := t.Tx.AppendEvent(ctx, e)
	if err == nil {
		t.event(e)
	}
	return err
}

func (t *assignWatchedTx) AppendEvents(ctx context.Context, es []*cloud.Event) error {
	err := t.Tx.AppendEvents(ctx, es)
	if err == nil {
		for _, e := range es {
			t.event(e)
		}
	}
	return err
}
