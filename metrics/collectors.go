package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/controller"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/money"
)

// QuoteSource is the spot market as the metrics read it: every pool's
// quote as of the last clearing, safe to call from the scrape's goroutine.
// *controller.Market implements it.
type QuoteSource interface {
	Quotes() map[cloud.Pool]controller.PoolQuote
}

// GPUSource is the scheduler's fleet as the metrics read it: the GPU usage
// of its last step, safe to call from the scrape's goroutine.
// *controller.Scheduler implements it.
type GPUSource interface {
	GPUUsage() []fleet.GPUCount
}

// PendingSource is the scheduler as the metrics read it: why the pending
// instances of its last step wait, safe to call from the scrape's
// goroutine. *controller.Scheduler implements it.
type PendingSource interface {
	PendingByReason() map[string]int
}

// WatchPending exposes the pending instances by reason at every scrape.
func (s *Registry) WatchPending(p PendingSource) { s.Registry.MustRegister(NewPendingCollector(p)) }

// WatchMarket exposes the spot market's quotes at every scrape.
func (s *Registry) WatchMarket(q QuoteSource) { s.Registry.MustRegister(NewMarketCollector(q)) }

// WatchFleet exposes the fleet's GPUs at every scrape.
func (s *Registry) WatchFleet(g GPUSource) { s.Registry.MustRegister(NewFleetCollector(g)) }

// WatchStore exposes the counts of instances and hosts at every scrape.
func (s *Registry) WatchStore(st cloud.Store) { s.Registry.MustRegister(NewStoreCollector(st)) }

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", name), help, labels, nil)
}

// dollars converts integer micro-dollars to dollars, only for exposition.
func dollars(m money.Micros) float64 { return float64(m) / 1e6 }

// MarketCollector exposes the spot market's quotes, per pool:
// gpucloud_spot_price_dollars_per_hour, gpucloud_on_demand_price_dollars_per_hour
// and gpucloud_pool_free_instances.
type MarketCollector struct {
	src                  QuoteSource
	spot, onDemand, free *prometheus.Desc
}

// NewMarketCollector reads q at every scrape.
func NewMarketCollector(q QuoteSource) *MarketCollector {
	return &MarketCollector{
		src: q,
		spot: desc("spot_price_dollars_per_hour",
			"Current spot price of an instance of the offering in the zone, in dollars per hour.", "offering", "zone"),
		onDemand: desc("on_demand_price_dollars_per_hour",
			"On-demand price of an instance of the offering in the zone, in dollars per hour.", "offering", "zone"),
		free: desc("pool_free_instances",
			"How many more instances of the offering fit in the zone now, as of the market's last clearing.", "offering", "zone"),
	}
}

func (c *MarketCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.spot
	ch <- c.onDemand
	ch <- c.free
}

func (c *MarketCollector) Collect(ch chan<- prometheus.Metric) {
	for p, q := range c.src.Quotes() {
		ch <- prometheus.MustNewConstMetric(c.spot, prometheus.GaugeValue, dollars(q.Spot), p.Offering, p.Zone)
		ch <- prometheus.MustNewConstMetric(c.onDemand, prometheus.GaugeValue, dollars(q.OnDemand), p.Offering, p.Zone)
		ch <- prometheus.MustNewConstMetric(c.free, prometheus.GaugeValue, float64(q.Free), p.Offering, p.Zone)
	}
}

// FleetCollector exposes the scheduler's fleet: gpucloud_gpus{model,mode,status}
// and, for GPUs in MIG mode, gpucloud_gpu_mig_slices{model,status}; status
// is allocated or free. Nothing before the fleet is built (a replica that
// does not lead has none).
type FleetCollector struct {
	src         GPUSource
	gpus, mslis *prometheus.Desc
}

// NewFleetCollector reads g at every scrape.
func NewFleetCollector(g GPUSource) *FleetCollector {
	return &FleetCollector{
		src: g,
		gpus: desc("gpus",
			"GPUs of the fleet by model, mode (whole, shared: time-sliced, mig) and status (allocated: something is rented on it, free).",
			"model", "mode", "status"),
		mslis: desc("gpu_mig_slices",
			"MIG compute slices of the GPUs in MIG mode, by model and status (allocated, free).", "model", "status"),
	}
}

func (c *FleetCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.gpus
	ch <- c.mslis
}

