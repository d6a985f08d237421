package service

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/gpucloud/gpucloud/autoscale"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
)

// EndpointPlan is the endpoint controller's decision for one endpoint
// (autoscale.PlanEndpoint) with what it read: ApplyEndpointPlan applies
// it only to the endpoint still at Version.
type EndpointPlan struct {
	EndpointID string
	Version    int64
	autoscale.EndpointPlan
	// ColdStarts are workers' first readiness, recorded in the status.
	ColdStarts []cloud.ColdStart
	// Hosts, when not nil, replace the status's Hosts (MergeEndpointHosts
	// of the hosts its current workers run on).
	Hosts []string
}

// MaxColdStarts is how many cold starts an endpoint's status keeps.
const MaxColdStarts = 20

// EndpointLaunchBackoff is how long an endpoint launches nothing after a
// launch was refused (a quota, an offering gone); EndpointFailureBackoff
// the first wait after a round that released a failed worker, doubled
// each round in a row up to MaxEndpointFailureBackoff.
const (
	EndpointLaunchBackoff     = 10 * time.Second
	EndpointFailureBackoff    = 10 * time.Second
	MaxEndpointFailureBackoff = 10 * time.Minute
)

// ApplyEndpointPlan applies p in one transaction: the releases (each
// worker terminated through Act), the launches (each through
// CreateInstance, so quotas and validation apply as to any instance; the
// offering is the first of the spec's that fits now, by avail), the
// status (workers, desired count, cold starts) and an endpoint.scaling
// event when the desired count changes. A launch refused by a quota or
// the catalog stops the launches, is recorded in the status's reason and
// holds further launches for EndpointLaunchBackoff. An endpoint changed
// since the plan was made is left alone.
func ApplyEndpointPlan(ctx context.Context, st cloud.Store, cat *catalog.Catalog, actor Actor, p *EndpointPlan,
	avail map[string]cloud.OfferingAvailability, now time.Time) error {
	return st.Tx(ctx, func(tx cloud.Tx) error {
		e, err := tx.GetEndpoint(ctx, p.EndpointID)
		if err != nil {
			return err
		}
		if e.Version != p.Version {
			return nil
		}
		drop := map[string]bool{}
		for _, id := range p.Forget {
			drop[id] = true
		}
		st := &e.Status
		// A released worker stays in the status until it is seen
		// terminated (Forget): the endpoint is deleted only then.
		failed := ""
		for _, r := range p.Release {
			in, err := tx.GetInstance(ctx, r.ID)
			if cloud.IsNotFound(err) {
				drop[r.ID] = true
				continue
			}
			if err != nil {
				return err
			}
			if in.State == cloud.Terminated || in.State == cloud.Terminating {
				continue
			}
			if r.Failed && failed == "" {
				why := in.Reason
				if why == "" {
					why = "no reason recorded"
				}
				failed = fmt.Sprintf("worker %s (%s) %s: %s", in.Name, in.ID, in.State, why)
			}
			if _, err := Act(ctx, tx, actor, in, Terminate, "endpoint "+e.Name+": "+r.Reason, now); err != nil {
				return err
			}
		}
		st.Workers = slices.DeleteFunc(st.Workers, func(w cloud.WorkerRef) bool { return drop[w.ID] })
		if err := pauseWorkers(ctx, tx, actor, e, p, now); err != nil {
			return err
		}
		if p.Hosts != nil {
			st.Hosts = slices.Clone(p.Hosts)
		}
		if len(p.ColdStarts) > 0 {
			st.Failures = 0
		}
		if failed != "" && e.State == cloud.EndpointActive {
			// Workers that keep failing (a bad image or command, a crash
			// at start) are not relaunched in a tight loop.
			st.Failures++
			wait := min(EndpointFailureBackoff<<min(st.Failures-1, 16), MaxEndpointFailureBackoff)
			st.LaunchBlockedUntil = now.Add(wait)
			st.Reason = fmt.Sprintf("workers keep failing (%d rounds in a row); the next launch waits %s. The last: %s", st.Failures, wait, failed)
			if err := endpointEvent(ctx, tx, stamp(e, now), cloud.EventEndpointScaling, actor.ID, "endpoint "+e.Name+": "+st.Reason,
				map[string]any{"failures": st.Failures}); err != nil {
				return err
			}
		}
		for _, m := range p.Launch {
			if st.LaunchBlockedUntil.After(now) {
				break
			}
			seq := st.LaunchSeq + 1
			in, err := LaunchEndpointWorker(ctx, tx, cat, e, seq, m, pickOffering(e.Spec.Offerings, avail), actor.ID, now)
			var ce *cloud.Error
			if errors.As(err, &ce) && (ce.Code == cloud.QuotaExceeded || ce.Code == cloud.Invalid) {
				st.LaunchBlockedUntil = now.Add(EndpointLaunchBackoff)
				st.Reason = "a worker's launch was refused: " + ce.Message
				if err := endpointEvent(ctx, tx, stamp(e, now), cloud.EventEndpointScaling, actor.ID, "endpoint "+e.Name+": "+st.Reason,
					map[string]any{"code": ce.Code}); err != nil {
					return err
				}
				break
			}
			if err != nil {
				return err
			}
			st.LaunchSeq = seq
			st.Workers = append(st.Workers, cloud.WorkerRef{ID: in.ID, Generation: st.Generation, Market: in.Market, LaunchedAt: now})
		}
		if len(p.ColdStarts) > 0 {
			st.ColdStarts = append(st.ColdStarts, p.ColdStarts...)
			if n := len(st.ColdStarts); n > MaxColdStarts {
				st.ColdStarts = slices.Clone(st.ColdStarts[n-MaxColdStarts:])
			}
		}
		if p.Desired != st.Desired && !p.Deleted && e.State == cloud.EndpointActive {
			from := st.Desired
			st.Desired, st.LastScaleAt = p.Desired, now
			if !st.LaunchBlockedUntil.After(now) {
				st.Reason = p.Reason
			}
			if err := endpointEvent(ctx, tx, stamp(e, now), cloud.EventEndpointScaling, actor.ID,
				fmt.Sprintf("endpoint %s: %d → %d workers: %s", e.Name, from, p.Desired, p.Reason),
				map[string]any{"from": from, "to": p.Desired}); err != nil {
				return err
			}
		}
		if p.Deleted && e.State == cloud.EndpointDeleting {
			e.State = cloud.EndpointDeleted
			if err := endpointEvent(ctx, tx, stamp(e, now), cloud.EventEndpoint, actor.ID, "endpoint "+e.Name+" deleted: no worker is left", nil); err != nil {
				return err
			}
		}
		e.UpdatedAt = now
		return tx.UpdateEndpoint(ctx, e)
	})
}

