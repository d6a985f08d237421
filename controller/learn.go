package controller

import "time"

// DefaultLearnInterval is how often, at most, a scheduler step measures the
// mix the fleet runs for the placement policy (Scheduler.LearnEvery).
const DefaultLearnInterval = time.Minute

// learn gives the engine the fleet's running mix as its expected workload
// and MIG profile mix (placement.Learner), at most every LearnEvery.
func (s *Scheduler) learn() {
	every := s.LearnEvery
	if every == 0 {
		every = DefaultLearnInterval
	}
	if every < 0 || s.fleet == nil || s.Engine == nil {
		return
	}
	now := s.Now()
	if !s.learnedAt.IsZero() && now.Sub(s.learnedAt) < every {
		return
	}
	s.learnedAt = now
	times, migTimes := s.learner.Times, s.learner.MIGTimes
	if !s.learner.Learn(s.Engine, s.fleet) {
		return
	}
	if s.learner.Times != times {
		s.Log.Info("scheduler: the placement policy now expects the mix the fleet runs",
			"allocations", s.learner.Count, "times", s.learner.Times)
	}
	if s.learner.MIGTimes != migTimes {
		s.Log.Info("scheduler: MIG slots now keep room for the profile mix the fleet runs", "times", s.learner.MIGTimes)
	}
}

// Learned reports what the scheduler last gave the placement policy: how
// many allocations the workload was measured over and how many times it
// was replaced (0: the policy still expects the generic mix). Not safe to
// call during a step.
func (s *Scheduler) Learned() (allocations, times int) {
	return s.learner.Count, s.learner.Times
}
