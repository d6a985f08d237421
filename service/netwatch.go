package service

import (
	"context"
	"strings"
	"sync"

	"github.com/gpucloud/gpucloud/cloud"
)

// NetworkChanges tells the agents' network views (Agents.NetworkView)
// that something they show may have changed: a network, subnet or
// security group, an instance of a network (placed, moved, stopped), a
// public address, or a host's underlay. It is fed by WatchNetworks, the
// store decorator the composition root installs, so that every writer is
// covered without knowing of it; a waiting agent wakes only for the
// networks it carries and its own host. Other replicas' writes reach it
// as AssignmentChanges' do (Publish, NoteRemote: PostgreSQL's
// LISTEN/NOTIFY, which the composition root connects); a waiter also
// re-reads on a timer, for a notification lost while the carrier was
// down. Safe for concurrent use.
type NetworkChanges struct {
	mu    sync.Mutex
	seq   uint64
	nets  map[string]uint64 // network ID -> seq of its last change
	hosts map[string]uint64 // host ID -> seq of the last change that placed or moved an instance there
	all   uint64            // seq of the last change every view must see (a host's underlay)
	ch    chan struct{}     // closed at the next change
	// publish, when set, is handed every local change as keys
	// (networkKeys).
	publish func(keys []string)
}

// Publish has fn handed the keys of every change this replica commits
// from now on, for the other replicas; fn must not block.
func (c *NetworkChanges) Publish(fn func(keys []string)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.publish = fn
}

// NoteRemote notes a change another replica published (or, with the key
// NetworkKeyAll, one every view must read again for): its waiters wake,
// and nothing is published again.
func (c *NetworkChanges) NoteRemote(keys []string) {
	var nets, hosts []string
	all := false
	for _, k := range keys {
		switch {
		case k == NetworkKeyAll:
			all = true
		case strings.HasPrefix(k, "net/"):
			nets = append(nets, k[len("net/"):])
		case strings.HasPrefix(k, "host/"):
			hosts = append(hosts, k[len("host/"):])
		}
	}
	c.noteFrom(nets, hosts, all, false)
}

// NetworkKeyAll is the key of a change every network view must see.
const NetworkKeyAll = "all"

// networkKeys are a change's networks, hosts and all as keys.
func networkKeys(nets, hosts []string, all bool) []string {
	keys := make([]string, 0, len(nets)+len(hosts)+1)
	for _, n := range nets {
		if n != "" {
			keys = append(keys, "net/"+n)
		}
	}
	for _, h := range hosts {
		if h != "" {
			keys = append(keys, "host/"+h)
		}
	}
	if all {
		keys = append(keys, NetworkKeyAll)
	}
	return keys
}

// NewNetworkChanges returns a notifier with no changes.
func NewNetworkChanges() *NetworkChanges {
	return &NetworkChanges{nets: map[string]uint64{}, hosts: map[string]uint64{}, ch: make(chan struct{})}
}

// Seq is the number of the latest change: a waiter reads it before it
// reads the state it will wait on.
func (c *NetworkChanges) Seq() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seq
}

// note records a committed change of the networks and hosts named
// (every view's when all), and wakes the waiters.
func (c *NetworkChanges) note(nets, hosts []string, all bool) { c.noteFrom(nets, hosts, all, true) }

