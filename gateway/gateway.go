// Package gateway is each server replica's router of serverless endpoint
// traffic (docs/ENDPOINTS.md): it keeps, in memory, every endpoint's
// workers with their readiness and load, probes new workers until they
// are ready, runs queue-mode jobs on them (claimed from the store with a
// lease, answered through service.Endpoints.Finish) and proxies
// HTTP-mode requests to a ready worker with free concurrency. It reaches
// a worker the way published ports do: a TCP connection to the worker's
// port inside its container, relayed by its host's agent (relay.Hub),
// pooled per worker. Routing a request reads no database row: the worker
// table is refreshed from the store on a timer. It holds no rule: the
// services decide what is stored, autoscale.PlanEndpoint how many
// workers run (the endpoint controller reads Load).
package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/relay"
	"github.com/gpucloud/gpucloud/service"
)

// Defaults.
const (
	DefaultRefresh = 250 * time.Millisecond
	// probeEvery is how often a worker that is not ready yet is probed.
	probeEvery = 100 * time.Millisecond
	// probeTimeout bounds one readiness probe.
	probeTimeout = 2 * time.Second
	// pollEvery is how often a queue endpoint with free workers looks for
	// jobs submitted through another replica.
	pollEvery = 500 * time.Millisecond
	// leaseMargin is added to a job's timeout for its lease.
	leaseMargin = 30 * time.Second
	// latencyWindow is the span of the latency figures.
	latencyWindow = 10 * time.Minute
	maxLatencies  = 10000
)

// Config configures a gateway.
type Config struct {
	Services *service.Services
	Hub      *relay.Hub
	// Replica names this replica as the owner of the jobs it runs.
	Replica string
	Log     *slog.Logger
	Now     func() time.Time
	// Refresh is how often the worker table is read (DefaultRefresh when
	// zero).
	Refresh time.Duration
	// Demand, when set, is told that work arrived for an endpoint with no
	// free worker here (a job submitted, an HTTP request waiting), so
	// that the controllers resume or launch one at once rather than at
	// their next tick. It must not block.
	Demand func()
}

// Gateway routes endpoint traffic. Safe for concurrent use.
type Gateway struct {
	cfg Config

	mu        sync.Mutex
	endpoints map[string]*endpoint // by ID
	// done wakes the runsync waiters of a job run here.
	done map[string][]chan *cloud.Job
	// peers is the other replicas' load, merged (SetPeerLoads).
	peers map[string]Load
	// refreshNow carries RefreshNow's requests (one pending at most).
	refreshNow chan struct{}
}

type endpoint struct {
	ep *cloud.Endpoint
	// workers by instance ID.
	workers map[string]*worker
	// changed is closed (and replaced) when a worker becomes ready or
	// frees a slot, and when the endpoint is woken for new jobs.
	changed chan struct{}
	// waiting counts HTTP requests waiting for a worker; inflight the
	// requests and jobs a worker of this replica runs now.
	waiting, inflight int
	latencies         []latency
	dispatching       bool
}

type latency struct {
	at time.Time
	d  time.Duration
}

type worker struct {
	id, host   string
	generation int64
	market     cloud.Market
	state      cloud.State
	launchedAt time.Time
	runningAt  time.Time
	ready      bool
	readyAt    time.Time
	probing    bool
	busy       int
	// remote is the requests other replicas run on the worker, as
	// they last published them (SetPeerLoads).
	remote    int
	idleSince time.Time
	tr        *http.Transport
	port      int
}

// New returns a gateway; Run starts its loops.
func New(cfg Config) *Gateway {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Refresh <= 0 {
		cfg.Refresh = DefaultRefresh
	}
	return &Gateway{cfg: cfg, endpoints: map[string]*endpoint{}, done: map[string][]chan *cloud.Job{}, refreshNow: make(chan struct{}, 1)}
}

