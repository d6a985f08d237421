package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/spf13/cobra"

	"github.com/gpucloud/gpucloud/cli/cmdutil"
	"github.com/gpucloud/gpucloud/internal/progress"
	"github.com/gpucloud/gpucloud/placement"
	"github.com/gpucloud/gpucloud/sim"
)

const (
	defaultSeeds = "42-51"
	// replayInflation is what sim.Trace.Replay samples to: arrivals until
	// the GPU requests reach 130% of capacity.
	replayInflation = 1.3
	// defaultSyntheticHosts sizes the built-in trace.
	defaultSyntheticHosts = 200
	// syntheticSeed generates the built-in trace (not the replay seeds).
	syntheticSeed = 1
	// maxSeeds bounds --seeds, catching typos such as "42-5100".
	maxSeeds = 10000
	// eventsChartPoints bounds the points kept per events run.
	eventsChartPoints = 2000
)

const traceDir = "../shared/traces/alibaba-gpu-v2023"

var replayExample = strings.Join([]string{
	"  # Quick start: the built-in synthetic fleet (200 hosts), default policy, seeds 42-51",
	"  gpucloud sim replay",
	"",
	"  # The FGD paper's benchmark: every policy on the openb default trace, next to the",
	"  # paper's numbers, with the allocation curves as an SVG",
	"  gpucloud sim replay --policy all \\",
	"    --nodes " + traceDir + "/openb_node_list_gpu_node.csv \\",
	"    --pods " + traceDir + "/openb_pod_list_default.csv \\",
	"    --reference " + traceDir + "/reference_unallocated_gpu_by_policy.csv \\",
	"    --chart curves.svg",
	"",
	"  # Two policies, three seeds, JSON with per-seed values",
	"  gpucloud sim replay --policy gpucloud,fgd --seeds 42,43,50 -o json \\",
	"    --nodes " + traceDir + "/openb_node_list_gpu_node.csv \\",
	"    --pods " + traceDir + "/openb_pod_list_gpushare100.csv",
	"",
	"  # Time-ordered replay (pods arrive at creation_time and leave at deletion_time)",
	"  gpucloud sim replay --mode events --policy all --chart allocation.svg \\",
	"    --nodes " + traceDir + "/openb_node_list_gpu_node.csv \\",
	"    --pods " + traceDir + "/openb_pod_list_default.csv",
}, "\n")

type replayOptions struct {
	nodes, pods string
	hosts       int
	policy      string
	seeds       string
	inflation   float64
	sampling    string
	mode        string
	output      string
	chart       string
	reference   string
	parallel    int
	bound       bool
	workload    string
}

// replayJob is validated options.
type replayJob struct {
	replayOptions
	policies []string
	seedList []int64
}

