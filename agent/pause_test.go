package agent_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/gpucloud/gpucloud/agent"
	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/agent/runtime/process"
	"github.com/gpucloud/gpucloud/agentapi"
)

// pausing is the process runtime with a runtime.Pauser that records what
// it was asked (the process runtime itself cannot pause).
type pausing struct {
	*process.Runtime
	mu     sync.Mutex
	paused map[string]bool
	calls  []string
}

func (p *pausing) Pause(_ context.Context, id string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.paused[id] = true
	p.calls = append(p.calls, "pause "+id)
	return nil
}

func (p *pausing) Resume(_ context.Context, id string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.paused[id] = false
	p.calls = append(p.calls, "resume "+id)
	return nil
}

func (p *pausing) Paused(_ context.Context, id string) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused[id], nil
}

func (p *pausing) state(id string) (bool, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused[id], len(p.calls)
}

// TestPauseFollowsAssignment: a running workload whose assignment asks
// for a pause is paused through the runtime's Pauser, once; asked to run
// again it is resumed, once; it stays the same run throughout (no report
// but starting and running).
func TestPauseFollowsAssignment(t *testing.T) {
	var pr *pausing
	e := newEnv(t, h100, func(c *agent.Config) {
		pr = &pausing{Runtime: c.Runtime.(*process.Runtime), paused: map[string]bool{}}
		c.Runtime = pr
	})
	as := e.assignment("i-warm", whole(e.host.ID(), 0), serveScript)
	e.assign(as)
	e.untilPhase("i-warm", agentapi.PhaseRunning)
	as.Pause = true
	e.srv.Put(as)
	e.until("the workload paused", func() bool { p, _ := pr.state("i-warm"); return p })
	e.steps(5)
	if _, n := pr.state("i-warm"); n != 1 {
		t.Fatalf("%d calls after the pause, want 1: %v", n, pr.calls)
	}
	as.Pause = false
	e.srv.Put(as)
	e.until("the workload resumed", func() bool { p, _ := pr.state("i-warm"); return !p })
	e.steps(5)
	if _, n := pr.state("i-warm"); n != 2 {
		t.Fatalf("calls %v, want a pause and a resume", pr.calls)
	}
	e.wantPhases("i-warm", agentapi.PhaseStarting, agentapi.PhaseRunning)
}

// TestPauseRefusedByProcessRuntime: the process runtime cannot pause (it
// says so, runtime.ErrCannotPause); a workload asked to pause on it keeps
// running, and is neither failed nor restarted.
func TestPauseRefusedByProcessRuntime(t *testing.T) {
	e := newEnv(t, h100)
	if _, err := runtime.PauserOf(e.rt); err == nil {
		t.Fatal("the process runtime claims it can pause")
	} else if want := "the process runtime cannot pause"; !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not say %q", err, want)
	}
	as := e.assignment("i-nopause", whole(e.host.ID(), 0), serveScript)
	as.Pause = true
	e.assign(as)
	e.untilPhase("i-nopause", agentapi.PhaseRunning)
	e.steps(5)
	if st, err := e.rt.Status("i-nopause"); err != nil || st.State != runtime.StateRunning {
		t.Fatalf("status %+v, %v: want it running", st, err)
	}
	e.wantPhases("i-nopause", agentapi.PhaseStarting, agentapi.PhaseRunning)
}