// RefreshNow asks for the worker table to be read again at once rather
// than at the next Refresh: the endpoint controller resumed or launched
// workers (a paused worker resumed for a request is probed, and takes it,
// without waiting up to a Refresh). Requests that come together are one.
func (g *Gateway) RefreshNow() {
	select {
	case g.refreshNow <- struct{}{}:
	default:
	}
}

// Run puts back the jobs this replica's previous run held, then keeps the
// worker table fresh and dispatches jobs until ctx ends.
func (g *Gateway) Run(ctx context.Context) {
	if n, err := g.cfg.Services.Endpoints.Requeue(ctx, g.cfg.Replica, "the server replica running it restarted"); err != nil {
		g.cfg.Log.Error("gateway: requeue jobs", "err", err)
	} else if n > 0 {
		g.cfg.Log.Info("gateway: jobs of the previous run queued again", "jobs", n)
	}
	t := time.NewTicker(g.cfg.Refresh)
	defer t.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		if err := g.refresh(ctx, &wg); err != nil && ctx.Err() == nil {
			g.cfg.Log.Warn("gateway: refresh", "err", err)
		}
		select {
		case <-ctx.Done():
			g.closeAll()
			return
		case <-t.C:
		case <-g.refreshNow:
		}
	}
}

// refresh reads the live endpoints and their workers' instances, and
// brings the table in line: new workers are probed, gone ones dropped.
func (g *Gateway) refresh(ctx context.Context, wg *sync.WaitGroup) error {
	var eps []*cloud.Endpoint
	ins := map[string]*cloud.Instance{}
	err := g.cfg.Services.Store().Tx(ctx, func(tx cloud.Tx) error {
		var err error
		eps, err = tx.ListEndpoints(ctx, "", cloud.EndpointActive, cloud.EndpointDeleting)
		if err != nil {
			return err
		}
		var ids []string
		for _, e := range eps {
			for _, w := range e.Status.Workers {
				ids = append(ids, w.ID)
			}
		}
		if len(ids) == 0 {
			return nil
		}
		list, err := tx.ListInstances(ctx, cloud.InstanceFilter{IDs: ids})
		if err != nil {
			return err
		}
		for _, in := range list {
			ins[in.ID] = in
		}
		return nil
	})
	if err != nil {
		return err
	}
	now := g.cfg.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	seen := map[string]bool{}
	for _, e := range eps {
		seen[e.ID] = true
		es := g.endpoints[e.ID]
		if es == nil {
			es = &endpoint{workers: map[string]*worker{}, changed: make(chan struct{})}
			g.endpoints[e.ID] = es
		}
		es.ep = e
		keep := map[string]bool{}
		for _, ref := range e.Status.Workers {
			in := ins[ref.ID]
			if in == nil {
				continue
			}
			keep[ref.ID] = true
			w := es.workers[ref.ID]
			if w == nil {
				w = &worker{id: ref.ID, generation: ref.Generation, market: ref.Market, launchedAt: ref.LaunchedAt,
					idleSince: ref.LaunchedAt, port: e.Spec.Port}
				es.workers[ref.ID] = w
				w.remote = g.peers[e.ID].Workers[ref.ID].Busy
			}
			w.state, w.host = in.State, in.HostID
			if in.State == cloud.Running && w.runningAt.IsZero() {
				w.runningAt = now
			}
			if in.State != cloud.Running {
				w.ready = false
			}
			if in.State == cloud.Running && !w.ready && !w.probing && ctx.Err() == nil {
				w.probing = true
				if w.tr == nil {
					w.tr = g.transport(w.id, e.Spec.Concurrency)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					g.probe(ctx, es, w, e.Spec.HealthPath)
				}()
			}
		}
		for id, w := range es.workers {
			if !keep[id] {
				delete(es.workers, id)
				if w.tr != nil {
					w.tr.CloseIdleConnections()
				}
			}
		}
		if e.Spec.Mode == cloud.EndpointQueue && e.State == cloud.EndpointActive && !es.dispatching && ctx.Err() == nil {
			es.dispatching = true
			wg.Add(1)
			go func() {
				defer wg.Done()
				g.dispatch(ctx, es)
			}()
		}
		es.wake()
	}
	for id, es := range g.endpoints {
		if !seen[id] {
			for _, w := range es.workers {
				if w.tr != nil {
					w.tr.CloseIdleConnections()
				}
			}
			delete(g.endpoints, id)
			es.ep = nil
			es.wake()
		}
	}
	return nil
}

