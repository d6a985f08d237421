package controller

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
)

// Controller is one control loop of the leader: a name for its logs, how
// often it runs, and one round of work. The leader runs a list of them
// (Loop); adding a controller is adding it to that list.
type Controller interface {
	Name() string
	// Interval is how long the loop waits between two rounds, on the
	// loop's clock; zero or less runs it on every tick.
	Interval() time.Duration
	// Reconcile runs one round. An error is logged; the controller runs
	// again at its next interval.
	Reconcile(ctx context.Context) error
}

// The actors the controllers name in the events they write.
var (
	schedulerActor = service.Controller("scheduler").ID
	marketActor    = service.Controller("market").ID
)

// minTick is the loop's tick when no controller has an interval.
const minTick = DefaultScheduleInterval

// Loop runs a list of controllers in one goroutine. It ticks at the
// smallest of their intervals and, on every tick, runs each controller
// whose interval has passed since its last round, in list order: the
// order is the contract between controllers (the market before the
// scheduler: the scheduler places the relaunches and the gates the market
// decided in the same tick). The first tick runs every controller.
type Loop struct {
	Controllers []Controller
	// Now is the clock the intervals are measured on (time.Now when nil);
	// a test's scaled clock speeds every controller up alike.
	Now func() time.Time
	Log *slog.Logger
	// Observe, when set, is called after every controller's round, in the
	// loop's goroutine, with the controller's name, how long the round
	// took on the wall clock and its error (nil when it succeeded; a
	// round cut short because ctx ended is not reported): the metrics'
	// hook, which keeps this package free of any metrics library.
	Observe func(name string, took time.Duration, err error)

	last []time.Time
	// kicks carries Kick's requests (one pending at most); kicked is
	// when the last kicked step ran.
	kickOnce sync.Once
	kicks    chan struct{}
	kicked   time.Time
}

// Kickable is a controller that runs at once when its loop is kicked
// (Loop.Kick), whatever its interval: work a caller waits on arrived (a
// request to an endpoint with no ready worker: the endpoint controller
// resumes or launches one, and the scheduler places it, without waiting
// for their next tick).
type Kickable interface {
	Kickable() bool
}

// minKickGap is the shortest time between two kicked steps: a burst of
// kicks (2,000 jobs submitted at once) runs the kicked controllers at
// most this often, besides their own ticks.
const minKickGap = 20 * time.Millisecond

// Kick asks the loop to run its Kickable controllers now (in list order,
// with the others that are due), at most once per minKickGap; kicks that
// come meanwhile are one. Safe from any goroutine, and a no-op for a loop
// that does not run.
func (l *Loop) Kick() {
	l.kickOnce.Do(func() { l.kicks = make(chan struct{}, 1) })
	select {
	case l.kicks <- struct{}{}:
	default:
	}
}

// Tick returns the loop's tick: the smallest positive interval of its
// controllers.
func (l *Loop) Tick() time.Duration {
	tick := time.Duration(0)
	for _, c := range l.Controllers {
		if d := c.Interval(); d > 0 && (tick == 0 || d < tick) {
			tick = d
		}
	}
	if tick == 0 {
		tick = minTick
	}
	return tick
}

// Step runs, in list order, every controller that is due, and returns the
// names of those it ran. A controller is due when its interval has passed
// since its last round, less half a tick: a ticker's jitter must not make
// a controller skip the tick it is due at.
func (l *Loop) Step(ctx context.Context) []string { return l.step(ctx, false) }

// step is Step; kicked also runs the Kickable controllers that are not
// due.
func (l *Loop) step(ctx context.Context, kicked bool) []string {
	now := orNow(l.Now)
	log := l.Log
	if log == nil {
		log = slog.Default()
	}
	if len(l.last) != len(l.Controllers) {
		l.last = make([]time.Time, len(l.Controllers))
	}
	slack := l.Tick() / 2
	var ran []string
	for i, c := range l.Controllers {
		if ctx.Err() != nil {
			break
		}
		t := now()
		k, _ := c.(Kickable)
		if !l.last[i].IsZero() && t.Sub(l.last[i]) < c.Interval()-slack && !(kicked && k != nil && k.Kickable()) {
			continue
		}
		l.last[i] = t
		ran = append(ran, c.Name())
		start := time.Now()
		err := c.Reconcile(ctx)
		if ctx.Err() != nil {
			break
		}
		if err != nil {
			log.Error("controller round failed", "controller", c.Name(), "err", err)
		}
		if l.Observe != nil {
			l.Observe(c.Name(), time.Since(start), err)
		}
	}
	return ran
}

// Run steps the loop on every tick until ctx ends.
func (l *Loop) Run(ctx context.Context) {
	l.kickOnce.Do(func() { l.kicks = make(chan struct{}, 1) })
	tick := time.NewTicker(l.Tick())
	defer tick.Stop()
	for {
		kicked := false
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-l.kicks:
			if gap := minKickGap - time.Since(l.kicked); gap > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(gap):
				}
			}
			kicked = true
			l.kicked = time.Now()
		}
		l.step(ctx, kicked)
	}
}

// BudgetChecker runs service.CheckBudgets as a Controller.
type BudgetChecker struct {
	Store cloud.Store
	Now   func() time.Time
	// Every is how often budgets are checked; 0 is DefaultBudgetInterval.
	Every time.Duration
	Log   *slog.Logger
}

// DefaultBudgetInterval is how often the leader checks budgets.
const DefaultBudgetInterval = time.Minute

func (b *BudgetChecker) Name() string { return "budgets" }

func (b *BudgetChecker) Interval() time.Duration {
	if b.Every > 0 {
		return b.Every
	}
	return DefaultBudgetInterval
}

func (b *BudgetChecker) Reconcile(ctx context.Context) error {
	_, err := service.CheckBudgets(ctx, b.Store, orNow(b.Now)())
	return err
}

// HeartbeatWatcher runs service.MarkSilentHosts as a Controller, four times per
// timeout.
type HeartbeatWatcher struct {
	Store cloud.Store
	Now   func() time.Time
	// Timeout is how long a host may stay silent; 0 is
	// DefaultHeartbeatTimeout.
	Timeout time.Duration
	Log     *slog.Logger
	// since is when this watcher's current run began: its first
	// reconcile, or the first after a gap of more than two intervals
	// (the replica did not lead, or was down); last is its latest.
	since, last time.Time
}

func (h *HeartbeatWatcher) Name() string { return "health" }

func (h *HeartbeatWatcher) timeout() time.Duration {
	if h.Timeout > 0 {
		return h.Timeout
	}
	return DefaultHeartbeatTimeout
}

func (h *HeartbeatWatcher) Interval() time.Duration { return h.timeout() / 4 }

// Reconcile marks the hosts silent for the timeout, counting silence
// from no earlier than the start of this run (MarkSilentHostsSince): a
// server that comes back, or a replica that takes over the lead, gives
// the agents one timeout to reach it before it calls their hosts lost.
func (h *HeartbeatWatcher) Reconcile(ctx context.Context) error {
	now := orNow(h.Now)()
	if h.last.IsZero() || now.Sub(h.last) > 2*h.Interval() {
		h.since = now
	}
	h.last = now
	marked, err := service.MarkSilentHostsSince(ctx, h.Store, now, h.timeout(), h.since)
	if err == nil && len(marked) > 0 {
		log := h.Log
		if log == nil {
			log = slog.Default()
		}
		log.Warn("hosts missed heartbeats", "hosts", marked)
	}
	return err
}

func orNow(now func() time.Time) func() time.Time {
	if now == nil {
		return time.Now
	}
	return now
}
