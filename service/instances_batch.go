package service

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
)

// Concurrent creates of one tenant are committed together (group commit).
// They would take turns anyway: each locks the tenant's quota row before it
// counts. So while one transaction of a tenant's creates runs, the creates
// of that tenant that arrive wait in its queue, and the next transaction
// takes all of them (at most maxCreateBatch): the quota is locked and
// counted once, the keys are looked up in one read, the subnet's cursor is
// written once, and the instances and their events are inserted with one
// statement each. A create that finds nothing running starts at once, so a
// lone create waits for nobody. The next transaction takes its creates
// when it gets its turn at the store (SQLite's one connection, PostgreSQL's
// gate), not before it waits for it: what arrives while it waits goes in
// too.
//
// How many tenants' batches run at once is bounded too
// (Options.CreateBatches): a tenant whose batch waits for a turn keeps
// gathering creates, so that under load the batches grow instead of
// multiplying. On PostgreSQL, whose work per batch (the quota's lock and
// counts, the keys' read, the subnet's cursor, the commit) is most of a
// small batch's cost, eight tenants' batches at once cut the control-plane
// burst into batches of about four creates; two at once, into batches
// about three times as large, at a quarter more creates a second
// (docs/BENCHMARKS.md, "Create batches at once"). A lone create still
// starts at once when a turn is free.
//
// A batch is all or nothing: when any of its creates fails (a quota
// exceeded, a key reused with another request, a race lost to another
// replica), the transaction writes nothing and each create is run again
// alone, in arrival order, so that each gets its own answer exactly as if
// it had come alone. Creates that attach volumes run alone: they need
// serializable isolation.

// DefaultCreateBatches is how many tenants' batches of creates the
// composition root lets run at once on a store that runs transactions
// side by side (PostgreSQL); on SQLite, whose one connection already runs
// them one at a time, it sets no bound.
const DefaultCreateBatches = 2

// maxCreateBatch bounds the creates of one transaction.
const maxCreateBatch = 64

// createBatchTimeout bounds a transaction of several creates. It does not
// run under any one caller's context, which may end while the others wait
// for it.
const createBatchTimeout = 30 * time.Second

// createCall is one create waiting for its transaction.
type createCall struct {
	ctx  context.Context
	a    Actor
	spec api.CreateInstanceRequest
	o    *catalog.Offering
	key  string

	out     *cloud.Instance
	created bool
	err     error
	done    chan struct{}
}

func (c *createCall) finish(out *cloud.Instance, created bool, err error) {
	c.out, c.created, c.err = out, created, err
	close(c.done)
}

// createQueues holds the queue of each tenant whose creates are running.
type createQueues struct {
	mu     sync.Mutex
	queues map[string]*createQueue
	// slots bounds the batches (of all tenants) running at once
	// (Options.CreateBatches); nil: any number. A batch holds a slot from
	// before its transaction begins until it has ended.
	slots chan struct{}
	// idle, when set, is called when a batch ends and leaves no queue,
	// if some batch created an instance since the last call
	// (Options.CreatesIdle); made says one did.
	idle func()
	made bool
}

// createQueue is one tenant's creates that wait for the running
// transaction to end.
type createQueue struct {
	waiting []*createCall
}

// newCreateQueues returns the queues, running at most n batches at once
// (n <= 0: any number), calling idle (when not nil) whenever a batch ends
// and leaves no queue, after batches that created instances.
func newCreateQueues(n int, idle func()) *createQueues {
	g := &createQueues{queues: map[string]*createQueue{}, idle: idle}
	if n > 0 {
		g.slots = make(chan struct{}, n)
	}
	return g
}

// submit queues c under key and returns once c is finished. When nothing
// runs for key, c's goroutine runs the first batch itself, and hands what
// arrives meanwhile to a new goroutine.
func (g *createQueues) submit(key string, c *createCall, run func(first *createCall, take func() []*createCall)) {
	g.mu.Lock()
	q, busy := g.queues[key]
	if !busy {
		q = &createQueue{}
		g.queues[key] = q
	}
	q.waiting = append(q.waiting, c)
	g.mu.Unlock()
	if !busy {
		g.drain(key, q, run)
	}
	<-c.done
}

