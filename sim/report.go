package sim

import (
	"cmp"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gpucloud/gpucloud/placement"
)

// This file aggregates sampled replays (Trace.Replay) into a report: per
// policy the mean and sample standard deviation over seeds of the
// unallocated GPU share at 100% and 130% arrival, optionally next to the FGD
// paper's numbers, as a text table, as JSON, and as an SVG of the curves.

// Stat is a mean and sample standard deviation over N values.
type Stat struct {
	Mean float64 `json:"mean"`
	// Std is the sample (n-1) standard deviation, 0 when N < 2.
	Std float64 `json:"std"`
	N   int     `json:"n"`
}

// NewStat computes the mean and sample standard deviation of vs.
func NewStat(vs []float64) Stat {
	s := Stat{N: len(vs)}
	if s.N == 0 {
		return s
	}
	for _, v := range vs {
		s.Mean += v
	}
	s.Mean /= float64(s.N)
	if s.N > 1 {
		ss := 0.0
		for _, v := range vs {
			ss += (v - s.Mean) * (v - s.Mean)
		}
		s.Std = math.Sqrt(ss / float64(s.N-1))
	}
	return s
}

// SeedResult is one run of a policy.
type SeedResult struct {
	Seed       int64   `json:"seed"`
	Arrivals   int     `json:"arrivals"`
	Failed     int     `json:"failed"`
	Unalloc100 float64 `json:"unalloc_pct_at_100"`
	Unalloc130 float64 `json:"unalloc_pct_at_130"`
	ElapsedSec float64 `json:"elapsed_s"`
}

// PolicyStats aggregates one policy's runs over seeds.
type PolicyStats struct {
	Policy string `json:"policy"`
	// Default marks placement.DefaultPolicy.
	Default bool `json:"default,omitempty"`
	// Unalloc100 and Unalloc130 are the unallocated GPU % when the
	// arrived GPU requests reach 100% and 130% of capacity.
	Unalloc100 Stat `json:"unalloc_pct_at_100"`
	Unalloc130 Stat `json:"unalloc_pct_at_130"`
	// FailedMean is the mean number of arrivals that did not fit.
	FailedMean   float64 `json:"failed_mean"`
	ArrivalsMean float64 `json:"arrivals_mean"`
	// ElapsedMeanSec is the mean wall time of one run, in seconds.
	ElapsedMeanSec float64 `json:"elapsed_mean_s"`
	// Paper is the FGD paper's result for the equivalent policy on the
	// same workload, when a reference was attached and has one.
	Paper *Reference `json:"paper,omitempty"`
	// Seeds holds the per-seed values, in run order.
	Seeds []SeedResult `json:"seeds"`
}

// Report is the aggregate of sampled replays of one trace.
type Report struct {
	Trace string `json:"trace"`
	// Note is an extra header line, e.g. that the trace is synthetic.
	Note      string  `json:"note,omitempty"`
	Synthetic bool    `json:"synthetic,omitempty"`
	Hosts     int     `json:"hosts"`
	GPUs      int     `json:"gpus"`
	Pods      int     `json:"pods"`
	Inflation float64 `json:"inflation,omitempty"`
	// Sampling is how the arrivals were drawn (Trace.Sampling; empty means
	// SampleReference).
	Sampling string `json:"sampling,omitempty"`
	// WorkloadSource is what the default policy expected
	// (Trace.WorkloadSource; empty means WorkloadTrace).
	WorkloadSource string `json:"workload,omitempty"`
	// Seeds lists every seed run, in order of first appearance.
	Seeds []int64 `json:"seeds"`
	// ReferenceWorkload is the reference workload the paper numbers come
	// from, empty when none was attached.
	ReferenceWorkload string `json:"reference_workload,omitempty"`
	// Policies are in table order: the default policy first, then by
	// increasing unallocated GPU at 100% arrival.
	Policies []PolicyStats `json:"policies"`
	// Bound100 and Bound130 are the fractional packing bound over the
	// seeds (Trace.PackingBound), when it was computed.
	Bound100 *Stat `json:"bound_pct_at_100,omitempty"`
	Bound130 *Stat `json:"bound_pct_at_130,omitempty"`
}

// SetBound attaches the packing bound's per-seed values at 100% and 130%
// arrival.
func (r *Report) SetBound(at100, at130 []float64) {
	s100, s130 := NewStat(at100), NewStat(at130)
	r.Bound100, r.Bound130 = &s100, &s130
}

