package sim

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/placement"
)

// This file is the second replay mode: instead of the paper's sampled,
// never-departing arrivals, pods arrive at their creation_time and leave at
// their deletion_time, and the allocation is followed over trace time.

// ErrNoTimes is returned (wrapped) by the events mode for pods without
// creation and deletion times, such as those of the multigpu* pod lists.
var ErrNoTimes = errors.New("pod has no creation_time/deletion_time (the pod list has no time columns)")

// Event is one arrival or departure of a trace pod.
type Event struct {
	Time int64 // seconds, as in the trace
	Pod  int   // index into Trace.Pods and Trace.Requests
	// Depart is true for a departure at the pod's deletion time.
	Depart bool
}

// Events lists the trace's arrivals (at creation_time) and departures (at
// deletion_time) in time order. At equal times departures come first, then
// arrivals, each in pod order. Pods without a deletion time never depart;
// pods whose deletion time is not after their creation time are left out and
// counted in skipped. A pod without times gives an error wrapping ErrNoTimes.
func (t *Trace) Events() (events []Event, skipped int, err error) {
	if len(t.Pods) != len(t.Requests) {
		return nil, 0, fmt.Errorf("events: trace %q has %d requests but %d source pods: %w", t.Name, len(t.Requests), len(t.Pods), ErrNoTimes)
	}
	events = make([]Event, 0, 2*len(t.Pods))
	for i := range t.Pods {
		p := &t.Pods[i]
		if !p.HasTimes {
			return nil, 0, fmt.Errorf("pod %s (line %d): %w", p.Name, p.Line, ErrNoTimes)
		}
		if p.Deletion >= 0 && p.Deletion <= p.Creation {
			skipped++
			continue
		}
		events = append(events, Event{Time: p.Creation, Pod: i})
		if p.Deletion >= 0 {
			events = append(events, Event{Time: p.Deletion, Pod: i, Depart: true})
		}
	}
	slices.SortFunc(events, func(a, b Event) int {
		if c := cmp.Compare(a.Time, b.Time); c != 0 {
			return c
		}
		if a.Depart != b.Depart {
			if a.Depart {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.Pod, b.Pod)
	})
	return events, skipped, nil
}

// EventPoint is the cluster state after all events at one time.
type EventPoint struct {
	Time int64 `json:"t"`
	// AllocatedPct is the allocated GPU in % of capacity.
	AllocatedPct float64 `json:"allocated_pct"`
	Running      int     `json:"running"`
	// Failed is the number of arrivals that did not fit so far.
	Failed int `json:"failed"`
}

// EventsRun is the outcome of one time-ordered replay.
type EventsRun struct {
	Policy string `json:"policy"`
	Seed   int64  `json:"seed"`
	// Arrivals is the number of pods that arrived; Skipped the pods left
	// out because their deletion time is not after their creation time.
	Arrivals int `json:"arrivals"`
	Skipped  int `json:"skipped"`
	Placed   int `json:"placed"`
	Failed   int `json:"failed"`
	// Departed counts placed pods that left (failed pods leave nothing).
	Departed int `json:"departed"`
	// Start and End are the times of the first and last event.
	Start int64 `json:"start"`
	End   int64 `json:"end"`
	// PeakAllocPct is the highest allocation, in % of GPU capacity, reached
	// at PeakTime; MeanAllocPct the time-weighted mean from Start to End.
	PeakAllocPct float64 `json:"peak_alloc_pct"`
	PeakTime     int64   `json:"peak_time"`
	MeanAllocPct float64 `json:"mean_alloc_pct"`
	// Series is the state after each event time, downsampled to at most
	// EventsOptions.MaxPoints points (the first and last always kept).
	Series  []EventPoint  `json:"series"`
	Elapsed time.Duration `json:"elapsed_ns"`
}

// EventsOptions tunes ReplayEvents.
type EventsOptions struct {
	// MaxPoints bounds len(EventsRun.Series); 0 keeps a point per event
	// time.
	MaxPoints int
	// Progress, when not nil, is called after each arrival.
	Progress func()
}

// ReplayEvents replays the trace in time order with the named policy: pods
// arrive at creation_time and leave at deletion_time (see Events). The
// engine's tie-breaking is seeded with seed; nothing else is random. It
// does not modify the trace, so several may run at once on one Trace.
func (t *Trace) ReplayEvents(policy string, seed int64, opts EventsOptions) (*EventsRun, error) {
	sc, err := placement.NewScorer(policy, t.WorkloadFor(policy))
	if err != nil {
		return nil, err
	}
	return t.ReplayEventsScorer(sc, seed, opts)
}

// ReplayEventsScorer is ReplayEvents with a scorer built by the caller.
func (t *Trace) ReplayEventsScorer(sc placement.Scorer, seed int64, opts EventsOptions) (*EventsRun, error) {
	start := time.Now()
	events, skipped, err := t.Events()
	if err != nil {
		return nil, err
	}
	if t.GPUMilli <= 0 {
		return nil, fmt.Errorf("events: trace %q has no GPU capacity", t.Name)
	}
	f, err := t.Fleet()
	if err != nil {
		return nil, err
	}
	r := &eventsReplay{
		t: t, f: f, eng: placement.NewEngine(t.cat, sc, seed), progress: opts.Progress,
		run:    &EventsRun{Policy: sc.Name(), Seed: seed, Skipped: skipped},
		placed: make([]int, len(t.Pods)),
		ids:    make([]string, len(t.Pods)),
	}
	if len(events) > 0 {
		r.run.Start, r.run.End = events[0].Time, events[len(events)-1].Time
	}

	capacity := float64(t.GPUMilli)
	var area float64 // integral of allocation % over time
	points := make([]EventPoint, 0, len(events))
	for k := 0; k < len(events); {
		now := events[k].Time
		if len(points) > 0 {
			area += points[len(points)-1].AllocatedPct * float64(now-points[len(points)-1].Time)
		}
		for ; k < len(events) && events[k].Time == now; k++ {
			if err := r.apply(events[k]); err != nil {
				return nil, err
			}
		}
		pt := EventPoint{Time: now, AllocatedPct: 100 * float64(r.allocated) / capacity, Running: r.running, Failed: r.run.Failed}
		if pt.AllocatedPct > r.run.PeakAllocPct || len(points) == 0 {
			r.run.PeakAllocPct, r.run.PeakTime = pt.AllocatedPct, now
		}
		points = append(points, pt)
	}
	run := r.run
	if n := len(points); n > 0 {
		if span := run.End - run.Start; span > 0 {
			run.MeanAllocPct = area / float64(span)
		} else {
			run.MeanAllocPct = points[n-1].AllocatedPct
		}
	}
	run.Series = thinPoints(points, opts.MaxPoints)
	run.Elapsed = time.Since(start)
	return run, nil
}

// eventsReplay is the state of one time-ordered replay between events.
type eventsReplay struct {
	t        *Trace
	f        *fleet.Fleet
	eng      *placement.Engine
	progress func()
	run      *EventsRun
	// placed[i] is pod i's allocated milli-GPU plus one, 0 while it is
	// not placed; ids[i] is its allocation ID.
	placed    []int
	ids       []string
	allocated int64 // milli-GPU
	running   int
}

// apply replays one event: a departure releases the pod's allocation, an
// arrival places the pod or counts it as failed.
func (r *eventsReplay) apply(ev Event) error {
	if ev.Depart {
		return r.depart(ev.Pod)
	}
	return r.arrive(ev.Pod)
}

func (r *eventsReplay) depart(i int) error {
	if r.placed[i] == 0 {
		return nil // failed at arrival: nothing to release
	}
	if err := r.f.Release(r.ids[i]); err != nil {
		return fmt.Errorf("events: %w", err)
	}
	r.allocated -= int64(r.placed[i] - 1)
	r.placed[i] = 0
	r.running--
	r.run.Departed++
	return nil
}

func (r *eventsReplay) arrive(i int) error {
	r.run.Arrivals++
	// A private copy: Place resolves model aliases in place, and the
	// trace's requests may be shared with other goroutines.
	req := *r.t.Requests[i]
	req.Models = slices.Clone(req.Models)
	req.ID = fmt.Sprintf("%s#%d", req.ID, i)
	if r.run.Arrivals%r.t.RecalibrateEvery() == 1 {
		r.eng.Recalibrate(r.f)
	}
	p, err := r.eng.Place(r.f, &req)
	switch {
	case err == nil:
		p.ID = req.ID
		if err := r.f.Apply(p); err != nil {
			return fmt.Errorf("events: engine chose an infeasible placement: %w", err)
		}
		g := p.GPUMilli()
		r.allocated += int64(g)
		r.placed[i], r.ids[i] = g+1, req.ID
		r.running++
		r.run.Placed++
	case placement.IsInsufficientCapacity(err):
		r.run.Failed++
	default:
		return err
	}
	if r.progress != nil {
		r.progress()
	}
	return nil
}

// thinPoints keeps at most limit evenly spaced points, always the first and
// the last; limit <= 0 keeps all.
func thinPoints(pts []EventPoint, limit int) []EventPoint {
	n := len(pts)
	if limit <= 0 || n <= limit {
		return pts
	}
	if limit == 1 {
		return []EventPoint{pts[n-1]}
	}
	out := make([]EventPoint, limit)
	for j := range out {
		out[j] = pts[j*(n-1)/(limit-1)]
	}
	return out
}

// EventsReport is the result of time-ordered replays, one per policy.
type EventsReport struct {
	Trace string `json:"trace"`
	// Note is an extra header line, e.g. that the trace is synthetic.
	Note      string `json:"note,omitempty"`
	Synthetic bool   `json:"synthetic,omitempty"`
	Hosts     int    `json:"hosts"`
	GPUs      int    `json:"gpus"`
	Pods      int    `json:"pods"`
	Seed      int64  `json:"seed"`
	// Runs are ordered as in the table: the default policy first, then by
	// fewest failed arrivals.
	Runs []*EventsRun `json:"runs"`
}

// NewEventsReport collects runs of one trace.
func NewEventsReport(t *Trace, runs []*EventsRun) *EventsReport {
	r := &EventsReport{Trace: t.Name, Hosts: len(t.Hosts), GPUs: int(t.GPUMilli / 1000), Pods: len(t.Pods)}
	r.Runs = slices.Clone(runs)
	if len(runs) > 0 {
		r.Seed = runs[0].Seed
	}
	slices.SortStableFunc(r.Runs, func(a, b *EventsRun) int {
		if c := defaultPolicyFirst(a.Policy, b.Policy); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Failed, b.Failed); c != 0 {
			return c
		}
		return cmp.Compare(a.Policy, b.Policy)
	})
	return r
}