func newReplayCommand(stderr io.Writer) *cobra.Command {
	o := replayOptions{}
	cmd := &cobra.Command{
		Use:   "replay",
		Short: "Replay a pod trace with one or more placement policies",
		Long: "Replay a pod trace through the placement engine and report how much GPU\n" +
			"capacity each policy leaves unallocated.\n\n" +
			"Mode sample (the default) is the FGD paper's method (Weng et al., ATC '23), as its\n" +
			"simulator runs it: every pod of the list once in random order, then pods drawn\n" +
			"with replacement until the GPU requests reach 130% of capacity (a list that asks\n" +
			"for more loses pods at random), placed one by one; none ever leaves. With\n" +
			"--sampling replacement every arrival is drawn with replacement instead.\n" +
			"The report gives, per policy,\n" +
			"the unallocated GPU % when the arrived requests reach 100% and 130% of capacity,\n" +
			"as mean ± sample std over the seeds.\n\n" +
			"Mode events replays the trace in time order: pods arrive at creation_time and\n" +
			"leave at deletion_time, and the report follows the allocation over time.\n\n" +
			"Without --nodes and --pods, a built-in synthetic openb-like trace is replayed.\n" +
			"Trace files are the Alibaba GPU trace v2023 (\"openb\") node and pod lists.",
		Example: replayExample,
		Args:    cmdutil.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			job, err := o.validate(cmd)
			if err != nil {
				return err
			}
			return job.run(cmd.OutOrStdout(), stderr)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.nodes, "nodes", "", "node list CSV (openb_node_list_*.csv); needs --pods")
	f.StringVar(&o.pods, "pods", "", "pod list CSV (openb_pod_list_*.csv); needs --nodes")
	f.IntVar(&o.hosts, "hosts", defaultSyntheticHosts, "hosts of the built-in synthetic trace (without --nodes and --pods)")
	f.StringVar(&o.policy, "policy", placement.DefaultPolicy,
		"placement policy: "+strings.Join(placement.Policies(), ", ")+`; a comma-separated list; or "all"`)
	f.StringVar(&o.seeds, "seeds", defaultSeeds, `random seeds: a range "42-51", a list "42,43" or both "1,5-8"`)
	f.Float64Var(&o.inflation, "inflation", replayInflation, "sample mode: sample pods until GPU requests reach this multiple of capacity")
	f.StringVar(&o.sampling, "sampling", sim.SampleReference, `sample mode: "reference" (the paper's simulator: the whole list shuffled, then resampled to --inflation) or "replacement" (every arrival drawn with replacement)`)
	f.StringVar(&o.mode, "mode", "sample", `"sample" (paper's method: sampled arrivals, no departures) or "events" (creation/deletion times)`)
	f.StringVarP(&o.output, "output", "o", "table", `output format: "table" or "json"`)
	f.StringVar(&o.chart, "chart", "", "also write an SVG chart to this file (sample: allocation vs arrival for the first seed; events: allocation over time)")
	f.StringVar(&o.reference, "reference", "", "sample mode: the paper's results (reference_unallocated_gpu_by_policy.csv) to show next to ours")
	f.StringVar(&o.workload, "workload", sim.WorkloadTrace, `sample mode: what the default policy expects: "trace" (the pod list) or "learned" (the generic mix, then the mix the fleet runs, as the live scheduler learns it)`)
	f.BoolVar(&o.bound, "bound", false, "sample mode: also give, per seed, the least unallocated GPU % any placement of the same arrivals could leave (the fractional packing bound)")
	f.IntVar(&o.parallel, "parallel", 0, fmt.Sprintf("runs to execute at once; 0 means one per CPU (%d here)", runtime.NumCPU()))
	return cmd
}

// validate checks the flags; its errors are usage errors.
func (o replayOptions) validate(cmd *cobra.Command) (*replayJob, error) {
	j := &replayJob{replayOptions: o}
	if (o.nodes == "") != (o.pods == "") {
		return nil, cmdutil.Usagef(cmd, "--nodes and --pods must be given together (neither replays the built-in synthetic trace)")
	}
	if o.nodes != "" && cmd.Flags().Changed("hosts") {
		return nil, cmdutil.Usagef(cmd, "--hosts sizes the built-in synthetic trace; it cannot be used with --nodes and --pods")
	}
	if o.hosts < 1 {
		return nil, cmdutil.Usagef(cmd, "--hosts %d: must be at least 1", o.hosts)
	}
	var err error
	if j.policies, err = parsePolicies(o.policy); err != nil {
		return nil, &cmdutil.UsageError{Err: err, Path: cmd.CommandPath()}
	}
	if j.seedList, err = parseSeeds(o.seeds); err != nil {
		return nil, cmdutil.Usagef(cmd, "--seeds %q: %v", o.seeds, err)
	}
	switch o.mode {
	case "sample", "events":
	default:
		return nil, cmdutil.Usagef(cmd, `--mode %q: want "sample" or "events"`, o.mode)
	}
	if o.bound && o.mode != "sample" {
		return nil, cmdutil.Usagef(cmd, "--bound applies to --mode sample only")
	}
	switch {
	case o.workload != sim.WorkloadTrace && o.workload != sim.WorkloadLearned:
		return nil, cmdutil.Usagef(cmd, "--workload %q: want %q or %q", o.workload, sim.WorkloadTrace, sim.WorkloadLearned)
	case o.workload != sim.WorkloadTrace && o.mode != "sample":
		return nil, cmdutil.Usagef(cmd, "--workload applies to --mode sample only")
	}
	switch o.output {
	case "table", "json":
	default:
		return nil, cmdutil.Usagef(cmd, `--output %q: want "table" or "json"`, o.output)
	}
	switch {
	case o.parallel < 0:
		return nil, cmdutil.Usagef(cmd, "--parallel %d: must not be negative", o.parallel)
	case o.parallel == 0:
		j.parallel = runtime.NumCPU()
	}
	if o.sampling != sim.SampleReference && o.sampling != sim.SampleReplacement {
		return nil, cmdutil.Usagef(cmd, "--sampling %q: want %q or %q", o.sampling, sim.SampleReference, sim.SampleReplacement)
	}
	if o.inflation < 1 || o.inflation > 10 {
		// Below 1 the 100% arrival point is never reached.
		return nil, cmdutil.Usagef(cmd, "--inflation %v: want 1..10 (the paper uses 1.3)", o.inflation)
	}
	return j, nil
}