func (g *Gateway) closeAll() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, es := range g.endpoints {
		for _, w := range es.workers {
			if w.tr != nil {
				w.tr.CloseIdleConnections()
			}
		}
		es.wake()
	}
}

// wake closes es.changed and makes a new one; g.mu held.
func (es *endpoint) wake() {
	close(es.changed)
	es.changed = make(chan struct{})
}

// Wake tells the gateway that the endpoint has new jobs; where no worker
// has a free slot here, Config.Demand hears of it.
func (g *Gateway) Wake(endpointID string) {
	g.mu.Lock()
	es := g.endpoints[endpointID]
	short := es == nil || es.ep == nil || es.free() == 0
	if es != nil {
		es.wake()
	}
	g.mu.Unlock()
	if short {
		g.demand()
	}
}

// demand tells Config.Demand, if set, that work waits for a worker.
func (g *Gateway) demand() {
	if g.cfg.Demand != nil {
		g.cfg.Demand()
	}
}

// transport is a worker's connection pool: each connection is a TCP
// connection to the worker's port inside its container, relayed by its
// host's agent.
func (g *Gateway) transport(workerID string, concurrency int) *http.Transport {
	return &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			return g.dial(ctx, workerID, addr)
		},
		MaxIdleConnsPerHost: max(concurrency, 2),
		IdleConnTimeout:     60 * time.Second,
		ForceAttemptHTTP2:   false,
		// The worker's answer must start within the job's timeout (the
		// request's context bounds it).
		ResponseHeaderTimeout: 0,
	}
}

func (g *Gateway) dial(ctx context.Context, workerID, addr string) (net.Conn, error) {
	g.mu.Lock()
	var host string
	var port int
	for _, es := range g.endpoints {
		if w := es.workers[workerID]; w != nil {
			host, port = w.host, w.port
		}
	}
	g.mu.Unlock()
	if host == "" {
		return nil, &DialError{&cloud.Error{Code: cloud.Unavailable, Message: "worker " + workerID + " is not placed on a host"}}
	}
	_ = addr
	req := agentapi.SessionRequest{Kind: agentapi.SessionForward, Port: port, ID: service.NewID("gw-"), InstanceID: workerID, Actor: "gateway"}
	s, err := g.cfg.Hub.Open(ctx, host, req)
	if err != nil {
		return nil, &DialError{err}
	}
	cctx, cancel := context.WithCancel(context.Background())
	return newRelayConn(websocket.NetConn(cctx, s.Conn, websocket.MessageBinary), func() {
		cancel()
		s.Close(websocket.StatusNormalClosure, "")
	}), nil
}

// relayConn is a relayed connection whose Close ends its session once.
// It keeps the first error its reads met, so that a write that fails
// because the agent closed the session says why: a refusal before
// forwarding (the policy-violation status that Undelivered looks for)
// reaches the writer too, whichever of the two saw the close first.
type relayConn struct {
	net.Conn
	once     sync.Once
	end      func()
	readOnce sync.Once
	readErr  error
	readDone chan struct{}
}

// readErrWait bounds how long a failed write waits for the read side to
// report the close that failed it.
const readErrWait = 100 * time.Millisecond

func newRelayConn(c net.Conn, end func()) *relayConn {
	return &relayConn{Conn: c, end: end, readDone: make(chan struct{})}
}

