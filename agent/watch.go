package agent

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/gpucloud/gpucloud/agentapi"
)

// AssignmentWatcher is a control plane that watches the host's
// assignments (agentapi.Client.WatchAssignments): with a version and a
// wait, it answers once the list no longer has that version, or after
// wait.
type AssignmentWatcher interface {
	WatchAssignments(ctx context.Context, version string, wait time.Duration) (*agentapi.AssignmentList, error)
}

// The assignment watch (issue 26). Against a server that watches, the
// agent holds one long poll of its assignments open (watchLoop), and its
// reconcile passes take the list the watch last answered instead of
// asking for it: a placement reaches the agent within a round trip, and an
// idle host costs the server its heartbeats and one request per
// MaxAssignmentWait. A pass still runs every interval, for what the agent
// sees on the host (an exit, new output), and at once when the watch
// answers with a new list.
//
// A list is only used while it cannot be staler than a fetch: it came
// from a watch that answers (live), it was asked for after the agent's
// last status report ended (a report changes the list: a final report
// releases the instance, and a list from before it would start the
// instance again; sendReports counts each report before and after), and
// it is recent (the watch answers at least every
// MaxAssignmentWait). Otherwise the pass fetches the list, as Step does:
// polling, the fallback while the watch fails (after a reconnect, until it
// answers again) and against a server that does not watch (its answer
// carries no version; the watch then ends).

// latestList is the newest assignment list the agent knows.
type latestList struct {
	mu   sync.Mutex
	list *agentapi.AssignmentList
	// at is when it was asked for, and gen the agent's report count then.
	at  time.Time
	gen uint64
	// got is when it arrived.
	got time.Time
	// live is set while the watch answers.
	live bool
}

// offer keeps list, asked for at at with gen reports sent, as the newest
// list unless a report was sent since it was asked for (current is the
// count now). It answers whether it kept it, and whether its version
// differs from the list kept before. A watch's list (watch) makes the
// watch live.
func (l *latestList) offer(list *agentapi.AssignmentList, at time.Time, gen, current uint64, watch bool) (kept, changed bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if gen != current {
		return false, false
	}
	changed = l.list == nil || l.list.Version != list.Version || list.Version == ""
	l.list, l.at, l.gen, l.got = list, at, gen, time.Now()
	if watch {
		l.live = true
	}
	return true, changed
}

// version is the version of the newest list ("" for none).
func (l *latestList) version() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.list == nil {
		return ""
	}
	return l.list.Version
}

func (l *latestList) setLive(live bool) {
	l.mu.Lock()
	l.live = live
	l.mu.Unlock()
}

// usable returns the newest list and when it was asked for, if a pass may
// use it without asking (see above): the watch is live, no report was
// sent since it was asked for (current), and it arrived within maxAge.
func (l *latestList) usable(current uint64, maxAge time.Duration) (*agentapi.AssignmentList, time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.live || l.list == nil || l.gen != current || time.Since(l.got) > maxAge {
		return nil, time.Time{}, false
	}
	return l.list, l.at, true
}

// watchedStep is a reconcile pass (Step) over the watch's list when it
// may be used, and over a fetched one otherwise.
func (a *Agent) watchedStep(ctx context.Context) error {
	if err := a.check(); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	list, at, ok := a.latest.usable(a.reports.Load(), agentapi.MaxAssignmentWait+2*a.cfg.Interval+5*time.Second)
	if !ok {
		var err error
		if list, at, err = a.fetch(ctx); err != nil {
			return err
		}
	}
	return a.pass(ctx, list, at)
}

// watchLoop long-polls the host's assignments until ctx ends, hands each
// new list to the reconcile loop (kick), and ends against a server that
// does not watch. A failed call makes the passes poll until a call
// answers again; it is retried with the agent's backoff.
func (a *Agent) watchLoop(ctx context.Context, w AssignmentWatcher) {
	fails, fresh := 0, false
	for {
		version, gen, began := a.latest.version(), a.reports.Load(), time.Now()
		if fresh {
			// The last answer was asked for before a report: ask for
			// the list as it is now, at once.
			version, fresh = "", false
		}
		list, err := w.WatchAssignments(ctx, version, agentapi.MaxAssignmentWait)
		if ctx.Err() != nil {
			return
		}
		if err == nil && list == nil {
			err = errors.New("no answer")
		}
		if err == nil && list.Version == "" {
			a.latest.setLive(false)
			a.log.Info("agent: the server does not watch assignments; polling them every interval")
			return
		}
		var delay time.Duration
		if err != nil {
			a.latest.setLive(false)
			fails++
			delay = retryDelay(a.cfg.Interval, fails, err)
			a.log.Warn("agent: assignment watch failed; polling", "err", err, "failures", fails, "retry_in", delay)
		} else {
			fails = 0
			kept, changed := a.latest.offer(list, began, gen, a.reports.Load(), true)
			fresh = !kept
			switch {
			case changed:
				select {
				case a.kick <- struct{}{}:
				default:
				}
			case kept && version != "" && time.Since(began) < a.cfg.Interval:
				// The same list at once although the call asked to
				// wait for another: a server that does not wait. Ask
				// at the agent's interval rather than spin. (A call
				// without a version, after a report, is answered at
				// once by design: waiting an interval after it left
				// the host unwatched for that long, and a placement
				// then waited for the next pass.)
				delay = a.cfg.Interval
			}
		}
		if delay == 0 {
			continue
		}
		if !sleep(ctx, delay) {
			return
		}
	}
}

// sleep waits d, or less when ctx ends first; it reports whether ctx is
// still live (the watch and the network view loops wait with it).
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