// NewReport aggregates runs of trace t by policy. A run whose unallocated
// share is not a number (no arrivals, so nothing was allocated) counts as
// 100% unallocated.
func NewReport(t *Trace, runs []*Run) *Report {
	r := &Report{Trace: t.Name, Hosts: len(t.Hosts), GPUs: int(t.GPUMilli / 1000), Pods: len(t.Pods), Seeds: []int64{}}
	byPolicy := map[string]int{}
	seenSeed := map[int64]bool{}
	for _, run := range runs {
		if !seenSeed[run.Seed] {
			seenSeed[run.Seed] = true
			r.Seeds = append(r.Seeds, run.Seed)
		}
		i, ok := byPolicy[run.Policy]
		if !ok {
			i = len(r.Policies)
			byPolicy[run.Policy] = i
			r.Policies = append(r.Policies, PolicyStats{Policy: run.Policy, Default: run.Policy == placement.DefaultPolicy})
		}
		p := &r.Policies[i]
		p.Seeds = append(p.Seeds, SeedResult{
			Seed: run.Seed, Arrivals: run.Arrivals, Failed: run.Failed,
			Unalloc100: finiteOrDefault(run.Unalloc100, 100), Unalloc130: finiteOrDefault(run.Unalloc130, 100),
			ElapsedSec: run.Elapsed.Seconds(),
		})
	}
	for i := range r.Policies {
		p := &r.Policies[i]
		u100 := make([]float64, len(p.Seeds))
		u130 := make([]float64, len(p.Seeds))
		for j, s := range p.Seeds {
			u100[j], u130[j] = s.Unalloc100, s.Unalloc130
			p.FailedMean += float64(s.Failed)
			p.ArrivalsMean += float64(s.Arrivals)
			p.ElapsedMeanSec += s.ElapsedSec
		}
		n := float64(len(p.Seeds))
		p.FailedMean /= n
		p.ArrivalsMean /= n
		p.ElapsedMeanSec /= n
		p.Unalloc100, p.Unalloc130 = NewStat(u100), NewStat(u130)
	}
	slices.SortStableFunc(r.Policies, func(a, b PolicyStats) int {
		if c := defaultPolicyFirst(a.Policy, b.Policy); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Unalloc100.Mean, b.Unalloc100.Mean); c != 0 {
			return c
		}
		return cmp.Compare(a.Policy, b.Policy)
	})
	return r
}

func finiteOrDefault(v, def float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return def
	}
	return v
}

// defaultPolicyFirst orders placement.DefaultPolicy before any other policy.
func defaultPolicyFirst(a, b string) int {
	switch {
	case a == b:
		return 0
	case a == placement.DefaultPolicy:
		return -1
	case b == placement.DefaultPolicy:
		return 1
	}
	return 0
}

// Reference is one row of reference_unallocated_gpu_by_policy.csv: the FGD
// paper's result for a workload and policy.
type Reference struct {
	// Workload is the pod list, e.g. "openb_pod_list_default".
	Workload string `json:"workload"`
	// Policy is the paper's name (Random, DotProd, GpuClustering,
	// GpuPacking, BestFit, FGD); Builtin the equivalent built-in policy, empty
	// for GpuClustering, which has none.
	Policy    string `json:"policy"`
	Builtin   string `json:"builtin,omitempty"`
	Seeds     int    `json:"seeds"`
	TotalGPUs int    `json:"total_gpus"`
	// Unalloc100 and Unalloc130 are the unallocated GPU % at 100% and 130%
	// arrival, over Seeds seeds; Unalloc100GPUs is Unalloc100's mean as a
	// count of GPUs.
	Unalloc100     Stat    `json:"unalloc_pct_at_100"`
	Unalloc100GPUs float64 `json:"unalloc_gpus_at_100"`
	Unalloc130     Stat    `json:"unalloc_pct_at_130"`
	Line           int     `json:"-"`
}

// paperPolicies maps the paper's policy names (lower-cased) to ours.
var paperPolicies = map[string]string{
	"random":        "random",
	"dotprod":       "dotprod",
	"gpuclustering": "",
	"gpupacking":    "packing",
	"bestfit":       "bestfit",
	"fgd":           "fgd",
}