// parsePolicies resolves "all", a name or a comma-separated list to
// canonical policy names, in order and without repeats.
func parsePolicies(s string) ([]string, error) {
	if strings.EqualFold(strings.TrimSpace(s), "all") {
		return placement.Policies(), nil
	}
	var out []string
	seen := map[string]bool{}
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		sc, err := placement.NewScorer(name, nil)
		if err != nil {
			return nil, fmt.Errorf(`--policy: %v, or "all"`, err)
		}
		if !seen[sc.Name()] {
			seen[sc.Name()] = true
			out = append(out, sc.Name())
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf(`--policy: no policy given (known: %s, or "all")`, strings.Join(placement.Policies(), ", "))
	}
	return out, nil
}

// parseSeeds parses "42-51", "42,43" and mixes such as "1,5-8" into a list
// without repeats, in the order given.
func parseSeeds(s string) ([]int64, error) {
	var out []int64
	seen := map[int64]bool{}
	add := func(v int64) error {
		if !seen[v] {
			if len(out) == maxSeeds {
				return fmt.Errorf("more than %d seeds", maxSeeds)
			}
			seen[v] = true
			out = append(out, v)
		}
		return nil
	}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		if !isRange {
			v, err := strconv.ParseInt(part, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%q is not an integer", part)
			}
			if err := add(v); err != nil {
				return nil, err
			}
			continue
		}
		a, err1 := strconv.ParseInt(strings.TrimSpace(lo), 10, 64)
		b, err2 := strconv.ParseInt(strings.TrimSpace(hi), 10, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%q is not a range of non-negative integers like 42-51", part)
		}
		if a > b {
			return nil, fmt.Errorf("range %q runs backwards", part)
		}
		if b-a >= maxSeeds {
			return nil, fmt.Errorf("range %q has more than %d seeds", part, maxSeeds)
		}
		for v := a; v <= b; v++ {
			if err := add(v); err != nil {
				return nil, err
			}
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no seeds given")
	}
	return out, nil
}

// loadedTrace is the trace rows plus how to describe them.
type loadedTrace struct {
	name      string
	nodes     []sim.TraceNode
	pods      []sim.TracePod
	synthetic bool
	note      string
}

func (j *replayJob) load() (*loadedTrace, error) {
	if j.nodes == "" {
		nodes, pods := sim.SyntheticTrace(j.hosts, syntheticSeed)
		return &loadedTrace{
			name: fmt.Sprintf("synthetic-%d", j.hosts), nodes: nodes, pods: pods, synthetic: true,
			note: fmt.Sprintf("built-in synthetic openb-like trace (%d hosts); pass --nodes and --pods to replay a real one", j.hosts),
		}, nil
	}
	nodes, err := sim.ReadNodes(j.nodes)
	if err != nil {
		return nil, err
	}
	pods, err := sim.ReadPods(j.pods)
	if err != nil {
		return nil, err
	}
	return &loadedTrace{name: sim.ReferenceWorkload(j.pods), nodes: nodes, pods: pods}, nil
}