// noteFrom is note; local changes are also published.
func (c *NetworkChanges) noteFrom(nets, hosts []string, all, local bool) {
	if len(nets) == 0 && len(hosts) == 0 && !all {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if local && c.publish != nil {
		if keys := networkKeys(nets, hosts, all); len(keys) > 0 {
			c.publish(keys)
		}
	}
	c.seq++
	for _, n := range nets {
		if n != "" {
			c.nets[n] = c.seq
		}
	}
	for _, h := range hosts {
		if h != "" {
			c.hosts[h] = c.seq
		}
	}
	if all {
		c.all = c.seq
	}
	close(c.ch)
	c.ch = make(chan struct{})
}

// Changed says whether any of nets, or host, changed after since.
func (c *NetworkChanges) Changed(since uint64, nets []string, host string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changedLocked(since, nets, host)
}

func (c *NetworkChanges) changedLocked(since uint64, nets []string, host string) bool {
	if c.all > since || c.hosts[host] > since {
		return true
	}
	for _, n := range nets {
		if c.nets[n] > since {
			return true
		}
	}
	return false
}

// Wait blocks until any of nets, or host, changed after since, or ctx
// ends; it answers whether something changed.
func (c *NetworkChanges) Wait(ctx context.Context, since uint64, nets []string, host string) bool {
	for {
		c.mu.Lock()
		if c.changedLocked(since, nets, host) {
			c.mu.Unlock()
			return true
		}
		ch := c.ch
		c.mu.Unlock()
		select {
		case <-ctx.Done():
			return false
		case <-ch:
		}
	}
}

// WatchNetworks wraps st so that every committed transaction that wrote
// something an agent's network view shows is noted in c. Reads and
// other writes pass through untouched.
func WatchNetworks(st cloud.Store, c *NetworkChanges) cloud.Store {
	return &watchedStore{Store: st, c: c}
}

type watchedStore struct {
	cloud.Store
	c *NetworkChanges
}

func (w *watchedStore) Tx(ctx context.Context, fn func(cloud.Tx) error) error {
	var t *watchedTx
	err := w.Store.Tx(ctx, func(tx cloud.Tx) error {
		// A retried transaction starts over: only the last attempt's
		// writes are noted.
		t = &watchedTx{Tx: tx}
		return fn(t)
	})
	if err == nil && t != nil {
		w.c.note(t.nets, t.hosts, t.all)
	}
	return err
}

// watchedTx notes the writes of a transaction that concern networks.
type watchedTx struct {
	cloud.Tx
	nets, hosts []string
	all         bool
}

func (t *watchedTx) instance(in *cloud.Instance) {
	if in.NetworkID != "" {
		t.nets = append(t.nets, in.NetworkID)
		t.hosts = append(t.hosts, in.HostID)
	}
}

func (t *watchedTx) UpdateInstance(ctx context.Context, in *cloud.Instance) error {
	err := t.Tx.UpdateInstance(ctx, in)
	if err == nil {
		t.instance(in)
	}
	return err
}

func (t *watchedTx) UpdateInstances(ctx context.Context, ins []*cloud.Instance) ([]string, error) {
	return t.writeInstances(ctx, ins, t.Tx.UpdateInstances)
}

func (t *watchedTx) UpdateInstanceStates(ctx context.Context, ins []*cloud.Instance) ([]string, error) {
	return t.writeInstances(ctx, ins, t.Tx.UpdateInstanceStates)
}

// writeInstances writes ins with write (one of the store's batched
// updates) and notes each instance once it is written.
func (t *watchedTx) writeInstances(ctx context.Context, ins []*cloud.Instance,
	write func(context.Context, []*cloud.Instance) ([]string, error)) ([]string, error) {
	stale, err := write(ctx, ins)
	if err == nil {
		for _, in := range ins {
			t.instance(in)
		}
	}
	return stale, err
}

func (t *watchedTx) PutHost(ctx context.Context, h *cloud.Host) error {
	old, gerr := t.Tx.GetHost(ctx, h.ID)
	err := t.Tx.PutHost(ctx, h)
	if err == nil && (gerr != nil || old.Spec.Underlay != h.Spec.Underlay) {
		t.all = true
	}
	return err
}

func (t *watchedTx) UpdateAddress(ctx context.Context, a *cloud.Address) error {
	old, gerr := t.Tx.GetAddress(ctx, a.ID)
	err := t.Tx.UpdateAddress(ctx, a)
	if err != nil {
		return err
	}
	for _, id := range []string{a.InstanceID, func() string {
		if gerr == nil {
			return old.InstanceID
		}
		return ""
	}()} {
		if id == "" {
			continue
		}
		if in, err := t.Tx.GetInstance(ctx, id); err == nil {
			t.instance(in)
		}
	}
	return nil
}

func (t *watchedTx) UpdateNetwork(ctx context.Context, n *cloud.Network) error {
	err := t.Tx.UpdateNetwork(ctx, n)
	if err == nil {
		t.nets = append(t.nets, n.ID)
	}
	return err
}

func (t *watchedTx) DeleteNetwork(ctx context.Context, id string) error {
	err := t.Tx.DeleteNetwork(ctx, id)
	if err == nil {
		t.nets = append(t.nets, id)
	}
	return err
}

func (t *watchedTx) CreateSubnet(ctx context.Context, s *cloud.Subnet) error {
	err := t.Tx.CreateSubnet(ctx, s)
	if err == nil {
		t.nets = append(t.nets, s.NetworkID)
	}
	return err
}

func (t *watchedTx) DeleteSubnet(ctx context.Context, id string) error {
	s, gerr := t.Tx.GetSubnet(ctx, id)
	err := t.Tx.DeleteSubnet(ctx, id)
	if err == nil && gerr == nil {
		t.nets = append(t.nets, s.NetworkID)
	}
	return err
}

func (t *watchedTx) UpdateSecurityGroup(ctx context.Context, g *cloud.SecurityGroup) error {
	err := t.Tx.UpdateSecurityGroup(ctx, g)
	if err == nil {
		t.nets = append(t.nets, g.NetworkID)
	}
	return err
}

func (t *watchedTx) DeleteSecurityGroup(ctx context.Context, id string) error {
	g, gerr := t.Tx.GetSecurityGroup(ctx, id)
	err := t.Tx.DeleteSecurityGroup(ctx, id)
	if err == nil && gerr == nil {
		t.nets = append(t.nets, g.NetworkID)
	}
	return err
}

// Unwrap is the store WatchNetworks wrapped.
func (w *watchedStore) Unwrap() cloud.Store { return w.Store }

// Unwrap returns the store under any WatchNetworks wrapper: what a test
// that reaches a store's own methods (its database, its counters) holds.
func Unwrap(st cloud.Store) cloud.Store {
	for {
		u, ok := st.(interface{ Unwrap() cloud.Store })
		if !ok {
			return st
		}
		st = u.Unwrap()
	}
}
