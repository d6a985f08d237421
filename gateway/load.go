package gateway

import (
	"slices"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
)

// Load is an endpoint's traffic on this replica, for the endpoint
// controller.
// Replicas publish it to each other in their registry records (JSON).
type Load struct {
	// Waiting counts HTTP requests waiting for a worker; InFlight the
	// HTTP requests and jobs a worker runs now.
	Waiting  int                   `json:"waiting,omitempty"`
	InFlight int                   `json:"in_flight,omitempty"`
	Workers  map[string]WorkerLoad `json:"workers,omitempty"`
}

// WorkerLoad is one worker as this replica sees it.
type WorkerLoad struct {
	Ready     bool      `json:"ready,omitempty"`
	Busy      int       `json:"busy,omitempty"`
	IdleSince time.Time `json:"idle_since"`
	// RunningAt is when this replica first saw it running, ReadyAt when
	// its readiness probe first answered (zero: not yet).
	RunningAt time.Time `json:"running_at"`
	ReadyAt   time.Time `json:"ready_at"`
}

// MergeLoads is the endpoints' load across replicas, from each
// replica's own (docs/ENDPOINTS.md, "Several replicas"): waiting and
// in-flight requests and each worker's busy slots add up; a worker is
// ready when any replica found it ready; it has been idle since the
// latest time any replica saw it go idle (and is idle only when busy
// nowhere); it was first seen running and ready at the earliest time any
// replica saw it. Pure: the inputs are not changed.
func MergeLoads(loads ...map[string]Load) map[string]Load {
	out := map[string]Load{}
	for _, m := range loads {
		for id, l := range m {
			o := out[id]
			o.Waiting += l.Waiting
			o.InFlight += l.InFlight
			for wid, w := range l.Workers {
				if o.Workers == nil {
					o.Workers = map[string]WorkerLoad{}
				}
				ow, seen := o.Workers[wid]
				if !seen {
					o.Workers[wid] = w
					continue
				}
				ow.Ready = ow.Ready || w.Ready
				ow.Busy += w.Busy
				if w.IdleSince.After(ow.IdleSince) {
					ow.IdleSince = w.IdleSince
				}
				ow.RunningAt = earliest(ow.RunningAt, w.RunningAt)
				ow.ReadyAt = earliest(ow.ReadyAt, w.ReadyAt)
				o.Workers[wid] = ow
			}
			out[id] = o
		}
	}
	return out
}

// earliest is the earlier of two times, zero meaning unknown.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || !b.IsZero() && b.Before(a) {
		return b
	}
	return a
}

// SetPeerLoads gives the gateway the other replicas' loads (as their
// registry records last published them): each worker's busy slots there
// count against its concurrency here (pick, and the queue's free slots),
// and Describe shows them. Waiters are woken: a slot freed elsewhere may
// be free now.
func (g *Gateway) SetPeerLoads(peers ...map[string]Load) {
	merged := MergeLoads(peers...)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.peers = merged
	for id, es := range g.endpoints {
		for wid, w := range es.workers {
			w.remote = merged[id].Workers[wid].Busy
		}
		es.wake()
	}
}

// Load answers the traffic of every endpoint this replica routes.
func (g *Gateway) Load() map[string]Load {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[string]Load, len(g.endpoints))
	for id, es := range g.endpoints {
		l := Load{Waiting: es.waiting, InFlight: es.inflight, Workers: make(map[string]WorkerLoad, len(es.workers))}
		for wid, w := range es.workers {
			l.Workers[wid] = WorkerLoad{Ready: w.ready, Busy: w.busy, IdleSince: w.idleSince, RunningAt: w.runningAt, ReadyAt: w.readyAt}
		}
		out[id] = l
	}
	return out
}

// Describe adds what this replica knows of endpoint d's workers (ready,
// busy, idle time, outdated), its in-flight requests and its latency
// over the last 10 minutes.
func (g *Gateway) Describe(d *api.EndpointDetail) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.cfg.Now()
	es := g.endpoints[d.ID]
	if es == nil {
		return
	}
	peer := g.peers[d.ID]
	d.InFlight = es.inflight + es.waiting + peer.InFlight + peer.Waiting
	for i := range d.Workers {
		w := es.workers[d.Workers[i].ID]
		if w == nil {
			continue
		}
		d.Workers[i].Ready, d.Workers[i].Busy = w.ready, w.load()
		if w.ready {
			t := w.readyAt
			d.Workers[i].ReadyAt = &t
			if w.load() == 0 {
				s := now.Sub(w.idleSince).Seconds()
				d.Workers[i].IdleFor = &s
			}
		}
	}
	var ds []time.Duration
	for _, l := range es.latencies {
		if now.Sub(l.at) <= latencyWindow {
			ds = append(ds, l.d)
		}
	}
	d.Latency = summarize(ds)
}

func summarize(ds []time.Duration) api.EndpointLatency {
	if len(ds) == 0 {
		return api.EndpointLatency{}
	}
	slices.Sort(ds)
	q := func(p float64) float64 {
		i := int(p*float64(len(ds))+0.5) - 1
		i = min(max(i, 0), len(ds)-1)
		return float64(ds[i].Microseconds()) / 1000
	}
	return api.EndpointLatency{Count: len(ds), P50: q(0.50), P95: q(0.95), P99: q(0.99)}
}

// Outdated reports whether worker ref runs an earlier generation of e.
func Outdated(e *cloud.Endpoint, ref cloud.WorkerRef) bool {
	return ref.Generation < e.Status.Generation
}

// Endpoint answers endpoint ref (an ID, or a name among a's tenant's) as
// the table holds it, when a may see it; ok is false when the table has
// no such endpoint that a sees, and the caller reads the store (which
// answers not_found for another tenant's, as for a missing one). The
// table is at most a refresh old: a request routed by it reads no row.
func (g *Gateway) Endpoint(a service.Actor, ref string) (*cloud.Endpoint, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if es := g.endpoints[ref]; es != nil && es.ep != nil {
		if a.Sees(es.ep.TenantID) {
			return es.ep, true
		}
		return nil, false
	}
	for _, es := range g.endpoints {
		if e := es.ep; e != nil && e.Name == ref && e.TenantID == a.TenantID && e.State != cloud.EndpointDeleted {
			return e, true
		}
	}
	return nil, false
}
