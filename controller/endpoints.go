package controller

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/gpucloud/gpucloud/autoscale"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
)

// DefaultEndpointSpotFallback is how long a spot worker may wait for
// placement before an on-demand worker replaces it.
const DefaultEndpointSpotFallback = 15 * time.Second

// endpointExpiry is how often finished jobs past their retention are
// removed, and at most how many per round.
const (
	endpointExpiry      = time.Minute
	endpointExpiryBatch = 1000
)

// EndpointLoad is an endpoint's traffic on the leader's gateway
// (gateway.Gateway.Load, converted by the composition root).
type EndpointLoad struct {
	Waiting, InFlight int
	Workers           map[string]EndpointWorkerLoad
}

// EndpointWorkerLoad is one worker as the gateway sees it.
type EndpointWorkerLoad struct {
	Ready              bool
	Busy               int
	IdleSince          time.Time
	RunningAt, ReadyAt time.Time
}

// Endpoints sizes serverless endpoints (docs/ENDPOINTS.md) every tick: it
// reads the live endpoints, their jobs' counts, their workers' instances
// and the gateway's load, plans each with autoscale.PlanEndpoint, and
// hands each non-empty plan to service.ApplyEndpointPlan. A first request
// to an endpoint at zero is seen at the next tick (the scheduler, after
// it in the list, places the launch in the same tick).
type Endpoints struct {
	Store   cloud.Store
	Catalog *catalog.Catalog
	// Load is the gateway's traffic by endpoint ID (nil: none).
	Load func() map[string]EndpointLoad
	// Availability is the scheduler's view of each offering (nil:
	// unknown; the first offering is launched).
	Availability func() map[string]cloud.OfferingAvailability
	Now          func() time.Time
	Log          *slog.Logger
	// Every is the round's interval (every tick when zero).
	Every time.Duration
	// SpotFallback: DefaultEndpointSpotFallback when zero.
	SpotFallback time.Duration

	// Applied, when set, is called after a plan that resumed or launched
	// workers was applied: the server reads its gateway's worker table
	// again at once (gateway.Gateway.RefreshNow).
	Applied func()

	lastExpiry time.Time
	// recorded holds the workers whose cold start is in a status.
	recorded map[string]bool
}

// Name is the controller's name.
func (c *Endpoints) Name() string { return "endpoints" }

// Interval is how often the leader runs a round.
func (c *Endpoints) Interval() time.Duration { return c.Every }

// Kickable: a request that finds no ready worker kicks the loop
// (Loop.Kick), and the controller resumes or launches one at once.
func (c *Endpoints) Kickable() bool { return true }

var endpointActor = service.Controller("endpoints")