// WriteTable writes the report as an aligned text table.
func (r *EventsReport) WriteTable(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "trace %s: %d hosts, %d GPUs, %d pods; arrivals at creation_time, departures at deletion_time\n",
		r.Trace, r.Hosts, r.GPUs, r.Pods)
	if r.Note != "" {
		fmt.Fprintf(&b, "%s\n", r.Note)
	}
	if len(r.Runs) > 0 {
		first := r.Runs[0]
		fmt.Fprintf(&b, "%d arrivals over %s", first.Arrivals, fmtTraceSpan(first.End-first.Start))
		switch first.Skipped {
		case 0:
		case 1:
			fmt.Fprintf(&b, "; 1 pod skipped (deletion not after creation)")
		default:
			fmt.Fprintf(&b, "; %d pods skipped (deletion not after creation)", first.Skipped)
		}
		fmt.Fprintf(&b, "; seed %d (tie-breaking only)\n\n", r.Seed)
	}
	rows := [][]string{{"policy", "placed", "failed", "peak alloc %", "mean alloc %", "time"}}
	for _, run := range r.Runs {
		rows = append(rows, []string{
			run.Policy,
			fmt.Sprint(run.Placed),
			fmt.Sprint(run.Failed),
			fmt.Sprintf("%.2f", run.PeakAllocPct),
			fmt.Sprintf("%.2f", run.MeanAllocPct),
			fmtRunTime(run.Elapsed),
		})
	}
	writeTextTable(&b, rows)
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON writes the report as indented JSON.
func (r *EventsReport) WriteJSON(w io.Writer) error {
	return writeIndentedJSON(w, r)
}

