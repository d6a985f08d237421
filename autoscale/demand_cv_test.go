package autoscale

import (
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The cross-validation of the gpucloud policy's constants
// (docs/AUTOSCALING.md, "Figures"):
//
//	GPUCLOUD_DEMAND=/tmp/demand go test ./autoscale -run TestCrossValidate -cv -count=1 -v -timeout 3h
//
// It replays every candidate of cvGrid on every series of the varied set
// (cvSet: synthetic shapes, two seeds each, none of them the seeds of
// the Figures table, and the Alibaba series in $GPUCLOUD_DEMAND), then,
// leaving one shape out at a time, picks the candidate with the lowest
// loss on the other shapes and reports the held-out shape's figures under
// it. -cvtry NAME=V,... replays one candidate instead (on the series
// whose names match -cvonly), to explore.
var (
	cvRun     = flag.Bool("cv", false, "cross-validate the gpucloud policy's constants")
	cvTry     = flag.String("cvtry", "", "replay one candidate (sigmas=2,target=0.003,...) and print its figures")
	cvOnly    = flag.String("cvonly", "", "with -cv or -cvtry: only the series whose names match this regexp")
	cvDiag    = flag.Bool("cvdiag", false, "with -cvtry: the capacity by hour of day beside the oracle's")
	cvWorkers = flag.Int("cvworkers", 0, "replays run at once (default GOMAXPROCS)")
)

// cvSeries is one series of the varied set; shape names its fold.
type cvSeries struct {
	name, shape string
	s           Series
	// bursts are a synthetic series' (nil for a trace's): the burst bound.
	bursts *bursts
}

// cvSet is the varied set of the cross-validation.
func cvSet(t *testing.T) []cvSeries {
	day := 24 * 60
	var out []cvSeries
	for _, c := range []struct {
		shape string
		cfg   SyntheticConfig
	}{
		{"syn cycles+bursts 1m", SyntheticConfig{Steps: 28 * day}},
		{"syn cycles+bursts 1h", SyntheticConfig{Steps: 56 * 24, Interval: time.Hour}},
		{"syn bursty 1m", SyntheticConfig{Steps: 28 * day, Base: 100, BurstsPerWeek: 30, BurstGPUs: 80, Noise: 0.08}},
		{"syn trend +10%/wk 1m", SyntheticConfig{Steps: 28 * day, Trend: 0.1}},
		{"syn trend -5%/wk 1m", SyntheticConfig{Steps: 28 * day, Trend: -0.05}},
		{"syn office hours 1m", SyntheticConfig{Steps: 28 * day, Office: true}},
		{"syn tiny spiky 1m", SyntheticConfig{Steps: 28 * day, Base: 3, Daily: 0.3, Noise: 0.4, BurstsPerWeek: 40, BurstGPUs: 12}},
	} {
		for _, seed := range []uint64{101, 102, 103} {
			cfg := c.cfg
			cfg.Seed = seed + uint64(len(out))*10
			s, bs := syntheticBursts(cfg)
			out = append(out, cvSeries{name: fmt.Sprintf("%s seed %d", c.shape, cfg.Seed), shape: c.shape, s: s, bursts: &bs})
		}
	}
	if dir := os.Getenv("GPUCLOUD_DEMAND"); dir != "" {
		files, _ := filepath.Glob(filepath.Join(dir, "ali-*.csv"))
		for _, f := range files {
			s, err := ReadCSV(f, CSVOptions{})
			if err != nil {
				t.Fatal(err)
			}
			name := strings.TrimSuffix(filepath.Base(f), ".csv")
			shape := "Alibaba 1m"
			if s.Interval >= time.Hour {
				shape = "Alibaba 1h"
			}
			out = append(out, cvSeries{name: name, shape: shape, s: s})
		}
	}
	if *cvOnly != "" {
		re := regexp.MustCompile(*cvOnly)
		kept := out[:0]
		for _, x := range out {
			if re.MatchString(x.name) {
				kept = append(kept, x)
			}
		}
		out = kept
	}
	return out
}

// cvGrid is the candidates tried: one first (sigmas 1, target 0.45%,
// gain 4, prior 1: the values the grid was laid around) and the grid.
func cvGrid() []gcConfig {
	var out []gcConfig
	for _, sig := range []float64{1, 2} {
		for _, tu := range []float64{0.0035, 0.0045} {
			for _, gain := range []float64{2, 6} {
				for _, prior := range []float64{0.5, 2} {
					c := gcParams
					c.sigmas, c.targetUnmet, c.gain, c.prior = sig, tu, gain, prior
					out = append(out, c)
				}
			}
		}
	}
	first := gcParams
	first.sigmas, first.targetUnmet, first.gain, first.prior = 1, 0.0045, 4, 1
	return append([]gcConfig{first}, out...)
}

func (c gcConfig) String() string {
	return fmt.Sprintf("sigmas=%g,target=%g,gain=%g,min=%g,max=%g,prior=%g,days=%g,k=%g", c.sigmas, c.targetUnmet, c.gain, c.scaleMin, c.scaleMax, c.prior, c.slotDays, c.kLoss)
}

func parseGC(s string) (gcConfig, error) {
	c := gcParams
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		f, err := strconv.ParseFloat(v, 64)
		if !ok || err != nil {
			return c, fmt.Errorf("bad %q", kv)
		}
		switch k {
		case "sigmas":
			c.sigmas = f
		case "target":
			c.targetUnmet = f
		case "gain":
			c.gain = f
		case "min":
			c.scaleMin = f
		case "max":
			c.scaleMax = f
		case "prior":
			c.prior = f
		case "k":
			c.kLoss = f
		case "days":
			c.slotDays = f
		default:
			return c, fmt.Errorf("unknown %q", k)
		}
	}
	return c, nil
}

