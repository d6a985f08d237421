package agent_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agent"
	"github.com/gpucloud/gpucloud/agent/agenttest"
	"github.com/gpucloud/gpucloud/agentapi"
)

// watchingServer is the fake control plane with the assignment watch: a
// version (a hash of the list) and a long poll that looks for a change
// every few milliseconds. old makes it a server from before the watch
// (no version, no wait); fail makes every watch call fail.
type watchingServer struct {
	*agenttest.ControlPlane
	old, fail bool
	watches   atomic.Int64
}

func (w *watchingServer) WatchAssignments(ctx context.Context, version string, wait time.Duration) (*agentapi.AssignmentList, error) {
	w.watches.Add(1)
	if w.fail {
		return nil, errors.New("connection reset")
	}
	deadline := time.Now().Add(wait)
	for {
		list, err := w.Assignments(ctx)
		if err != nil || w.old {
			return list, err
		}
		raw, _ := json.Marshal(list.Assignments)
		sum := sha256.Sum256(raw)
		list.Version = hex.EncodeToString(sum[:8])
		if version == "" || list.Version != version || !time.Now().Before(deadline) {
			return list, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

var _ agent.AssignmentWatcher = (*watchingServer)(nil)

// runWith runs e's agent over srv (with the agent's config tweaked) until
// the test ends.
func (e *env) runWith(srv agent.ControlPlane, tweak func(*agent.Config)) {
	cfg := e.cfg
	if tweak != nil {
		tweak(&cfg)
	}
	e.ag = agent.New(srv, cfg)
	e.run()
}

// TestWatchDeliversAssignments: with the watch, an agent whose interval
// is an hour starts a new assignment at once.
func TestWatchDeliversAssignments(t *testing.T) {
	e := newEnv(t, h100)
	w := &watchingServer{ControlPlane: e.srv}
	e.runWith(w, func(c *agent.Config) { c.Interval = time.Hour })
	e.until("the watch to start", func() bool { return w.watches.Load() > 0 })
	time.Sleep(50 * time.Millisecond) // the watch waits now
	// No pass is due for an hour: only the watch can bring it.
	e.assign(e.assignment("i-watched", whole(e.host.ID(), 0), serveScript))
	e.untilPhase("i-watched", agentapi.PhaseRunning)
}

// TestWatchFallsBackToPolling: against a server from before the watch
// (an answer without a version) the agent stops watching and polls every
// interval; while the watch fails, it polls too, and keeps trying the
// watch.
func TestWatchFallsBackToPolling(t *testing.T) {
	t.Run("old server", func(t *testing.T) {
		e := newEnv(t, h100)
		w := &watchingServer{ControlPlane: e.srv, old: true}
		e.runWith(w, nil)
		e.assign(e.assignment("i-polled", whole(e.host.ID(), 0), serveScript))
		e.untilPhase("i-polled", agentapi.PhaseRunning)
		e.until("polls", func() bool { return e.srv.Calls(agenttest.OpAssignments) > 5 })
		if n := w.watches.Load(); n != 1 {
			t.Fatalf("%d watch calls against a server without the watch, want 1", n)
		}
	})
	t.Run("failing watch", func(t *testing.T) {
		e := newEnv(t, h100)
		w := &watchingServer{ControlPlane: e.srv, fail: true}
		e.runWith(w, nil)
		e.assign(e.assignment("i-polled", whole(e.host.ID(), 0), serveScript))
		e.untilPhase("i-polled", agentapi.PhaseRunning)
		e.until("the watch to be retried", func() bool { return w.watches.Load() > 1 })
	})
}