// newTrace builds a trace from the rows. Errors from sim.NewTrace name the
// node or pod and its line; this adds the file.
func (j *replayJob) newTrace(lt *loadedTrace) (*sim.Trace, error) {
	t, err := sim.NewTrace(lt.name, lt.nodes, lt.pods, nil)
	if err != nil {
		switch msg := err.Error(); {
		case lt.synthetic:
			return nil, fmt.Errorf("synthetic trace: %w", err)
		case strings.HasPrefix(msg, "node "):
			return nil, fmt.Errorf("%s: %w", j.nodes, err)
		case strings.HasPrefix(msg, "pod "):
			return nil, fmt.Errorf("%s: %w", j.pods, err)
		}
		return nil, err
	}
	t.Inflation, t.Sampling, t.WorkloadSource = j.inflation, j.sampling, j.workload
	return t, nil
}

func (j *replayJob) run(stdout, stderr io.Writer) error {
	lt, err := j.load()
	if err != nil {
		return err
	}
	if j.mode == "events" && len(lt.pods) > 0 && !lt.pods[0].HasTimes {
		return fmt.Errorf("%s has no creation_time/deletion_time columns (the multigpu* pod lists have none): --mode events needs them; use --mode sample", j.pods)
	}
	base, err := j.newTrace(lt)
	if err != nil {
		return err
	}
	if base.GPUMilli == 0 {
		return fmt.Errorf("%s: no GPU nodes, nothing to replay", j.nodes)
	}
	var refs []sim.Reference
	if j.reference != "" {
		if j.mode == "events" {
			fmt.Fprintln(stderr, "warning: --reference is ignored with --mode events")
		} else if refs, err = sim.ReadReference(j.reference); err != nil {
			return err
		}
	}
	// Each worker replays on its own Trace: Replay is not safe to run
	// concurrently on one (placement resolves request model names in
	// place, which races on the shared requests).
	traces := make(chan *sim.Trace, j.parallel)
	traces <- base
	getTrace := func() (*sim.Trace, error) {
		select {
		case t := <-traces:
			return t, nil
		default:
			return j.newTrace(lt)
		}
	}
	putTrace := func(t *sim.Trace) {
		select {
		case traces <- t:
		default:
		}
	}

	var out bytes.Buffer
	if j.mode == "events" {
		err = j.runEvents(base, lt, getTrace, putTrace, &out, stderr)
	} else {
		err = j.runSample(base, lt, refs, getTrace, putTrace, &out, stderr)
	}
	if err != nil {
		return err
	}
	_, err = stdout.Write(out.Bytes())
	return err
}

func (j *replayJob) runSample(base *sim.Trace, lt *loadedTrace, refs []sim.Reference,
	getTrace func() (*sim.Trace, error), putTrace func(*sim.Trace), out io.Writer, stderr io.Writer) error {
	total := 0
	for _, s := range j.seedList {
		total += len(base.Sample(s, j.inflation))
	}
	total *= len(j.policies)
	bar := progress.New(stderr, fmt.Sprintf("replay %s × %d seeds", plural(len(j.policies), "policy", "policies"), len(j.seedList)), total)
	runs := make([]*sim.Run, len(j.policies)*len(j.seedList))
	err := parallel(len(runs), j.parallel, func(i int) error {
		t, err := getTrace()
		if err != nil {
			return err
		}
		defer putTrace(t)
		policy, seed := j.policies[i/len(j.seedList)], j.seedList[i%len(j.seedList)]
		runs[i], err = t.Replay(policy, seed, func() { bar.Add(1) })
		if err != nil {
			return fmt.Errorf("replay %s seed %d: %w", policy, seed, err)
		}
		return nil
	})
	bar.Done()
	if err != nil {
		return err
	}

	rep := sim.NewReport(base, runs)
	rep.Inflation, rep.Sampling, rep.WorkloadSource = j.inflation, j.sampling, j.workload
	if j.bound {
		at100, at130 := make([]float64, len(j.seedList)), make([]float64, len(j.seedList))
		err := parallel(len(j.seedList), j.parallel, func(i int) error {
			t, err := getTrace()
			if err != nil {
				return err
			}
			defer putTrace(t)
			if at100[i], at130[i], err = t.PackingBound(j.seedList[i]); err != nil {
				return fmt.Errorf("bound, seed %d: %w", j.seedList[i], err)
			}
			return nil
		})
		if err != nil {
			return err
		}
		rep.SetBound(at100, at130)
	}
	rep.Synthetic, rep.Note = lt.synthetic, lt.note
	if refs != nil {
		if lt.synthetic {
			fmt.Fprintln(stderr, "warning: --reference ignored: the paper has no results for the built-in synthetic trace")
		} else if rep.AttachReference(refs, lt.name) == 0 {
			fmt.Fprintf(stderr, "warning: %s has no results for workload %q or these policies (it has %s)\n",
				j.reference, lt.name, strings.Join(referenceWorkloads(refs), ", "))
		}
	}
	if j.chart != "" {
		if err := writeChart(j.chart, func(w io.Writer) error { return sim.WriteCurves(w, runs) }); err != nil {
			return err
		}
	}
	if j.output == "json" {
		return rep.WriteJSON(out)
	}
	if err := rep.WriteTable(out); err != nil {
		return err
	}
	if j.chart != "" {
		fmt.Fprintf(out, "\nchart: %s\n", j.chart)
	}
	return nil
}

