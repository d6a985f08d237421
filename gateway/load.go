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
type Load struct {
	// Waiting counts HTTP requests waiting for a worker; InFlight the
	// HTTP requests and jobs a worker runs now.
	Waiting, InFlight int
	Workers           map[string]WorkerLoad
}

// WorkerLoad is one worker as this replica sees it.
type WorkerLoad struct {
	Ready     bool
	Busy      int
	IdleSince time.Time
	// RunningAt is when this replica first saw it running, ReadyAt when
	// its readiness probe first answered (zero: not yet).
	RunningAt, ReadyAt time.Time
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
	d.InFlight = es.inflight + es.waiting
	for i := range d.Workers {
		w := es.workers[d.Workers[i].ID]
		if w == nil {
			continue
		}
		d.Workers[i].Ready, d.Workers[i].Busy = w.ready, w.busy
		if w.ready {
			t := w.readyAt
			d.Workers[i].ReadyAt = &t
			if w.busy == 0 {
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