// drain runs key's next batch, then leaves the queue idle or starts the
// following batch on a new goroutine. run gets the first create waiting
// (for its context's values) and a take that cuts the batch: the creates
// waiting when it is called, at most maxCreateBatch. run calls take once,
// when its transaction gets its turn; a run that does not call it leaves
// the creates waiting.
func (g *createQueues) drain(key string, q *createQueue, run func(first *createCall, take func() []*createCall)) {
	if g.slots != nil {
		// Blocked senders are served in arrival order. What key's
		// callers send meanwhile queues behind first, for take.
		g.slots <- struct{}{}
		defer func() { <-g.slots }()
	}
	g.mu.Lock()
	first := q.waiting[0]
	g.mu.Unlock()
	var taken []*createCall
	run(first, func() []*createCall {
		g.mu.Lock()
		defer g.mu.Unlock()
		n := min(len(q.waiting), maxCreateBatch)
		batch := slices.Clone(q.waiting[:n])
		q.waiting = slices.Clone(q.waiting[n:])
		taken = batch
		return batch
	})
	// run has finished every create it took.
	made := slices.ContainsFunc(taken, func(c *createCall) bool { return c.created })
	g.mu.Lock()
	g.made = g.made || made
	if len(q.waiting) > 0 {
		g.mu.Unlock()
		go g.drain(key, q, run)
		return
	}
	delete(g.queues, key)
	// Refused and repeated creates (a retried key) kick nothing: they
	// leave nothing to place.
	idle := len(g.queues) == 0 && g.idle != nil && g.made
	if idle {
		g.made = false
	}
	g.mu.Unlock()
	if idle {
		g.idle()
	}
}

// runCreates commits a batch of creates of one tenant, or, when that
// fails, each alone. The batch is taken (take) when its transaction has
// begun; first is the create that was waiting first, whose context's
// values (not its cancellation) the transaction keeps.
func (s *Instances) runCreates(first *createCall, take func() []*createCall) {
	var live []*createCall
	ctx, cancel := context.WithTimeout(context.WithoutCancel(first.ctx), createBatchTimeout)
	res, err := s.commitCreatesTaking(ctx, false, func() []*createCall {
		live = live[:0]
		for _, c := range take() {
			if err := c.ctx.Err(); err != nil {
				c.finish(nil, false, err) // gone before anything was written
				continue
			}
			live = append(live, c)
		}
		return live
	})
	cancel()
	if err == nil {
		for i, c := range live {
			c.finish(res[i].out, res[i].created, nil)
		}
		return
	}
	if len(live) == 1 {
		// A lone create has had its run: it is answered as when it ran
		// alone, not run again.
		c := live[0]
		c.finish(s.settleCreate(c, nil, err))
		return
	}
	for _, c := range live {
		res, err := s.commitCreates(c.ctx, []*createCall{c}, false)
		c.finish(s.settleCreate(c, res, err))
	}
}

// settleCreate is a create's answer from its transaction's (res, err of
// commitCreates): a race lost on its idempotency key answers the instance
// that won it, when that is the same request (settleRace).
func (s *Instances) settleCreate(c *createCall, res []createResult, err error) (*cloud.Instance, bool, error) {
	var out *cloud.Instance
	var created bool
	if err == nil {
		out, created = res[0].out, res[0].created
	}
	out, err = settleRace(c.ctx, s.store, out, err, func(tx cloud.Tx, id string) (*cloud.Instance, error) { return tx.GetInstance(c.ctx, id) },
		func(old *cloud.Instance) error { return sameInstance(old, c.o, &c.spec) })
	return out, created && err == nil, err
}

type createResult struct {
	out     *cloud.Instance
	created bool
}

// commitCreates runs creates in one transaction, each as createIn with
// its own actor, and answers them in order. Without volumes it runs at read
// committed and defers the instances' writes to one flush (createBatch);
// with volumes, at serializable isolation, writing as it goes.
func (s *Instances) commitCreates(ctx context.Context, calls []*createCall, volumes bool) ([]createResult, error) {
	return s.commitCreatesTaking(ctx, volumes, func() []*createCall { return calls })
}