// ReferencePolicy maps a policy name of the FGD paper's results to the
// equivalent built-in policy. ok is false for names it does not know;
// GpuClustering is known but has no equivalent ("", true).
func ReferencePolicy(paper string) (ours string, ok bool) {
	ours, ok = paperPolicies[strings.ToLower(strings.TrimSpace(paper))]
	return ours, ok
}

var referenceColumns = []string{
	"workload", "policy", "seeds", "total_gpus",
	"unalloc_pct_at_arrival100_mean", "unalloc_pct_at_arrival100_std", "unalloc_gpus_at_arrival100",
	"unalloc_pct_at_arrival130_mean", "unalloc_pct_at_arrival130_std",
}

// ReadReference reads reference_unallocated_gpu_by_policy.csv. Errors name
// path (as given) and line.
func ReadReference(path string) ([]Reference, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading reference: %w", err)
	}
	defer f.Close()
	return ParseReference(f, path)
}

// ParseReference parses the reference CSV; source names the input in
// errors ("source:line: ..."). Columns are found by header name.
func ParseReference(rd io.Reader, source string) ([]Reference, error) {
	r := csv.NewReader(rd)
	r.FieldsPerRecord = -1
	perr := func(err error) error {
		var pe *csv.ParseError
		if errors.As(err, &pe) {
			return fmt.Errorf("%s:%d: %v", source, pe.Line, pe.Err)
		}
		return fmt.Errorf("%s: %w", source, err)
	}
	header, err := r.Read()
	if err == io.EOF {
		return nil, fmt.Errorf("%s:1: no rows: the file is empty", source)
	}
	if err != nil {
		return nil, perr(err)
	}
	headerLine, _ := r.FieldPos(0)
	col := map[string]int{}
	for i, h := range header {
		if i == 0 {
			h = strings.TrimPrefix(h, "\uFEFF")
		}
		col[strings.ToLower(strings.TrimSpace(h))] = i
	}
	var missing []string
	for _, c := range referenceColumns {
		if _, ok := col[c]; !ok {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%s:%d: missing required column(s) %s", source, headerLine, strings.Join(missing, ", "))
	}
	var out []Reference
	for {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, perr(err)
		}
		line, _ := r.FieldPos(0)
		if len(rec) != len(header) {
			return nil, fmt.Errorf("%s:%d: row has %d fields, header has %d", source, line, len(rec), len(header))
		}
		field := func(name string) string { return strings.TrimSpace(rec[col[name]]) }
		num := func(name string) (float64, error) {
			s := field(name)
			v, err := strconv.ParseFloat(s, 64)
			if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
				return 0, fmt.Errorf("%s:%d: %s: %q is not a number", source, line, name, s)
			}
			return v, nil
		}
		ref := Reference{Workload: field("workload"), Policy: field("policy"), Line: line}
		if ref.Workload == "" || ref.Policy == "" {
			return nil, fmt.Errorf("%s:%d: workload and policy must not be empty", source, line)
		}
		ref.Builtin, _ = ReferencePolicy(ref.Policy)
		var vals [7]float64
		for i, c := range referenceColumns[2:] {
			if vals[i], err = num(c); err != nil {
				return nil, err
			}
		}
		ref.Seeds, ref.TotalGPUs = int(vals[0]), int(vals[1])
		ref.Unalloc100 = Stat{Mean: vals[2], Std: vals[3], N: ref.Seeds}
		ref.Unalloc100GPUs = vals[4]
		ref.Unalloc130 = Stat{Mean: vals[5], Std: vals[6], N: ref.Seeds}
		out = append(out, ref)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s:%d: no rows after the header", source, headerLine)
	}
	return out, nil
}

// ReferenceWorkload derives the reference workload name from a pod list
// path: "…/openb_pod_list_default.csv" gives "openb_pod_list_default".
func ReferenceWorkload(podsPath string) string {
	base := filepath.Base(podsPath)
	if ext := filepath.Ext(base); strings.EqualFold(ext, ".csv") {
		base = base[:len(base)-len(ext)]
	}
	return base
}

// sameWorkload compares workload names ignoring case, a ".csv" suffix and
// the "openb_pod_list_" prefix, so "default" matches too.
func sameWorkload(a, b string) bool {
	norm := func(s string) string {
		s = strings.ToLower(strings.TrimSpace(s))
		s = strings.TrimSuffix(s, ".csv")
		return strings.TrimPrefix(s, "openb_pod_list_")
	}
	return norm(a) == norm(b)
}