func (j *replayJob) runEvents(base *sim.Trace, lt *loadedTrace,
	getTrace func() (*sim.Trace, error), putTrace func(*sim.Trace), out io.Writer, stderr io.Writer) error {
	events, _, err := base.Events()
	if err != nil {
		if errors.Is(err, sim.ErrNoTimes) && !lt.synthetic {
			return fmt.Errorf("%s: %w", j.pods, err)
		}
		return err
	}
	arrivals := 0
	for _, e := range events {
		if !e.Depart {
			arrivals++
		}
	}
	seed := j.seedList[0]
	bar := progress.New(stderr, fmt.Sprintf("events %s", plural(len(j.policies), "policy", "policies")), arrivals*len(j.policies))
	runs := make([]*sim.EventsRun, len(j.policies))
	err = parallel(len(runs), j.parallel, func(i int) error {
		t, err := getTrace()
		if err != nil {
			return err
		}
		defer putTrace(t)
		runs[i], err = t.ReplayEvents(j.policies[i], seed, sim.EventsOptions{MaxPoints: eventsChartPoints, Progress: func() { bar.Add(1) }})
		if err != nil {
			return fmt.Errorf("events replay %s: %w", j.policies[i], err)
		}
		return nil
	})
	bar.Done()
	if err != nil {
		return err
	}
	rep := sim.NewEventsReport(base, runs)
	rep.Synthetic, rep.Note = lt.synthetic, lt.note
	if j.chart != "" {
		if err := writeChart(j.chart, func(w io.Writer) error { return sim.WriteEventsChart(w, rep.Runs) }); err != nil {
			return err
		}
	}
	if j.output == "json" {
		return rep.WriteJSON(out)
	}
	if err := rep.WriteTable(out); err != nil {
		return err
	}
	if j.chart != "" {
		fmt.Fprintf(out, "\nchart: %s\n", j.chart)
	}
	return nil
}

// parallel calls fn(0..n-1) on up to workers goroutines. After the first
// error no new calls start; that error is returned.
func parallel(n, workers int, fn func(i int) error) error {
	var (
		next     atomic.Int64
		failed   atomic.Bool
		firstErr error
		once     sync.Once
		wg       sync.WaitGroup
	)
	for w := 0; w < min(workers, n); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !failed.Load() {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					once.Do(func() { firstErr = err })
					failed.Store(true)
				}
			}
		}()
	}
	wg.Wait()
	return firstErr
}

// writeChart renders into memory first, so that a failed render leaves no
// half-written file.
func writeChart(path string, render func(io.Writer) error) error {
	var b bytes.Buffer
	if err := render(&b); err != nil {
		return fmt.Errorf("chart %s: %w", path, err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("writing chart: %w", err)
	}
	return nil
}

func referenceWorkloads(refs []sim.Reference) []string {
	var out []string
	seen := map[string]bool{}
	for _, r := range refs {
		if !seen[r.Workload] {
			seen[r.Workload] = true
			out = append(out, r.Workload)
		}
	}
	return out
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}
