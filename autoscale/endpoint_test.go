package autoscale

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
)

func TestPlanEndpoint(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	ago := func(s int) time.Time { return now.Add(-time.Duration(s) * time.Second) }
	ready := func(id string, busy, idleSec int) WorkerInput {
		return WorkerInput{ID: id, Phase: WorkerRunning, Ready: true, Busy: busy, IdleSince: ago(idleSec), LaunchedAt: ago(3600), Market: cloud.MarketOnDemand}
	}
	fresh := func(id string) WorkerInput {
		return WorkerInput{ID: id, Phase: WorkerRunning, Ready: true, IdleSince: ago(5), LaunchedAt: ago(5), Market: cloud.MarketOnDemand}
	}
	paused := func(id string) WorkerInput {
		return WorkerInput{ID: id, Phase: WorkerPaused, IdleSince: ago(600), LaunchedAt: ago(600), Market: cloud.MarketOnDemand}
	}
	base := EndpointInput{Min: 0, Max: 4, Concurrency: 2, IdleTimeout: 30 * time.Second, Now: now}
	cases := []struct {
		name    string
		edit    func(*EndpointInput)
		launch  int
		release []string
		forget  []string
		pause   []string
		resume  []string
		desired int
		deleted bool
	}{
		{name: "at zero with nothing to do", edit: func(*EndpointInput) {}},
		{name: "the first request at zero starts a worker", edit: func(in *EndpointInput) { in.Queued = 1 }, launch: 1, desired: 1},
		{name: "ceil of load over concurrency", edit: func(in *EndpointInput) { in.Queued, in.InFlight = 4, 1 }, launch: 3, desired: 3},
		{name: "max caps", edit: func(in *EndpointInput) { in.Queued = 100 }, launch: 4, desired: 4},
		{name: "min keeps workers with no load", edit: func(in *EndpointInput) {
			in.Min = 1
			in.Workers = []WorkerInput{ready("a", 0, 3600)}
		}, desired: 1},
		{name: "an idle worker within the timeout stays", edit: func(in *EndpointInput) {
			in.Workers = []WorkerInput{ready("a", 0, 10)}
		}},
		{name: "an idle worker past the timeout goes: scale to zero", edit: func(in *EndpointInput) {
			in.Workers = []WorkerInput{ready("a", 0, 31)}
		}, release: []string{"a"}},
		{name: "a busy worker never goes", edit: func(in *EndpointInput) {
			in.InFlight = 1
			in.Workers = []WorkerInput{ready("a", 1, 3600), ready("b", 0, 3600), ready("c", 0, 5)}
		}, release: []string{"b"}, desired: 1},
		{name: "the longest idle goes first, unready before ready", edit: func(in *EndpointInput) {
			in.Workers = []WorkerInput{ready("a", 0, 100), ready("b", 0, 200),
				{ID: "c", Phase: WorkerStarting, IdleSince: ago(40), LaunchedAt: ago(40)}}
			in.InFlight = 1
		}, release: []string{"c", "b"}, desired: 1},
		{name: "a broken worker is released and replaced", edit: func(in *EndpointInput) {
			in.Queued = 1
			in.Workers = []WorkerInput{{ID: "a", Phase: WorkerBroken}}
		}, launch: 1, release: []string{"a"}, desired: 1},
		{name: "a terminated worker is forgotten", edit: func(in *EndpointInput) {
			in.Workers = []WorkerInput{{ID: "a", Phase: WorkerGone}}
		}, forget: []string{"a"}},
		{name: "an outdated busy worker stays while it works, and its replacement starts", edit: func(in *EndpointInput) {
			in.InFlight = 1
			in.Workers = []WorkerInput{func() WorkerInput { w := ready("old", 1, 0); w.Outdated = true; return w }()}
		}, launch: 1, desired: 1},
		{name: "an outdated idle worker stays until a current one is ready", edit: func(in *EndpointInput) {
			in.Queued = 1
			in.Workers = []WorkerInput{func() WorkerInput { w := ready("old", 0, 0); w.Outdated = true; return w }(),
				{ID: "new", Phase: WorkerStarting, IdleSince: now, LaunchedAt: now}}
		}, desired: 1},
		{name: "an outdated idle worker goes once a current one is ready", edit: func(in *EndpointInput) {
			in.Queued = 1
			in.Workers = []WorkerInput{func() WorkerInput { w := ready("old", 0, 0); w.Outdated = true; return w }(), ready("new", 0, 0)}
		}, release: []string{"old"}, desired: 1},
		{name: "a spot worker unplaced too long falls back to on demand", edit: func(in *EndpointInput) {
			in.Spot, in.SpotFallback, in.Queued = true, 10*time.Second, 1
			in.Workers = []WorkerInput{{ID: "s", Phase: WorkerStarting, Market: cloud.MarketSpot, IdleSince: ago(11), LaunchedAt: ago(11)}}
		}, launch: 1, release: []string{"s"}, desired: 1},
		{name: "warm: an empty pool at zero is filled by a launch", edit: func(in *EndpointInput) {
			in.Warm = 2
		}, launch: 2},
		{name: "warm: a starting worker for the pool is not launched again", edit: func(in *EndpointInput) {
			in.Warm = 1
			in.Workers = []WorkerInput{{ID: "a", Phase: WorkerStarting, IdleSince: ago(5), LaunchedAt: ago(5)}}
		}},
		{name: "warm: a fresh ready worker is paused into the pool", edit: func(in *EndpointInput) {
			in.Warm = 1
			in.Workers = []WorkerInput{fresh("a")}
		}, pause: []string{"a"}},
		{name: "warm: a worker launched for the pool is paused once ready, its idleness counted from its readiness", edit: func(in *EndpointInput) {
			in.Warm = 1
			w := fresh("a")
			w.LaunchedAt, w.ReadyAt = ago(2), ago(1)
			w.IdleSince = w.ReadyAt
			in.Workers = []WorkerInput{ready("b", 0, 3), w}
		}, pause: []string{"a"}},
		{name: "warm: a worker that served since its readiness waits for its idle timeout", edit: func(in *EndpointInput) {
			in.Warm = 1
			w := fresh("a")
			w.LaunchedAt, w.ReadyAt, w.IdleSince = ago(20), ago(19), ago(3)
			in.Workers = []WorkerInput{w}
		}},
		{name: "warm: a full pool launches and pauses nothing", edit: func(in *EndpointInput) {
			in.Warm = 1
			in.Workers = []WorkerInput{paused("p")}
		}},
		{name: "warm: a job with no ready worker resumes a paused one, and the pool is refilled", edit: func(in *EndpointInput) {
			in.Warm, in.Queued = 1, 1
			in.Workers = []WorkerInput{paused("p")}
		}, resume: []string{"p"}, launch: 1, desired: 1},
		{name: "warm: resume before create, then launch only the rest", edit: func(in *EndpointInput) {
			in.Warm, in.Queued, in.Max = 2, 6, 4
			in.Workers = []WorkerInput{paused("p"), paused("q")}
		}, resume: []string{"p", "q"}, launch: 2, desired: 3},
		{name: "warm: load at max leaves no room for the pool", edit: func(in *EndpointInput) {
			in.Warm, in.Queued = 2, 8
			in.Workers = []WorkerInput{paused("p")}
		}, resume: []string{"p"}, launch: 3, desired: 4},
		{name: "warm: a serving worker stays running within its idle timeout", edit: func(in *EndpointInput) {
			in.Warm = 1
			in.Workers = []WorkerInput{ready("a", 0, 10)}
		}},
		{name: "warm: a serving worker past its idle timeout is paused, not released, while the pool is short", edit: func(in *EndpointInput) {
			in.Warm = 1
			in.Workers = []WorkerInput{ready("a", 0, 31)}
		}, pause: []string{"a"}},
		{name: "warm: scale to zero keeps only the pool, paused", edit: func(in *EndpointInput) {
			in.Warm = 1
			in.Workers = []WorkerInput{ready("a", 0, 31), ready("b", 0, 40), paused("p")}
		}, release: []string{"b", "a"}},
		{name: "warm: a busy worker is never paused", edit: func(in *EndpointInput) {
			in.Warm, in.InFlight = 1, 1
			in.Workers = []WorkerInput{ready("a", 1, 0), fresh("b")}
		}, pause: []string{"b"}, desired: 1},
		{name: "warm: min counts running workers, the pool comes beside them", edit: func(in *EndpointInput) {
			in.Warm, in.Min = 1, 1
			in.Workers = []WorkerInput{ready("a", 0, 3600)}
		}, launch: 1, desired: 1},
		{name: "warm: paused workers beyond the pool go", edit: func(in *EndpointInput) {
			in.Warm = 1
			in.Workers = []WorkerInput{paused("p"), paused("q")}
		}, release: []string{"q"}},
		{name: "warm: an outdated paused worker goes and the pool is refilled", edit: func(in *EndpointInput) {
			in.Warm = 1
			in.Workers = []WorkerInput{func() WorkerInput { w := paused("old"); w.Outdated = true; return w }()}
		}, release: []string{"old"}, launch: 1},
		{name: "warm 0: a paused worker left over goes", edit: func(in *EndpointInput) {
			in.Workers = []WorkerInput{paused("p")}
		}, release: []string{"p"}},
		{name: "warm: a paused worker found busy is resumed even with the load met", edit: func(in *EndpointInput) {
			in.Warm, in.InFlight = 1, 2
			in.Workers = []WorkerInput{ready("a", 1, 0), func() WorkerInput { w := paused("p"); w.Busy = 1; return w }()}
		}, resume: []string{"p"}, desired: 1},
		{name: "deleting releases paused workers too", edit: func(in *EndpointInput) {
			in.Deleting, in.Warm = true, 1
			in.Workers = []WorkerInput{paused("p")}
		}, release: []string{"p"}},
		{name: "deleting releases every worker", edit: func(in *EndpointInput) {
			in.Deleting, in.InFlight = true, 1
			in.Workers = []WorkerInput{ready("a", 1, 0), {ID: "b", Phase: WorkerGone}}
		}, release: []string{"a"}, forget: []string{"b"}},
		{name: "deleting with nothing left is deleted", edit: func(in *EndpointInput) {
			in.Deleting = true
		}, deleted: true},
		{name: "deleting waits for a leaving worker to terminate", edit: func(in *EndpointInput) {
			in.Deleting = true
			in.Workers = []WorkerInput{{ID: "a", Phase: WorkerLeaving}}
		}},
		{name: "a leaving worker is neither live nor released again", edit: func(in *EndpointInput) {
			in.Queued = 1
			in.Workers = []WorkerInput{{ID: "a", Phase: WorkerLeaving}}
		}, launch: 1, desired: 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := base
			c.edit(&in)
			p := PlanEndpoint(&in)
			var rel []string
			for _, r := range p.Release {
				rel = append(rel, r.ID)
			}
			if len(p.Launch) != c.launch || !slices.Equal(rel, c.release) || !slices.Equal(p.Forget, c.forget) ||
				p.Desired != c.desired || p.Deleted != c.deleted || !slices.Equal(p.Pause, c.pause) || !slices.Equal(p.Resume, c.resume) {
				t.Fatalf("launch %d release %v forget %v pause %v resume %v desired %d deleted %v; want %d %v %v %v %v %d %v (%s)",
					len(p.Launch), rel, p.Forget, p.Pause, p.Resume, p.Desired, p.Deleted,
					c.launch, c.release, c.forget, c.pause, c.resume, c.desired, c.deleted, p.Reason)
			}
		})
	}
}