// AttachReference sets PolicyStats.Paper from refs for workload (see
// ReferenceWorkload) and returns how many policies got one.
func (r *Report) AttachReference(refs []Reference, workload string) int {
	matched := 0
	for i := range r.Policies {
		p := &r.Policies[i]
		p.Paper = nil
		for j := range refs {
			if refs[j].Builtin != "" && refs[j].Builtin == p.Policy && sameWorkload(refs[j].Workload, workload) {
				ref := refs[j]
				p.Paper = &ref
				matched++
				break
			}
		}
	}
	r.ReferenceWorkload = ""
	if matched > 0 {
		r.ReferenceWorkload = workload
	}
	return matched
}

// WriteTable writes the report as an aligned text table: policy, unallocated
// GPU % at 100% and 130% arrival (mean ± std), the paper's value at 100%
// when a reference is attached, failed arrivals and time per seed.
func (r *Report) WriteTable(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "trace %s: %d hosts, %d GPUs, %d pods\n", r.Trace, r.Hosts, r.GPUs, r.Pods)
	if r.Note != "" {
		fmt.Fprintf(&b, "%s\n", r.Note)
	}
	infl := ""
	if r.Inflation > 0 {
		infl = fmt.Sprintf(" to %s%% of GPU capacity", strconv.FormatFloat(100*r.Inflation, 'f', -1, 64))
	}
	how := "the pod list shuffled, then resampled"
	if r.Sampling == SampleReplacement {
		how = "pods sampled with replacement"
	}
	fmt.Fprintf(&b, "%s%s, no departures; seeds %s (%d)\n", how, infl, FormatSeeds(r.Seeds), len(r.Seeds))
	if r.WorkloadSource == WorkloadLearned {
		fmt.Fprintf(&b, "workload: the default policy starts with the generic mix and learns the mix the fleet runs, as the live scheduler does (fgd keeps the pod list)\n")
	}
	fmt.Fprintf(&b, "unallocated GPU %% when arrived GPU requests reach 100%% and 130%% of capacity, mean ± sample std over seeds\n")
	paper := false
	for _, p := range r.Policies {
		paper = paper || p.Paper != nil
	}
	if paper {
		fmt.Fprintf(&b, "paper: Weng et al., ATC '23 (FGD), workload %s\n", r.ReferenceWorkload)
	}
	b.WriteString("\n")
	head := []string{"policy", "unalloc% @100", "unalloc% @130"}
	if paper {
		head = append(head, "paper @100")
	}
	head = append(head, "failed", "time/seed")
	rows := [][]string{head}
	for _, p := range r.Policies {
		row := []string{p.Policy, fmtStat(p.Unalloc100), fmtStat(p.Unalloc130)}
		if paper {
			cell := "-"
			if p.Paper != nil {
				cell = fmtStat(p.Paper.Unalloc100)
			}
			row = append(row, cell)
		}
		failed := strconv.FormatFloat(p.FailedMean, 'f', 1, 64)
		if p.FailedMean == math.Trunc(p.FailedMean) {
			failed = strconv.FormatFloat(p.FailedMean, 'f', 0, 64)
		}
		row = append(row, failed, fmtRunTime(time.Duration(p.ElapsedMeanSec*float64(time.Second))))
		rows = append(rows, row)
	}
	writeTextTable(&b, rows)
	if r.Bound100 != nil {
		fmt.Fprintf(&b, "\nbound: no placement of the same arrivals leaves less than %s @100 or %s @130\n",
			fmtStat(*r.Bound100), fmtStat(*r.Bound130))
		b.WriteString("(the fractional packing bound: GPUs of every model pooled, CPU and memory left out)\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	return writeIndentedJSON(w, r)
}

// WriteCurves writes an SVG chart of the allocation curves: x is the
// arrived GPU request and y the allocated GPU, both in % of capacity, one
// series per policy (its first run in runs), the ideal y = x up to 100, and
// a marker at 100% arrival.
func WriteCurves(w io.Writer, runs []*Run) error {
	var firsts []*Run
	seen := map[string]bool{}
	for _, r := range runs {
		if seen[r.Policy] || len(r.Arrived) == 0 {
			continue
		}
		seen[r.Policy] = true
		firsts = append(firsts, r)
	}
	if len(firsts) == 0 {
		return errors.New("chart: no runs with an allocation curve")
	}
	slices.SortStableFunc(firsts, func(a, b *Run) int { return defaultPolicyFirst(a.Policy, b.Policy) })
	sameSeed := true
	for _, r := range firsts {
		sameSeed = sameSeed && r.Seed == firsts[0].Seed
	}
	title := "GPU allocation as pods arrive"
	if sameSeed {
		title += fmt.Sprintf(" (seed %d)", firsts[0].Seed)
	}
	// Policies differ only once the fleet fills: show arrivals from 60%
	// of capacity on, and allocation from just below the lowest curve.
	const fromX = 60
	xMax, yMin := 100.0, 100.0
	for _, r := range firsts {
		for i, x := range r.Arrived {
			xMax = math.Max(xMax, x)
			if x >= fromX {
				yMin = math.Min(yMin, r.Allocated[i])
			}
		}
	}
	yMin = math.Max(0, math.Floor(yMin/5)*5-5)
	c := Chart{
		Title:  title,
		XLabel: "arrived GPU requests (% of capacity)",
		YLabel: "allocated GPU (% of capacity)",
		XMin:   fromX, XMax: math.Ceil(xMax/5) * 5,
		YMin: yMin, YMax: 100,
		VLines: []VLine{{X: 100, Label: "100% arrival"}},
	}
	for _, r := range firsts {
		name := r.Policy
		if !sameSeed {
			name = fmt.Sprintf("%s (seed %d)", r.Policy, r.Seed)
		}
		c.Series = append(c.Series, Series{Name: name, X: r.Arrived, Y: r.Allocated})
	}
	c.Series = append(c.Series, Series{Name: "ideal", X: []float64{yMin, 100}, Y: []float64{yMin, 100}})
	return WriteSVG(w, c)
}

// FormatSeeds prints seeds compactly: consecutive runs as ranges, e.g.
// "42-51" or "1,3,7-9".
func FormatSeeds(seeds []int64) string {
	var parts []string
	for i := 0; i < len(seeds); {
		j := i
		for j+1 < len(seeds) && seeds[j+1] == seeds[j]+1 {
			j++
		}
		switch {
		case j == i:
			parts = append(parts, strconv.FormatInt(seeds[i], 10))
		case j == i+1:
			parts = append(parts, strconv.FormatInt(seeds[i], 10), strconv.FormatInt(seeds[j], 10))
		default:
			parts = append(parts, fmt.Sprintf("%d-%d", seeds[i], seeds[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

func fmtStat(s Stat) string {
	if s.N < 2 {
		return fmt.Sprintf("%.2f", s.Mean)
	}
	return fmt.Sprintf("%.2f ± %.2f", s.Mean, s.Std)
}

// fmtRunTime prints a run time with about three significant digits.
func fmtRunTime(d time.Duration) string {
	switch {
	case d >= time.Minute:
		return d.Round(time.Second).String()
	case d >= time.Second:
		return fmt.Sprintf("%.2fs", d.Seconds())
	}
	return fmt.Sprintf("%.0fms", float64(d)/float64(time.Millisecond))
}

// writeTextTable writes rows as columns separated by three spaces: the first
// column left-aligned, the others right-aligned, a rule under the header.
// Widths count runes, so "±" lines up.
func writeTextTable(b *strings.Builder, rows [][]string) {
	if len(rows) == 0 {
		return
	}
	widths := make([]int, len(rows[0]))
	for _, row := range rows {
		for i, cell := range row {
			widths[i] = max(widths[i], utf8.RuneCountInString(cell))
		}
	}
	line := func(row []string) {
		var l strings.Builder
		for i, cell := range row {
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(cell))
			if i > 0 {
				l.WriteString("   ")
				l.WriteString(pad)
				l.WriteString(cell)
			} else {
				l.WriteString(cell)
				l.WriteString(pad)
			}
		}
		b.WriteString(strings.TrimRight(l.String(), " "))
		b.WriteByte('\n')
	}
	line(rows[0])
	rule := make([]string, len(widths))
	for i, wd := range widths {
		rule[i] = strings.Repeat("-", wd)
	}
	line(rule)
	for _, row := range rows[1:] {
		line(row)
	}
}
