package autoscale

import (
	"fmt"
	"slices"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
)

// Serverless endpoints (docs/ENDPOINTS.md) size their workers from their
// own load, every controller tick: PlanEndpoint is that decision, pure.

// EndpointInput is one endpoint's state as the controller sees it.
type EndpointInput struct {
	Min, Max    int
	Concurrency int
	// Warm is the pool of paused workers the endpoint keeps beside those
	// the load asks for (0: none): created, made ready, then paused, so
	// that a request resumes one rather than waiting for a cold start.
	// The pool lives within Max (running and paused together are at most
	// Max) and outside Min (Min counts running workers).
	Warm        int
	IdleTimeout time.Duration
	// SpotFallback is how long a spot worker may stay unplaced before an
	// on-demand one replaces it (0: never).
	SpotFallback time.Duration
	Spot         bool
	// Deleting: every worker goes.
	Deleting bool
	// Queued counts the jobs and HTTP requests waiting for a worker;
	// InFlight those a worker runs now.
	Queued, InFlight int
	Workers          []WorkerInput
	Now              time.Time
}

// WorkerInput is one worker.
type WorkerInput struct {
	ID string
	// Outdated: launched at an earlier generation of the spec.
	Outdated bool
	Phase    WorkerPhase
	Market   cloud.Market
	// Ready: its readiness probe answered; Busy counts the requests it
	// runs; IdleSince is when it last became idle (its launch, or its
	// readiness, when it never ran anything); ReadyAt is when it last
	// became ready (zero: never). A worker idle since no later than its
	// launch or readiness never served.
	Ready      bool
	Busy       int
	IdleSince  time.Time
	LaunchedAt time.Time
	ReadyAt    time.Time
}

// neverServed reports whether w has run nothing since it was launched or
// last became ready.
func (w WorkerInput) neverServed() bool {
	return !w.IdleSince.After(w.LaunchedAt) || !w.ReadyAt.IsZero() && !w.IdleSince.After(w.ReadyAt)
}

// WorkerPhase is a worker's instance as the planner needs it.
type WorkerPhase int

const (
	// WorkerStarting: pending, scheduled or starting.
	WorkerStarting WorkerPhase = iota
	// WorkerRunning: running.
	WorkerRunning
	// WorkerBroken: failed, stopped, lost, or going away: it serves
	// nothing again, and is released.
	WorkerBroken
	// WorkerGone: terminated; the endpoint forgets it.
	WorkerGone
	// WorkerLeaving: terminating or stopping: it serves nothing, and is
	// already on its way out.
	WorkerLeaving
	// WorkerPaused: paused, in the endpoint's warm pool: it serves
	// nothing until resumed.
	WorkerPaused
)

// EndpointPlan is what the controller applies.
type EndpointPlan struct {
	// Launch lists the markets of the workers to launch.
	Launch []cloud.Market
	// Release lists the workers to terminate, with why.
	Release []WorkerRelease
	// Forget lists the terminated workers to drop from the status.
	Forget []string
	// Pause lists the idle running workers to pause into the warm pool;
	// Resume the paused ones to run again, for load that has no ready
	// worker (a resume comes before any launch).
	Pause, Resume []string
	// Desired is the worker count the load asks for (within min and
	// max), Reason the decision in words.
	Desired int
	Reason  string
	// Deleted: the endpoint is deleting and has no worker left (every
	// one terminated).
	Deleted bool
}

// WorkerRelease is one worker to terminate; Failed: it failed or was
// lost (the endpoint backs off its launches).
type WorkerRelease struct {
	ID, Reason string
	Failed     bool
}

// Empty reports whether the plan changes nothing but, perhaps, the
// desired count.
func (p *EndpointPlan) Empty() bool {
	return len(p.Launch) == 0 && len(p.Release) == 0 && len(p.Forget) == 0 && len(p.Pause) == 0 && len(p.Resume) == 0 && !p.Deleted
}