// TestPlanEndpointInvariants: over random states, a plan never releases a
// busy worker, never leaves fewer live workers than the load asks for,
// and never launches past max.
func TestPlanEndpointInvariants(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	for range 5000 {
		in := EndpointInput{Min: r.IntN(3), Concurrency: 1 + r.IntN(4), IdleTimeout: time.Duration(r.IntN(60)) * time.Second,
			Queued: r.IntN(20), InFlight: r.IntN(10), Now: now, Spot: r.IntN(2) == 0, SpotFallback: 10 * time.Second}
		in.Max = max(1, in.Min+r.IntN(8))
		in.Warm = r.IntN(in.Max + 1)
		for i := range r.IntN(10) {
			w := WorkerInput{ID: string(rune('a' + i)), Phase: WorkerPhase(r.IntN(6)), Outdated: r.IntN(4) == 0,
				Market: cloud.MarketOnDemand, IdleSince: now.Add(-time.Duration(r.IntN(120)) * time.Second),
				LaunchedAt: now.Add(-time.Duration(r.IntN(120)) * time.Second)}
			if w.Phase == WorkerPaused {
				w.Busy = r.IntN(4) / 3
			}
			if w.Phase == WorkerRunning {
				w.Ready = r.IntN(2) == 0
				if w.Ready {
					w.Busy = r.IntN(3)
				}
			}
			in.Workers = append(in.Workers, w)
		}
		p := PlanEndpoint(&in)
		released := map[string]bool{}
		for _, rel := range p.Release {
			released[rel.ID] = true
		}
		liveCurrent := len(p.Launch)
		phase := map[string]WorkerInput{}
		for _, w := range in.Workers {
			phase[w.ID] = w
		}
		for _, id := range p.Resume {
			if !phase[id].Outdated {
				liveCurrent++
			}
		}
		for _, id := range p.Resume {
			if w := phase[id]; w.Phase != WorkerPaused || w.Outdated && w.Busy == 0 || released[id] {
				t.Fatalf("resumed %+v, not a current paused worker kept: %+v -> %+v", w, in, p)
			}
		}
		for _, w := range in.Workers {
			if w.Phase == WorkerPaused && w.Busy > 0 && !w.Outdated && !slices.Contains(p.Resume, w.ID) {
				t.Fatalf("a busy paused worker %s left paused: %+v -> %+v", w.ID, in, p)
			}
		}
		pausedNow := map[string]bool{}
		for _, id := range p.Pause {
			if w := phase[id]; w.Phase != WorkerRunning || !w.Ready || w.Busy > 0 || released[id] || pausedNow[id] {
				t.Fatalf("paused %+v, not an idle ready running worker: %+v -> %+v", w, in, p)
			}
			pausedNow[id] = true
		}
		for _, w := range in.Workers {
			if released[w.ID] && w.Busy > 0 && w.Phase != WorkerBroken {
				t.Fatalf("released busy worker %s: %+v -> %+v", w.ID, in, p)
			}
			if !released[w.ID] && !pausedNow[w.ID] && !w.Outdated && (w.Phase == WorkerStarting || w.Phase == WorkerRunning) {
				liveCurrent++
			}
		}
		// A paused worker left paused means the load was met by resumes:
		// a launch then only refills the pool (or replaces a spot worker).
		left := 0
		for _, w := range in.Workers {
			if w.Phase == WorkerPaused && !w.Outdated && !released[w.ID] && !slices.Contains(p.Resume, w.ID) {
				left++
			}
		}
		if left > 0 && !in.Spot && len(p.Launch) > max(0, WarmPool(&in)-left) {
			t.Fatalf("launched %d with %d paused workers left and a pool of %d: %+v -> %+v", len(p.Launch), left, WarmPool(&in), in, p)
		}
		if left > WarmPool(&in) {
			t.Fatalf("%d paused workers kept, the pool is %d: %+v -> %+v", left, WarmPool(&in), in, p)
		}
		if want := Wanted(&in); liveCurrent < want {
			t.Fatalf("%d live current workers after the plan, the load wants %d: %+v -> %+v", liveCurrent, want, in, p)
		}
		if liveCurrent > in.Max && len(p.Launch) > 0 {
			t.Fatalf("launched past max %d: %d live: %+v -> %+v", in.Max, liveCurrent, in, p)
		}
	}
}
