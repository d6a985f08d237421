package service

import (
	"context"
	"slices"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
)

// Warm pools and host preference (docs/ENDPOINTS.md, "Cold starts"): an
// endpoint keeps up to Spec.Warm paused workers, and a new worker prefers
// the hosts where the endpoint's workers last ran (Status.Hosts).

// MaxEndpointHosts is how many hosts an endpoint's status remembers.
const MaxEndpointHosts = 4

// checkWarm checks the warm pool's size against max.
func checkWarm(s *cloud.EndpointSpec) error {
	if s.Warm < 0 || s.Warm > s.Max {
		return Field("warm", "%d paused workers: want 0 to max (%d); paused workers count toward max", s.Warm, s.Max)
	}
	return nil
}

// pausesSomewhere refuses a warm pool when none of the spec's offerings
// has a host that can pause a worker. Pausing freezes a container
// (containerd's task pause), so the hosts that can are those that run
// containers (OfferingAvailability.Containers); a host of the process
// runtime cannot. A fleet that has reported nothing yet is not refused.
func (s *Endpoints) pausesSomewhere(spec *cloud.EndpointSpec) error {
	if spec.Warm == 0 {
		return nil
	}
	av := s.Availability()
	if av == nil {
		return nil
	}
	known := false
	for _, o := range spec.Offerings {
		a, ok := av[o]
		if ok && a.Containers > 0 {
			return nil
		}
		known = known || ok && a.Hosts > 0
	}
	if !known {
		return nil
	}
	return &cloud.Error{Code: cloud.Unavailable, Details: map[string]any{"field": "warm"},
		Message: "warm: no host that runs these offerings can pause a worker (only hosts of the containerd runtime pause containers): set warm to 0 or add such a host"}
}

// MergeEndpointHosts puts the hosts running now first, then the earlier
// ones, without repeats, at most MaxEndpointHosts: the endpoint's
// Status.Hosts after a round that saw workers running on running.
func MergeEndpointHosts(earlier, running []string) []string {
	out := make([]string, 0, MaxEndpointHosts)
	for _, h := range slices.Concat(running, earlier) {
		if h != "" && !slices.Contains(out, h) && len(out) < MaxEndpointHosts {
			out = append(out, h)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// pauseWorkers makes p's pauses and resumes in tx: a worker still running
// goes to paused (the agent freezes its container), one still paused back
// to running (the agent thaws it; the gateway probes it again). A worker
// that moved on since the plan (released, failed, already resumed) is
// left alone. The resumes come first: they serve load.
func pauseWorkers(ctx context.Context, tx cloud.Tx, actor Actor, e *cloud.Endpoint, p *EndpointPlan, now time.Time) error {
	for _, step := range []struct {
		ids      []string
		from, to cloud.State
		why      string
	}{
		{p.Resume, cloud.Paused, cloud.Running, "resumed from the warm pool for load"},
		{p.Pause, cloud.Running, cloud.Paused, "paused into the warm pool"},
	} {
		for _, id := range step.ids {
			in, err := tx.GetInstance(ctx, id)
			if cloud.IsNotFound(err) {
				continue
			}
			if err != nil {
				return err
			}
			if in.State != step.from || in.Tags[TagEndpoint] != e.ID {
				continue
			}
			if err := MoveInstance(ctx, tx, in, Move{To: step.to, Reason: "endpoint " + e.Name + ": " + step.why, Actor: actor.ID}, now); err != nil {
				return err
			}
		}
	}
	return nil
}