func (c *FleetCollector) Collect(ch chan<- prometheus.Metric) {
	usage := c.src.GPUUsage()
	if usage == nil {
		return
	}
	type key struct{ model, mode, status string }
	gpus := map[key]int{}
	slices := map[key]int{}
	for _, u := range usage {
		gpus[key{u.Model, u.Mode, status(u.Allocated)}] += u.GPUs
		if u.Mode == fleet.ModeMIG {
			slices[key{u.Model, "", "allocated"}] += u.SlicesUsed
			slices[key{u.Model, "", "free"}] += u.SlicesFree
		}
	}
	// Both statuses of every model and mode that exists, so that a ratio
	// never divides by a missing series.
	kinds := map[key]bool{}
	for k := range gpus {
		kinds[key{k.model, k.mode, ""}] = true
	}
	for k := range kinds {
		for _, st := range []string{"allocated", "free"} {
			k.status = st
			ch <- prometheus.MustNewConstMetric(c.gpus, prometheus.GaugeValue, float64(gpus[k]), k.model, k.mode, k.status)
		}
	}
	for k, n := range slices {
		ch <- prometheus.MustNewConstMetric(c.mslis, prometheus.GaugeValue, float64(n), k.model, k.status)
	}
}

// PendingCollector exposes gpucloud_instances_pending{reason}: the pending
// instances the scheduler's last step could not place, by why, over the
// bounded set controller.PendingReasons (every reason, 0 included; a
// reason outside it counts as "other"). Nothing before the first step (a
// replica that does not lead has none).
type PendingCollector struct {
	src     PendingSource
	pending *prometheus.Desc
}

// NewPendingCollector reads p at every scrape.
func NewPendingCollector(p PendingSource) *PendingCollector {
	return &PendingCollector{src: p, pending: desc("instances_pending",
		"Pending instances the scheduler's last step could not place, by reason: the placement engine's check that the hosts closest to taking it failed (gpus, mig_slot, gpu_model...), spot_price (above the max price in every zone), no_hosts, other.",
		"reason")}
}

func (c *PendingCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.pending }

func (c *PendingCollector) Collect(ch chan<- prometheus.Metric) {
	by := c.src.PendingByReason()
	if by == nil {
		return
	}
	reasons := controller.PendingReasons()
	counts := make(map[string]int, len(reasons))
	for _, r := range reasons {
		counts[r] = 0
	}
	for r, n := range by {
		if _, ok := counts[r]; !ok {
			r = controller.PendingOther
		}
		counts[r] += n
	}
	for r, n := range counts {
		ch <- prometheus.MustNewConstMetric(c.pending, prometheus.GaugeValue, float64(n), r)
	}
}

func status(allocated bool) string {
	if allocated {
		return "allocated"
	}
	return "free"
}

// ScrapeTimeout bounds the store queries of one scrape.
const ScrapeTimeout = 10 * time.Second

// StoreCollector exposes the counts of the store's objects, in the style
// of kube-state-metrics: gpucloud_instances{state,offering,market,tenant}
// and gpucloud_hosts{state} (every host state, 0 included). One
// transaction with one aggregate query each per scrape.
type StoreCollector struct {
	store            cloud.Store
	instances, hosts *prometheus.Desc
}

// NewStoreCollector reads st at every scrape.
func NewStoreCollector(st cloud.Store) *StoreCollector {
	return &StoreCollector{
		store: st,
		instances: desc("instances", "Instances by state, offering, market (on_demand, spot) and tenant.",
			"state", "offering", "market", "tenant"),
		hosts: desc("hosts", "Hosts by state (schedulable, cordoned, unhealthy).", "state"),
	}
}

func (c *StoreCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.instances
	ch <- c.hosts
}

func (c *StoreCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), ScrapeTimeout)
	defer cancel()
	var (
		instances []cloud.InstanceCount
		hosts     []cloud.HostCount
	)
	err := c.store.Tx(ctx, func(tx cloud.Tx) error {
		var err error
		if instances, err = tx.CountInstances(ctx); err != nil {
			return err
		}
		hosts, err = tx.CountHosts(ctx)
		return err
	})
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.instances, err)
		return
	}
	for _, n := range instances {
		ch <- prometheus.MustNewConstMetric(c.instances, prometheus.GaugeValue, float64(n.Count),
			string(n.State), n.Offering, string(n.Market), n.TenantID)
	}
	byState := map[fleet.HostState]int{fleet.Schedulable: 0, fleet.Cordoned: 0, fleet.Unhealthy: 0}
	for _, h := range hosts {
		byState[h.State] += h.Count
	}
	for st, n := range byState {
		ch <- prometheus.MustNewConstMetric(c.hosts, prometheus.GaugeValue, float64(n), string(st))
	}
}