// cvLoss is a series' loss: capacity over the oracle's plus twice the
// percentage points of demand unmet above the goal's 0.5%.
func cvLoss(r Result) float64 {
	return r.CostVsOracle + 2*max(0, r.ShortfallPercent-0.5)
}

var cvOpt = ReplayOptions{Config: Config{Boot: 5 * time.Minute}, HistorySteps: -1}

// cvReplay replays every candidate on every series, a few at a time;
// out[c][s] is candidate c's result on series s.
func cvReplay(t *testing.T, set []cvSeries, grid []gcConfig) [][]Result {
	out := make([][]Result, len(grid))
	for c := range out {
		out[c] = make([]Result, len(set))
	}
	type job struct{ c, s int }
	jobs := make(chan job)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	n := *cvWorkers
	if n <= 0 {
		n = runtime.GOMAXPROCS(0)
	}
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				opt := cvOpt
				cfg := grid[j.c]
				opt.gc = &cfg
				r, err := Replay("gpucloud", set[j.s].s, opt)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				out[j.c][j.s] = r
				mu.Unlock()
			}
		}()
	}
	// The longest series first, so that the workers finish together.
	order := make([]int, len(set))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return len(set[order[a]].s.GPUs) > len(set[order[b]].s.GPUs) })
	for _, s := range order {
		for c := range grid {
			jobs <- job{c, s}
		}
	}
	close(jobs)
	wg.Wait()
	if firstErr != nil {
		t.Fatal(firstErr)
	}
	return out
}

func TestCrossValidate(t *testing.T) {
	if !*cvRun && *cvTry == "" {
		t.Skip("neither -cv nor -cvtry set")
	}
	set := cvSet(t)
	grid := cvGrid()
	if *cvTry != "" {
		c, err := parseGC(*cvTry)
		if err != nil {
			t.Fatal(err)
		}
		grid = []gcConfig{c}
	}
	start := time.Now()
	res := cvReplay(t, set, grid)
	t.Logf("%d candidates × %d series in %s", len(grid), len(set), time.Since(start).Round(time.Second))
	if *cvTry != "" {
		fmt.Printf("candidate %s\n", grid[0])
		for s, x := range set {
			r := res[0][s]
			re := cvOpt
			re.Config.TargetUtilization = 1
			rr, err := Replay("target", x.s, re)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Printf("  %-40s unmet %.3f%%  × oracle %.3f  actions %d  (target 100%%, no headroom: unmet %.3f%% × oracle %.3f)\n",
				x.name, r.ShortfallPercent, r.CostVsOracle, r.ScalingActions, rr.ShortfallPercent, rr.CostVsOracle)
			if *cvDiag {
				cvDiagnose(t, x.s, grid[0])
			}
		}
		return
	}
	shapes := []string{}
	seen := map[string]bool{}
	for _, x := range set {
		if !seen[x.shape] {
			seen[x.shape] = true
			shapes = append(shapes, x.shape)
		}
	}
	// loss(c, skip): the mean over shapes other than skip of the mean
	// loss of the shape's series.
	loss := func(c int, skip string) float64 {
		sum, n := 0.0, 0
		for _, sh := range shapes {
			if sh == skip {
				continue
			}
			l, k := 0.0, 0
			for s, x := range set {
				if x.shape == sh {
					l += cvLoss(res[c][s])
					k++
				}
			}
			sum += l / float64(k)
			n++
		}
		return sum / float64(max(1, n))
	}
	best := func(skip string) int {
		b := 0
		for c := range grid {
			if loss(c, skip) < loss(b, skip) {
				b = c
			}
		}
		return b
	}
	for c := range grid {
		fmt.Printf("candidate %2d %s: loss on all %.4f\n", c, grid[c], loss(c, ""))
	}
	all := best("")
	fmt.Printf("\nfitted on every shape: candidate %d %s\n\n", all, grid[all])
	// Target tracking at 70% beside the held-out figures.
	tt := make([]Result, len(set))
	for s, x := range set {
		r, err := Replay("target", x.s, cvOpt)
		if err != nil {
			t.Fatal(err)
		}
		tt[s] = r
	}
	fmt.Println("| held-out series | fitted on the other shapes | unmet % | × oracle | actions | target 70% unmet % | target × oracle | target actions | burst bound × oracle at 0.5% unmet | at the policy's unmet |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|")
	miss := 0
	for _, sh := range shapes {
		c := best(sh)
		for s, x := range set {
			if x.shape != sh {
				continue
			}
			r := res[c][s]
			if r.ShortfallPercent > 0.5 || r.CostVsOracle > 1.10 {
				miss++
			}
			bound := "| |"
			if x.bursts != nil {
				pts, err := burstFrontier(x.s, *x.bursts, cvOpt)
				if err != nil {
					t.Fatal(err)
				}
				bound = fmt.Sprintf("| %.3f | %.3f |", boundAt(pts, 0.5), boundAt(pts, r.ShortfallPercent))
			}
			fmt.Printf("| %s | %d | %.3f | %.3f | %d | %.3f | %.3f | %d %s\n", x.name, c, r.ShortfallPercent, r.CostVsOracle, r.ScalingActions,
				tt[s].ShortfallPercent, tt[s].CostVsOracle, tt[s].ScalingActions, bound)
		}
	}
	fmt.Printf("\nheld-out series missing the goal (0.5%% unmet, 1.10× oracle): %d of %d\n", miss, len(set))
	if math.IsNaN(loss(all, "")) {
		t.Fatal("loss is NaN")
	}
}