// commitCreatesTaking is commitCreates of the creates take answers when
// the transaction first gets its turn (every later attempt runs the same
// ones).
func (s *Instances) commitCreatesTaking(ctx context.Context, volumes bool, take func() []*createCall) ([]createResult, error) {
	txctx := ctx
	if !volumes {
		txctx = cloud.WithIsolation(ctx, cloud.ReadCommitted)
	}
	var calls []*createCall
	taken := false
	var res []createResult
	err := s.retryNetwork(txctx, func(tx cloud.Tx) error {
		if !taken {
			calls, taken = take(), true
		}
		res = make([]createResult, len(calls))
		if len(calls) == 0 {
			return nil
		}
		// A fresh batch for each attempt of the transaction.
		b := &createBatch{collect: !volumes}
		bctx := context.WithValue(txctx, createBatchKey{}, b)
		if err := b.readKeys(bctx, tx, calls); err != nil {
			return err
		}
		for i, c := range calls {
			out, created, err := s.createIn(bctx, tx, c.a, &c.spec, c.o, c.key)
			if err != nil {
				return err
			}
			res[i] = createResult{out, created}
		}
		return b.flush(bctx, tx)
	})
	return res, err
}

// createBatch is what the creates of one transaction (commitCreates) share:
// the tenant's quota and usage (each create is checked against the usage
// read first plus the creates before it, exactly what a fresh count inside
// the transaction would say), the placement groups found live
// (checkedPlacementGroup), the instances of the creates' idempotency keys,
// read at once, and the subnets read. With collect set, CreateInstance
// defers its writes to flush: the addresses are allocated, the instances
// inserted and their events appended, a few statements for the whole
// batch. Its methods work on a nil batch, reading the store each time.
type createBatch struct {
	tenant string
	loaded bool
	quota  *cloud.Quota
	usage  api.Usage
	// groups are the placement groups checked live in this batch.
	groups map[string]bool

	// keyed are the tenants whose keys were read (readKeys); keys the
	// instances found or created in this batch, by tenant and key.
	keyed map[string]bool
	keys  map[[2]string]*cloud.Instance
	// subnets are those read in this batch, by ID; dflt the default
	// subnet of each tenant.
	subnets map[string]*cloud.Subnet
	dflt    map[string]*cloud.Subnet

	collect bool
	pending []*cloud.Instance
	events  []*cloud.Event
	// placed are the pending instances of each subnet, which flush gives
	// their addresses; order is the subnets in order of first use.
	placed map[*cloud.Subnet][]*cloud.Instance
	order  []*cloud.Subnet
}

type createBatchKey struct{}

// batchOf is ctx's batch of creates; nil outside one.
func batchOf(ctx context.Context) *createBatch {
	b, _ := ctx.Value(createBatchKey{}).(*createBatch)
	return b
}

// deferring is ctx's batch when it defers the writes of in, nil otherwise.
// An instance that attaches volumes is written at once: the attachment
// checks read the instances that hold the volumes.
func deferring(ctx context.Context, in *cloud.Instance) *createBatch {
	if b := batchOf(ctx); b != nil && b.collect && len(in.Volumes) == 0 {
		return b
	}
	return nil
}

// asked is the tenant a create asks for, before Scope checks it: the
// one it names, else its actor's.
func (c *createCall) asked() string {
	if c.spec.Tenant != "" {
		return c.spec.Tenant
	}
	return c.a.TenantID
}

// readKeys reads the instances of the calls' idempotency keys, one read
// per tenant asked for (Scope checks each call's tenant before its key is
// looked up); instanceByKey answers them from memory.
func (b *createBatch) readKeys(ctx context.Context, tx cloud.Tx, calls []*createCall) error {
	keys := map[string][]string{}
	for _, c := range calls {
		if c.key != "" && c.asked() != "" {
			keys[c.asked()] = append(keys[c.asked()], c.key)
		}
	}
	for _, tenant := range slices.Sorted(maps.Keys(keys)) {
		if len(keys[tenant]) < 2 {
			continue // one key costs the same read either way
		}
		ins, err := tx.InstancesByKeys(ctx, tenant, keys[tenant])
		if err != nil {
			return err
		}
		if b.keyed == nil {
			b.keyed, b.keys = map[string]bool{}, map[[2]string]*cloud.Instance{}
		}
		b.keyed[tenant] = true
		for _, in := range ins {
			b.keys[[2]string{tenant, in.IdempotencyKey}] = in
		}
	}
	return nil
}

