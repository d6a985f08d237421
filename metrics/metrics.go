// Package metrics is the control plane's Prometheus instrumentation: the
// server's registry, its collectors, and the /metrics handler.
//
// Names follow the Prometheus conventions: the prefix gpucloud_, base
// units (seconds, dollars), _total on counters. Three kinds of series:
//
//   - events counted as they happen: HTTP requests (Instrument), the
//     controllers' rounds (ObserveStep), the scheduler's placements
//     (AddPlacements), spot reclaims (AddReclaims), relaunches
//     (AddRelaunches) and the market's clearings (ObserveClearing), fed by
//     hooks so that the packages they measure do not import this one or
//     Prometheus;
//   - the spot market's quotes (WatchMarket), the fleet's GPUs
//     (WatchFleet) and the pending instances by reason (WatchPending),
//     read from the controllers' published snapshots at scrape;
//   - object counts in the style of kube-state-metrics (WatchStore):
//     instances and hosts, one aggregate query each at scrape, never the
//     rows;
//   - the amount each tenant accrued this month (WatchAccrued), rated by
//     package billing and cached between scrapes, because rating every
//     tenant costs far more than a scrape should.
//
// The HTTP metrics carry no tenant or instance label: their route label is
// the pattern that matched, never the path. The object metrics do carry the
// tenant, which is why the API serves /metrics to admins only.
package metrics

import (
	"errors"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gpucloud/gpucloud/cloud"
)

// Namespace prefixes every metric of the server.
const Namespace = "gpucloud"

// Registry is the control plane's Prometheus instrumentation: its registry
// and the metrics the hooks feed.
type Registry struct {
	Registry *prometheus.Registry
	// Log receives the errors of collectors at scrape (slog.Default when
	// nil).
	Log *slog.Logger

	requests     *prometheus.CounterVec
	duration     *prometheus.HistogramVec
	stepDuration *prometheus.HistogramVec
	stepErrors   *prometheus.CounterVec
	placements   prometheus.Counter
	reclaims     *prometheus.CounterVec
	relaunches   prometheus.Counter
	clearings    prometheus.Counter
	clearingTime prometheus.Histogram
}

// ReclaimReasons are the values of gpucloud_spot_reclaims_total's reason
// label; any other reason is counted as "other".
var ReclaimReasons = []string{cloud.ReclaimCapacity, cloud.ReclaimPrice, cloud.ReclaimRebalance}

// NewRegistry returns a registry with the Go and process collectors and the
// HTTP, controller, scheduler and spot market metrics fed by hooks.
func NewRegistry() *Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s := &Registry{
		Registry: r,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: "http", Name: "requests_total",
			Help: "HTTP requests answered by the API, by method, route pattern (\"unmatched\" for none) and status code.",
		}, []string{"method", "route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Subsystem: "http", Name: "request_duration_seconds",
			Help:    "Time the API took to answer a request, by method and route pattern.",
			Buckets: prometheus.DefBuckets,
		}, []string{"method", "route"}),
		stepDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Subsystem: "controller", Name: "step_duration_seconds",
			Help:    "Time one round of a controller took, by controller.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"controller"}),
		stepErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: "controller", Name: "step_errors_total",
			Help: "Rounds of a controller that failed, by controller.",
		}, []string{"controller"}),
		placements: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: "scheduler", Name: "placements_total",
			Help: "Instances the scheduler placed.",
		}),
		reclaims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: "spot", Name: "reclaims_total",
			Help: "Spot instances that got a reclaim notice, by reason: capacity (on-demand or reserved demand needs the slot), price (the spot price passed the max price), rebalance (a recommendation to move, without a deadline).",
		}, []string{"reason"}),
		relaunches: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: "spot", Name: "relaunches_total",
			Help: "Instances that spot requests launched again after their previous instance was reclaimed, failed, was lost or went away (a stopped instance started again included).",
		}),
		clearings: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: "market", Name: "clearings_total",
			Help: "Clearings of the spot prices of every pool by the market.",
		}),
		clearingTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace, Subsystem: "market", Name: "clearing_duration_seconds",
			Help:    "Time one clearing of the spot prices took, recording the prices that changed included.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
		}),
	}
	for _, r := range ReclaimReasons {
		s.reclaims.WithLabelValues(r) // every reason exists at 0
	}
	r.MustRegister(s.requests, s.duration, s.stepDuration, s.stepErrors, s.placements,
		s.reclaims, s.relaunches, s.clearings, s.clearingTime)
	return s
}

// Handler serves the registry in the Prometheus exposition formats. A
// collector that fails (the store unreachable) is logged and left out;
// the rest is served.
func (s *Registry) Handler() http.Handler {
	return promhttp.HandlerFor(s.Registry, promhttp.HandlerOpts{
		Registry:      s.Registry,
		ErrorHandling: promhttp.ContinueOnError,
		ErrorLog:      errorLog{s.log()},
	})
}

func (s *Registry) log() *slog.Logger {
	if s.Log != nil {
		return s.Log
	}
	return slog.Default()
}

// errorLog is promhttp's logger over slog. A scraper that went away
// before it read the whole answer (a reset, a broken pipe) is not the
// server's error: that is logged at debug level, once per scrape's
// failing writes as promhttp reports them.
type errorLog struct{ log *slog.Logger }

func (e errorLog) Println(v ...any) {
	for _, x := range v {
		if err, ok := x.(error); ok && clientGone(err) {
			e.log.Debug("metrics scrape: the scraper went away", "err", err)
			return
		}
	}
	e.log.Error("metrics scrape", "err", v)
}

// clientGone reports whether err is a write to a client that closed its
// connection.
func clientGone(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed)
}

// ObserveStep records one controller round: the controller.Loop's Observe
// hook.
func (s *Registry) ObserveStep(name string, took time.Duration, err error) {
	s.stepDuration.WithLabelValues(name).Observe(took.Seconds())
	c := s.stepErrors.WithLabelValues(name) // the series exists at 0
	if err != nil {
		c.Inc()
	}
}

// AddPlacements counts instances placed: the controller.Scheduler's
// Placed hook.
func (s *Registry) AddPlacements(n int) {
	if n > 0 {
		s.placements.Add(float64(n))
	}
}

// AddReclaims counts n spot instances noticed for reason: the
// controller.Scheduler's and controller.Market's Reclaimed hooks.
func (s *Registry) AddReclaims(reason string, n int) {
	if n <= 0 {
		return
	}
	if !slices.Contains(ReclaimReasons, reason) {
		reason = "other"
	}
	s.reclaims.WithLabelValues(reason).Add(float64(n))
}

// AddRelaunches counts instances spot requests launched again: the
// controller.Market's Relaunched hook.
func (s *Registry) AddRelaunches(n int) {
	if n > 0 {
		s.relaunches.Add(float64(n))
	}
}

// ObserveClearing counts one clearing of the spot prices and its duration:
// the controller.Market's Cleared hook.
func (s *Registry) ObserveClearing(took time.Duration) {
	s.clearings.Inc()
	s.clearingTime.Observe(took.Seconds())
}

// Leader exposes gpucloud_leader: 1 while isLeader reports that this
// replica runs the controllers (only the leader has controller, scheduler,
// market and GPU series), 0 otherwise.
func (s *Registry) Leader(isLeader func() bool) {
	s.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "leader",
		Help: "1 when this replica is the leader and runs the controllers, 0 otherwise.",
	}, func() float64 {
		if isLeader() {
			return 1
		}
		return 0
	}))
}