// WriteEventsChart writes an SVG chart of allocated GPU % over trace time,
// one series per run, labelled by policy.
func WriteEventsChart(w io.Writer, runs []*EventsRun) error {
	var start, end int64
	first := true
	for _, r := range runs {
		if len(r.Series) == 0 {
			continue
		}
		if first || r.Start < start {
			start = r.Start
		}
		if first || r.End > end {
			end = r.End
		}
		first = false
	}
	if first {
		return errors.New("chart: no events to draw")
	}
	unit, label := 1.0, "seconds"
	switch span := end - start; {
	case span >= 3*86400:
		unit, label = 86400, "days"
	case span >= 3*3600:
		unit, label = 3600, "hours"
	case span >= 180:
		unit, label = 60, "minutes"
	}
	c := Chart{
		Title:  "GPU allocation over trace time",
		XLabel: "time since first event (" + label + ")",
		YLabel: "allocated GPU (% of capacity)",
		YMax:   100,
	}
	for _, r := range runs {
		if len(r.Series) == 0 {
			continue
		}
		s := Series{Name: r.Policy, X: make([]float64, len(r.Series)), Y: make([]float64, len(r.Series))}
		for i, p := range r.Series {
			s.X[i] = float64(p.Time-start) / unit
			s.Y[i] = p.AllocatedPct
		}
		c.Series = append(c.Series, s)
	}
	return WriteSVG(w, c)
}

// fmtTraceSpan prints a trace time span in the largest sensible unit.
func fmtTraceSpan(sec int64) string {
	switch {
	case sec >= 2*86400:
		return fmt.Sprintf("%.1f days", float64(sec)/86400)
	case sec >= 2*3600:
		return fmt.Sprintf("%.1f hours", float64(sec)/3600)
	}
	return fmt.Sprintf("%d s", sec)
}

// writeIndentedJSON writes v as indented JSON with a trailing newline.
func writeIndentedJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	_, err = w.Write(b)
	return err
}