// Reconcile runs one round.
func (c *Endpoints) Reconcile(ctx context.Context) error {
	now := orNow(c.Now)()
	var eps []*cloud.Endpoint
	var counts map[string]cloud.JobCounts
	ins := map[string]*cloud.Instance{}
	err := c.Store.Tx(ctx, func(tx cloud.Tx) error {
		var err error
		if eps, err = tx.ListEndpoints(ctx, "", cloud.EndpointActive, cloud.EndpointDeleting); err != nil || len(eps) == 0 {
			return err
		}
		if counts, err = tx.CountJobs(ctx); err != nil {
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
		for _, in := range list {
			ins[in.ID] = in
		}
		return err
	})
	if err != nil {
		return err
	}
	var loads map[string]EndpointLoad
	if c.Load != nil {
		loads = c.Load()
	}
	var avail map[string]cloud.OfferingAvailability
	if c.Availability != nil {
		avail = c.Availability()
	}
	if c.recorded == nil {
		c.recorded = map[string]bool{}
	}
	var errs []error
	for _, e := range eps {
		p := c.plan(e, counts[e.ID], loads[e.ID], ins, now)
		if p.Empty() && len(p.ColdStarts) == 0 && p.Desired == e.Status.Desired && p.Hosts == nil {
			continue
		}
		if len(p.ColdStarts) > 0 {
			if err := c.coldStartSteps(ctx, p.ColdStarts); err != nil {
				errs = append(errs, err)
			}
		}
		if err := service.ApplyEndpointPlan(ctx, c.Store, c.Catalog, endpointActor, p, avail, now); err != nil {
			errs = append(errs, err)
			continue
		}
		if c.Applied != nil && (len(p.Resume) > 0 || len(p.Launch) > 0) {
			c.Applied()
		}
		for _, cs := range p.ColdStarts {
			c.recorded[cs.Worker] = true
		}
	}
	// Forget the workers no endpoint holds any more: the set stays the
	// size of the live workers, however long the leader runs.
	live := make(map[string]bool, len(ins))
	for _, e := range eps {
		for _, w := range e.Status.Workers {
			live[w.ID] = true
		}
	}
	for id := range c.recorded {
		if !live[id] {
			delete(c.recorded, id)
		}
	}
	if now.Sub(c.lastExpiry) >= endpointExpiry {
		c.lastExpiry = now
		if _, err := service.ExpireJobs(ctx, c.Store, now, endpointExpiryBatch); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// plan is one endpoint's decision over what the round read.
func (c *Endpoints) plan(e *cloud.Endpoint, jobs cloud.JobCounts, load EndpointLoad, ins map[string]*cloud.Instance, now time.Time) *service.EndpointPlan {
	in := autoscale.EndpointInput{Min: e.Spec.Min, Max: e.Spec.Max, Warm: e.Spec.Warm, Concurrency: e.Spec.Concurrency,
		IdleTimeout: time.Duration(e.Spec.IdleTimeoutSeconds) * time.Second, Spot: e.Spec.Spot,
		SpotFallback: c.SpotFallback, Deleting: e.State == cloud.EndpointDeleting, Now: now}
	if in.SpotFallback <= 0 {
		in.SpotFallback = DefaultEndpointSpotFallback
	}
	if e.Spec.Mode == cloud.EndpointQueue {
		in.Queued, in.InFlight = jobs.Queued, jobs.Running
	} else {
		in.Queued, in.InFlight = load.Waiting, load.InFlight
	}
	p := &service.EndpointPlan{EndpointID: e.ID, Version: e.Version}
	var ranOn []string
	for _, ref := range e.Status.Workers {
		w := autoscale.WorkerInput{ID: ref.ID, Outdated: ref.Generation < e.Status.Generation, Market: ref.Market,
			LaunchedAt: ref.LaunchedAt, IdleSince: ref.LaunchedAt}
		inst := ins[ref.ID]
		switch {
		case inst == nil || inst.State == cloud.Terminated:
			w.Phase = autoscale.WorkerGone
		case inst.State == cloud.Running:
			w.Phase = autoscale.WorkerRunning
		case inst.State == cloud.Paused:
			w.Phase = autoscale.WorkerPaused
		case inst.State == cloud.Pending || inst.State == cloud.Scheduled || inst.State == cloud.Starting:
			w.Phase = autoscale.WorkerStarting
		case inst.State == cloud.Terminating || inst.State == cloud.Stopping:
			w.Phase = autoscale.WorkerLeaving
		default:
			w.Phase = autoscale.WorkerBroken
		}
		if wl, ok := load.Workers[ref.ID]; ok {
			w.Ready, w.Busy, w.ReadyAt = wl.Ready, wl.Busy, wl.ReadyAt
			if !wl.IdleSince.IsZero() {
				w.IdleSince = wl.IdleSince
			}
			if !wl.ReadyAt.IsZero() && !c.recorded[ref.ID] && !recordedIn(e, ref.ID) {
				cs := cloud.ColdStart{Worker: ref.ID, LaunchedAt: ref.LaunchedAt, ReadyMillis: wl.ReadyAt.Sub(ref.LaunchedAt).Milliseconds()}
				if !wl.RunningAt.IsZero() {
					cs.RunningMillis = wl.RunningAt.Sub(ref.LaunchedAt).Milliseconds()
				}
				p.ColdStarts = append(p.ColdStarts, cs)
			}
		}
		if inst != nil && !w.Outdated && (inst.State == cloud.Running || inst.State == cloud.Paused) && inst.HostID != "" {
			ranOn = append(ranOn, inst.HostID)
		}
		in.Workers = append(in.Workers, w)
	}
	// The hosts the current workers run on are where the next one is
	// best started: its image is there.
	if hosts := service.MergeEndpointHosts(e.Status.Hosts, ranOn); !slices.Equal(hosts, e.Status.Hosts) {
		p.Hosts = hosts
	}
	p.EndpointPlan = autoscale.PlanEndpoint(&in)
	if e.Status.LaunchBlockedUntil.After(now) {
		p.Launch = nil
	}
	if len(p.Launch) > 0 {
		c.log().Debug("endpoint scales", "endpoint", e.ID, "launch", len(p.Launch), "release", len(p.Release), "reason", p.Reason)
	}
	return p
}

func recordedIn(e *cloud.Endpoint, worker string) bool {
	for _, cs := range e.Status.ColdStarts {
		if cs.Worker == worker {
			return true
		}
	}
	return false
}

func (c *Endpoints) log() *slog.Logger {
	if c.Log == nil {
		return slog.Default()
	}
	return c.Log
}

// coldStartSteps fills in the placement and agent steps of new cold-start
// records from their workers' state events (one read per worker, once in
// its life): when each was scheduled and starting, from its launch.
func (c *Endpoints) coldStartSteps(ctx context.Context, cs []cloud.ColdStart) error {
	return c.Store.Tx(ctx, func(tx cloud.Tx) error {
		for i := range cs {
			evs, err := tx.ListEvents(ctx, cloud.EventFilter{InstanceID: cs[i].Worker, Kinds: []cloud.EventKind{cloud.EventInstanceState},
				Since: cs[i].LaunchedAt, Limit: 20})
			if err != nil {
				return err
			}
			ColdStartSteps(&cs[i], evs)
		}
		return nil
	})
}

// ColdStartSteps sets cs's Scheduled and Starting from the first state
// events into those states among evs (those of its worker), and its
// Image from the details of the first move to running; where those give
// the start's length (start_ms), Starting is the running event's time
// less it (the agent's reports go after its start, so the starting
// event's time is when the report came, not when the start began).
func ColdStartSteps(cs *cloud.ColdStart, evs []*cloud.Event) {
	running, agentAt := false, int64(0)
	for _, ev := range evs {
		if ev.InstanceID != cs.Worker || ev.Kind != cloud.EventInstanceState {
			continue
		}
		ms := max(ev.Time.Sub(cs.LaunchedAt).Milliseconds(), 0)
		switch {
		case ev.To == cloud.Scheduled && cs.ScheduledMillis == 0:
			cs.ScheduledMillis = max(ms, 1)
		case ev.To == cloud.Starting && cs.StartingMillis == 0:
			cs.StartingMillis = max(ms, 1)
		case ev.To == cloud.Running && !running && len(ev.Details) > 0:
			running = true
			var d service.RunningDetails
			if json.Unmarshal(ev.Details, &d) != nil {
				continue
			}
			cs.ImageMillis = max(d.ImageMillis, 0)
			if d.StartMillis > 0 {
				// The agent sends its reports after the start, so the
				// starting event's time is the report's; the start
				// began the start's own length before running.
				agentAt = max(ms-d.StartMillis, 1)
			}
		}
	}
	if agentAt > 0 {
		cs.StartingMillis = max(agentAt, cs.ScheduledMillis)
	}
}