// instanceByKey is tx.InstanceByKey, from memory for a tenant whose keys
// the batch read.
func (b *createBatch) instanceByKey(ctx context.Context, tx cloud.Tx, tenant, key string) (*cloud.Instance, error) {
	if b == nil || !b.keyed[tenant] {
		return tx.InstanceByKey(ctx, tenant, key)
	}
	if in := b.keys[[2]string{tenant, key}]; in != nil {
		return in, nil
	}
	return nil, &cloud.Error{Code: cloud.NotFound, Message: "no instance with idempotency key " + Quote(key)}
}

// subnet is tenantSubnet, read once per batch.
func (b *createBatch) subnet(ctx context.Context, tx cloud.Tx, tenant, id string) (*cloud.Subnet, error) {
	if b != nil {
		if sub := b.subnets[id]; sub != nil && sub.TenantID == tenant {
			return sub, nil
		}
	}
	sub, err := tenantSubnet(ctx, tx, tenant, id)
	if err == nil && b != nil {
		if b.subnets == nil {
			b.subnets = map[string]*cloud.Subnet{}
		}
		b.subnets[id] = sub
	}
	return sub, err
}

// defaultSubnet is ensureDefaultNetwork, once per tenant per batch.
func (b *createBatch) defaultSubnet(ctx context.Context, tx cloud.Tx, tenant, actor string, now time.Time) (*cloud.Subnet, error) {
	if b != nil && b.dflt[tenant] != nil {
		return b.dflt[tenant], nil
	}
	sub, err := ensureDefaultNetwork(ctx, tx, tenant, actor, now)
	if err == nil && b != nil {
		if b.dflt == nil {
			b.dflt = map[string]*cloud.Subnet{}
		}
		if cached := b.subnets[sub.ID]; cached != nil {
			sub = cached // one pointer per subnet, whose cursor flush advances
		}
		b.dflt[tenant] = sub
		if b.subnets == nil {
			b.subnets = map[string]*cloud.Subnet{}
		}
		b.subnets[sub.ID] = sub
	}
	return sub, err
}

// add defers the writes of instance in, which takes an address of sub,
// and of its event.
func (b *createBatch) add(in *cloud.Instance, sub *cloud.Subnet, ev *cloud.Event) {
	b.pending = append(b.pending, in)
	b.events = append(b.events, ev)
	if b.placed == nil {
		b.placed = map[*cloud.Subnet][]*cloud.Instance{}
	}
	if _, ok := b.placed[sub]; !ok {
		b.order = append(b.order, sub)
	}
	b.placed[sub] = append(b.placed[sub], in)
	if in.IdempotencyKey != "" && b.keyed[in.TenantID] {
		b.keys[[2]string{in.TenantID, in.IdempotencyKey}] = in
	}
}

// flush writes what the batch deferred: each subnet's addresses, given in
// one allocation (one write of its cursor), then the instances and their
// events, a statement each.
func (b *createBatch) flush(ctx context.Context, tx cloud.Tx) error {
	if b == nil || len(b.pending) == 0 {
		return nil
	}
	for _, sub := range b.order {
		ins := b.placed[sub]
		addrs, err := allocateAddresses(ctx, tx, sub, len(ins))
		if err != nil {
			return err
		}
		for i, in := range ins {
			in.PrivateAddress = addrs[i].String()
		}
	}
	if err := tx.CreateInstances(ctx, b.pending); err != nil {
		var ce *cloud.Error
		if errors.As(err, &ce) && ce.Code == cloud.Conflict && ce.Details["existing_id"] != nil {
			return asKeyRace(err, "batch") // a keyed create lost its race
		}
		return err
	}
	if err := tx.AppendEvents(ctx, b.events); err != nil {
		return err
	}
	b.pending, b.events, b.placed, b.order = nil, nil, nil, nil
	return nil
}
