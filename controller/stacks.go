package controller

import (
	"context"
	"log/slog"
	"time"

	"github.com/gpucloud/gpucloud/stackengine"
)

// DefaultStackInterval is how often the leader runs a round of the stacks
// being applied or destroyed: the scheduler's interval, so that a round's
// instances are placed in the same tick (a round with nothing to do is one
// indexed query).
const DefaultStackInterval = DefaultScheduleInterval

// Stacks runs the stack engine's Step as a Controller: a round of every
// stack being applied or destroyed. It runs before the scheduler, so that
// the instances a round creates are placed in the same tick.
type Stacks struct {
	Engine *stackengine.Engine
	// Every is how often it runs; 0 is DefaultStackInterval.
	Every time.Duration
	Log   *slog.Logger
}

func (s *Stacks) Name() string { return "stacks" }

func (s *Stacks) Interval() time.Duration {
	if s.Every > 0 {
		return s.Every
	}
	return DefaultStackInterval
}

func (s *Stacks) Reconcile(ctx context.Context) error {
	_, err := s.Engine.Step(ctx)
	return err
}