// stamp sets e's update time to now (its events' time) and answers e.
func stamp(e *cloud.Endpoint, now time.Time) *cloud.Endpoint {
	e.UpdatedAt = now
	return e
}

// pickOffering is the first of offerings with room now, else the first
// some container host could ever run, else the first.
func pickOffering(offerings []string, avail map[string]cloud.OfferingAvailability) string {
	for _, o := range offerings {
		if a, ok := avail[o]; ok && a.FitsNow > 0 && a.Containers > 0 {
			return o
		}
	}
	for _, o := range offerings {
		if a, ok := avail[o]; ok && a.Containers > 0 {
			return o
		}
	}
	return offerings[0]
}

// EndpointWorkerKey is the idempotency key of launch seq of endpoint id.
func EndpointWorkerKey(id string, seq int64) string {
	return "endpoint:" + id + ":" + strconv.FormatInt(seq, 10)
}

// LaunchEndpointWorker creates, in tx, worker seq of e through
// CreateInstance: pending, named "<endpoint>-<seq>", the spec's image,
// command, environment (with GPUCLOUD_ENDPOINT and PORT added), shared
// volumes, zones and labels, the tags TagEndpoint, TagEndpointName and
// TagEndpointGeneration, its EndpointID (which bills it under the
// endpoint), market m, offering o, preferring the hosts where the
// endpoint's workers last ran (Status.Hosts: its image is there). A
// launch whose key was
// used answers the instance made then.
func LaunchEndpointWorker(ctx context.Context, tx cloud.Tx, cat *catalog.Catalog, e *cloud.Endpoint, seq int64, m cloud.Market, o, actor string, now time.Time) (*cloud.Instance, error) {
	key := EndpointWorkerKey(e.ID, seq)
	if old, err := tx.InstanceByKey(ctx, e.TenantID, key); err == nil {
		return old, nil
	} else if !cloud.IsNotFound(err) {
		return nil, err
	}
	env := maps.Clone(e.Spec.Env)
	if env == nil {
		env = map[string]string{}
	}
	env["GPUCLOUD_ENDPOINT"] = e.Name
	if _, ok := env["PORT"]; !ok {
		env["PORT"] = strconv.Itoa(e.Spec.Port)
	}
	name := e.Name
	suffix := "-" + strconv.FormatInt(seq, 10)
	if len(name)+len(suffix) > maxNameLen {
		name = name[:max(maxNameLen-len(suffix), 1)]
	}
	in := &cloud.Instance{TenantID: e.TenantID, Name: name + suffix, Offering: o, Image: e.Spec.Image, IdempotencyKey: key,
		PreferHosts: slices.Clone(e.Status.Hosts),
		Zones:       slices.Clone(e.Spec.Zones), Labels: slices.Clone(e.Spec.Labels), Command: slices.Clone(e.Spec.Command), Env: env, Volumes: slices.Clone(e.Spec.Volumes),
		Tags:   map[string]string{TagEndpoint: e.ID, TagEndpointName: e.Name, TagEndpointGeneration: strconv.FormatInt(e.Status.Generation, 10)},
		Market: m, EndpointID: e.ID, CreatedAt: now}
	reason := fmt.Sprintf("endpoint %s worker %d: %s %s", e.Name, seq, m, o)
	if err := CreateInstance(ctx, tx, cat, in, actor, reason); err != nil {
		var race *keyRace
		if errors.As(err, &race) {
			return nil, &cloud.Error{Code: cloud.Conflict, Message: "idempotency key " + Quote(key) + " was taken meanwhile by instance " + race.id}
		}
		return nil, err
	}
	return in, nil
}