func (c *relayConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil {
		c.readOnce.Do(func() { c.readErr = err; close(c.readDone) })
	}
	return n, err
}

func (c *relayConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if err == nil || !errors.Is(err, net.ErrClosed) {
		return n, err
	}
	t := time.NewTimer(readErrWait)
	defer t.Stop()
	select {
	case <-c.readDone:
		if websocket.CloseStatus(c.readErr) != -1 {
			return n, fmt.Errorf("%w (%w)", err, c.readErr)
		}
	case <-t.C:
	}
	return n, err
}

func (c *relayConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.end)
	return err
}

// probe asks w's health path until it answers 2xx (ready), w goes, or
// ctx ends.
func (g *Gateway) probe(ctx context.Context, es *endpoint, w *worker, path string) {
	defer func() {
		g.mu.Lock()
		w.probing = false
		g.mu.Unlock()
	}()
	url := "http://" + w.id + ".worker.invalid:" + strconv.Itoa(w.port) + path
	for ctx.Err() == nil {
		g.mu.Lock()
		gone := es.workers[w.id] != w || w.state != cloud.Running
		g.mu.Unlock()
		if gone {
			return
		}
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		req, _ := http.NewRequestWithContext(pctx, http.MethodGet, url, nil)
		resp, err := w.tr.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
		}
		cancel()
		if err == nil && resp.StatusCode/100 == 2 {
			g.mu.Lock()
			w.ready, w.readyAt = true, g.cfg.Now()
			if w.busy == 0 {
				w.idleSince = w.readyAt
			}
			es.wake()
			g.mu.Unlock()
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(probeEvery):
		}
	}
}

// load is the requests w runs: this replica's, and the other replicas'
// as they last published them (docs/ENDPOINTS.md, "Several replicas").
func (w *worker) load() int { return w.busy + w.remote }

// pick takes a slot of the best ready worker of es (the current
// generation first, then the least loaded across the replicas), or nil;
// g.mu held.
func (es *endpoint) pick() *worker {
	var best *worker
	gen := es.ep.Status.Generation
	for _, w := range es.workers {
		if !w.ready || w.load() >= max(es.ep.Spec.Concurrency, 1) {
			continue
		}
		if best == nil || (w.generation == gen) != (best.generation == gen) && w.generation == gen ||
			(w.generation == gen) == (best.generation == gen) && (w.load() < best.load() || w.load() == best.load() && w.id < best.id) {
			best = w
		}
	}
	// An outdated worker takes nothing once a current one is ready.
	if best != nil && best.generation != gen && es.hasReadyCurrent() {
		return nil
	}
	if best != nil {
		best.busy++
		es.inflight++
	}
	return best
}

func (es *endpoint) hasReadyCurrent() bool {
	for _, w := range es.workers {
		if w.ready && w.generation == es.ep.Status.Generation {
			return true
		}
	}
	return false
}

// free counts the free slots of es's ready workers; g.mu held.
func (es *endpoint) free() int {
	n := 0
	current := es.hasReadyCurrent()
	for _, w := range es.workers {
		if w.ready && (!current || w.generation == es.ep.Status.Generation) {
			n += max(max(es.ep.Spec.Concurrency, 1)-w.load(), 0)
		}
	}
	return n
}

// release gives w's slot back; failed marks it not ready (it is probed
// again); took is the request's time from arrival to answer.
func (g *Gateway) release(es *endpoint, w *worker, failed bool, took time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.cfg.Now()
	w.busy--
	es.inflight--
	if w.busy == 0 {
		w.idleSince = now
	}
	if failed {
		w.ready = false
	}
	if took > 0 {
		es.latencies = append(es.latencies, latency{now, took})
		if len(es.latencies) > maxLatencies {
			es.latencies = slices.Clone(es.latencies[len(es.latencies)-maxLatencies/2:])
		}
	}
	es.wake()
}