// WarmPool is the warm pool's size at load in: Warm, within what Max leaves
// beside the running workers the load wants.
func WarmPool(in *EndpointInput) int {
	return max(0, min(in.Warm, in.Max-Wanted(in)))
}

// Wanted is the worker count a load asks for: ceil((queued + in flight) /
// concurrency), within min and max.
func Wanted(in *EndpointInput) int {
	c := max(in.Concurrency, 1)
	n := (in.Queued + in.InFlight + c - 1) / c
	return min(max(n, in.Min), in.Max)
}

// PlanEndpoint decides one endpoint's launches and releases:
//   - the workers the load asks for (Wanted) are kept: a shortfall of
//     current-generation workers that are starting or running is
//     launched at once (the first request to an endpoint at zero starts
//     a worker on the next tick);
//   - a broken worker is released (and so replaced, if still wanted);
//   - workers beyond the wanted count go once idle for the idle timeout,
//     those that never became ready first, then the longest idle; a busy
//     worker is never released;
//   - an outdated worker goes as soon as it is idle and either nothing is
//     wanted or a current worker is ready to take its place;
//   - a spot worker unplaced for SpotFallback is replaced by an on-demand
//     one;
//   - the warm pool (WarmPool: Warm paused workers, within Max beside the
//     wanted running ones): a shortfall of running workers resumes paused
//     ones before it launches any; a surplus running worker, ready and
//     idle, is paused while the pool is short (one that never served at
//     once, one that did once idle for the idle timeout, when it would
//     otherwise go), and one is
//     launched to refill the pool when no surplus worker will do; a
//     surplus of paused workers (Warm lowered, load up to Max) goes, and
//     an outdated paused worker goes at once; a paused worker found busy
//     (the gateway sent it work just before it saw the pause) is resumed.
func PlanEndpoint(in *EndpointInput) EndpointPlan {
	var p EndpointPlan
	for _, w := range in.Workers {
		if w.Phase == WorkerGone {
			p.Forget = append(p.Forget, w.ID)
		}
	}
	if in.Deleting {
		leaving := 0
		for _, w := range in.Workers {
			switch w.Phase {
			case WorkerGone:
			case WorkerLeaving:
				leaving++
			default:
				p.Release = append(p.Release, WorkerRelease{ID: w.ID, Reason: "the endpoint is deleted"})
			}
		}
		p.Deleted = len(p.Release) == 0 && leaving == 0
		p.Reason = "deleting"
		return p
	}
	want := Wanted(in)
	p.Desired = want
	p.Reason = fmt.Sprintf("%d queued and %d in flight at concurrency %d ask for %d (min %d, max %d)",
		in.Queued, in.InFlight, max(in.Concurrency, 1), want, in.Min, in.Max)

	var current, paused []WorkerInput
	readyCurrent := 0
	for _, w := range in.Workers {
		switch {
		case w.Phase == WorkerGone || w.Phase == WorkerLeaving:
		case w.Phase == WorkerBroken:
			p.Release = append(p.Release, WorkerRelease{ID: w.ID, Reason: "the worker failed or was lost", Failed: true})
		case w.Phase == WorkerPaused && w.Busy > 0:
			// The gateway sent it work just before it saw the pause: it
			// runs again, so that the work ends (an outdated one then
			// goes once idle, as any outdated worker).
			p.Resume = append(p.Resume, w.ID)
			if !w.Outdated {
				w.Phase = WorkerRunning
				current = append(current, w)
			}
		case w.Phase == WorkerPaused && w.Outdated:
			p.Release = append(p.Release, WorkerRelease{ID: w.ID, Reason: "a paused worker of an earlier spec"})
		case w.Phase == WorkerPaused:
			paused = append(paused, w)
		case w.Outdated:
		default:
			if in.Spot && in.SpotFallback > 0 && w.Market == cloud.MarketSpot && w.Phase == WorkerStarting &&
				!in.Now.Before(w.LaunchedAt.Add(in.SpotFallback)) {
				p.Release = append(p.Release, WorkerRelease{ID: w.ID, Reason: fmt.Sprintf("no spot capacity placed it in %s; an on-demand worker replaces it", in.SpotFallback)})
				p.Launch = append(p.Launch, cloud.MarketOnDemand)
				continue
			}
			current = append(current, w)
			if w.Ready {
				readyCurrent++
			}
		}
	}
	// Resume paused workers for a shortfall before launching any.
	resume := min(len(paused), max(0, want-len(current)-len(p.Launch)))
	for _, w := range paused[:resume] {
		p.Resume = append(p.Resume, w.ID)
	}
	paused = paused[resume:]
	live := len(current) + resume + len(p.Launch)
	for ; live < want; live++ {
		m := cloud.MarketOnDemand
		if in.Spot {
			m = cloud.MarketSpot
		}
		p.Launch = append(p.Launch, m)
	}
	for _, w := range in.Workers {
		if w.Outdated && (w.Phase == WorkerStarting || w.Phase == WorkerRunning) && w.Busy == 0 && (want == 0 || readyCurrent > 0) {
			p.Release = append(p.Release, WorkerRelease{ID: w.ID, Reason: "it runs an earlier spec, and a current worker took its place"})
		}
	}
	surplus := live - max(want, in.Min)
	short := WarmPool(in) - len(paused)
	if short < 0 {
		// More paused workers than the pool holds: the excess goes.
		for _, w := range paused[len(paused)+short:] {
			p.Release = append(p.Release, WorkerRelease{ID: w.ID, Reason: fmt.Sprintf("the warm pool keeps %d", WarmPool(in))})
		}
		short = 0
	}
	if short > 0 && surplus > 0 {
		// Surplus workers, ready and idle, fill the pool: one launched
		// for it (it never served) at once, one that served once it would
		// go for its idle timeout.
		pausable := slices.DeleteFunc(slices.Clone(current), func(w WorkerInput) bool {
			fresh := w.neverServed()
			return w.Phase != WorkerRunning || !w.Ready || w.Busy > 0 || !fresh && in.Now.Sub(w.IdleSince) < in.IdleTimeout
		})
		slices.SortStableFunc(pausable, func(a, b WorkerInput) int { return a.IdleSince.Compare(b.IdleSince) })
		for _, w := range pausable[:min(short, surplus, len(pausable))] {
			p.Pause = append(p.Pause, w.ID)
			current = slices.DeleteFunc(current, func(c WorkerInput) bool { return c.ID == w.ID })
			short--
			surplus--
		}
	}
	// The surplus left is kept for the pool (it is paused once idle) as
	// far as the pool is short; what the pool still lacks is launched.
	keep := min(short, max(surplus, 0))
	for range short - keep {
		p.Launch = append(p.Launch, cloud.MarketOnDemand)
		if in.Spot {
			p.Launch[len(p.Launch)-1] = cloud.MarketSpot
		}
	}
	surplus -= keep
	if surplus <= 0 {
		return p
	}
	idle := slices.DeleteFunc(slices.Clone(current), func(w WorkerInput) bool {
		return w.Busy > 0 || in.Now.Sub(w.IdleSince) < in.IdleTimeout
	})
	slices.SortStableFunc(idle, func(a, b WorkerInput) int {
		if a.Ready != b.Ready {
			if !a.Ready {
				return -1
			}
			return 1
		}
		return a.IdleSince.Compare(b.IdleSince)
	})
	for _, w := range idle[:min(surplus, len(idle))] {
		p.Release = append(p.Release, WorkerRelease{ID: w.ID, Reason: fmt.Sprintf("idle for %s (idle timeout %s)",
			in.Now.Sub(w.IdleSince).Round(time.Second), in.IdleTimeout)})
	}
	return p
}
