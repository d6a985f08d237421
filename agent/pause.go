package agent

import (
	"context"
	"errors"

	"github.com/gpucloud/gpucloud/agent/runtime"
)

// syncPause brings a running workload to the pause its assignment asks
// for (agentapi.Assignment.Pause: an endpoint's warm pool): it pauses or
// resumes it through the runtime's runtime.Pauser. What the runtime says
// of a workload is read once (an agent that restarted finds a paused
// container paused). A runtime that cannot pause (the process runtime)
// leaves the workload running, and the agent logs why once.
func (a *Agent) syncPause(ctx context.Context, s *inst) error {
	want := s.a.Pause
	if _, ok := a.cfg.Runtime.(runtime.Pauser); !ok && !want {
		return nil // nothing can have paused it
	}
	p, err := runtime.PauserOf(a.cfg.Runtime)
	if err != nil {
		if !s.pauseRefused {
			s.pauseRefused = true
			a.log.Warn("agent: the server asks to pause a workload", "instance", s.id, "err", err)
		}
		return nil
	}
	if !s.pauseKnown {
		paused, err := p.Paused(ctx, s.id)
		if err != nil {
			return err
		}
		s.paused, s.pauseKnown = paused, true
	}
	if want == s.paused {
		return nil
	}
	if want {
		err = p.Pause(ctx, s.id)
	} else {
		err = p.Resume(ctx, s.id)
	}
	if errors.Is(err, runtime.ErrNotFound) {
		return nil // it exited meanwhile: the next pass reports it
	}
	if err != nil {
		return err
	}
	s.paused = want
	a.log.Debug("agent: workload pause", "instance", s.id, "paused", want)
	return nil
}
