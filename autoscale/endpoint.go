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
	// runs; IdleSince is when it last became idle (its launch when it
	// never ran anything).
	Ready      bool
	Busy       int
	IdleSince  time.Time
	LaunchedAt time.Time
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
)

// EndpointPlan is what the controller applies.
type EndpointPlan struct {
	// Launch lists the markets of the workers to launch.
	Launch []cloud.Market
	// Release lists the workers to terminate, with why.
	Release []WorkerRelease
	// Forget lists the terminated workers to drop from the status.
	Forget []string
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
	return len(p.Launch) == 0 && len(p.Release) == 0 && len(p.Forget) == 0 && !p.Deleted
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
//     one.
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

	var current []WorkerInput
	readyCurrent := 0
	for _, w := range in.Workers {
		switch {
		case w.Phase == WorkerGone || w.Phase == WorkerLeaving:
		case w.Phase == WorkerBroken:
			p.Release = append(p.Release, WorkerRelease{ID: w.ID, Reason: "the worker failed or was lost", Failed: true})
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
	live := len(current) + len(p.Launch)
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