// cvDiagnose prints, by hour of day (weekdays, weekends), the mean
// instances the policy and the oracle pay for and the demand unmet.
func cvDiagnose(t *testing.T, s Series, c gcConfig) {
	opt := cvOpt
	opt.gc, opt.KeepTrace = &c, true
	r, err := Replay("gpucloud", s, opt)
	if err != nil {
		t.Fatal(err)
	}
	o, err := Oracle(s, opt)
	if err != nil {
		t.Fatal(err)
	}
	hist := DefaultHistory(len(s.GPUs), s.Interval)
	var pol, orc, dem, n [2][24]float64
	for i := hist; i < len(s.GPUs); i++ {
		tm := s.Time(i)
		w := 0
		if tm.Weekday() == time.Saturday || tm.Weekday() == time.Sunday {
			w = 1
		}
		h := tm.Hour()
		pol[w][h] += float64(r.Capacity[i])
		orc[w][h] += float64(o.Capacity[i])
		dem[w][h] += s.GPUs[i] / 8
		n[w][h]++
	}
	for w, name := range []string{"weekday", "weekend"} {
		fmt.Printf("    %s hour: policy/oracle/demand instances\n     ", name)
		for h := range 24 {
			k := max(1, n[w][h])
			fmt.Printf(" %d:%.1f/%.1f/%.1f", h, pol[w][h]/k, orc[w][h]/k, dem[w][h]/k)
		}
		fmt.Println()
	}
}

// TestGPUCloudMarginByTimeOfDay: on office hours (idle nights and
// weekends, a jump at 08:00), the margin the morning start needs is not
// held at night, and the goal holds; with one margin for all hours (the
// time-of-day and level records left out) the night pays for it.
func TestGPUCloudMarginByTimeOfDay(t *testing.T) {
	s := Synthetic(SyntheticConfig{Steps: 21 * 24 * 60, Seed: 9, Office: true})
	night := func(r Result) float64 {
		sum, n := 0.0, 0
		for i := DefaultHistory(len(s.GPUs), s.Interval); i < len(s.GPUs); i++ {
			if tm := s.Time(i); tm.Hour() < 6 && tm.Weekday() != time.Saturday && tm.Weekday() != time.Sunday {
				sum += float64(r.Capacity[i])
				n++
			}
		}
		return sum / float64(n)
	}
	opt := cvOpt
	opt.KeepTrace = true
	r, err := Replay("gpucloud", s, opt)
	if err != nil {
		t.Fatal(err)
	}
	if r.ShortfallPercent > 0.5 || r.CostVsOracle > 1.10 || night(r) > 2 {
		t.Errorf("gpucloud: %.3f%% unmet at %.3f× the oracle, %.2f instances at night; want at most 0.5%%, 1.10×, 2", r.ShortfallPercent, r.CostVsOracle, night(r))
	}
	flat := gcParams
	flat.prior = math.Inf(1) // every record shrunk all the way to the two days'
	opt.gc = &flat
	f, err := Replay("gpucloud", s, opt)
	if err != nil {
		t.Fatal(err)
	}
	if !(night(f) > night(r)+1) || !(f.CostVsOracle > r.CostVsOracle) {
		t.Errorf("one margin for all hours: %.2f instances at night at %.3f×; conditional %.2f at %.3f×: want the flat one to pay more",
			night(f), f.CostVsOracle, night(r), r.CostVsOracle)
	}
	t.Logf("conditional: %.3f%% unmet, %.3f×, %.2f at night; flat: %.3f%% unmet, %.3f×, %.2f at night",
		r.ShortfallPercent, r.CostVsOracle, night(r), f.ShortfallPercent, f.CostVsOracle, night(f))
}
