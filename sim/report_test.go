package sim

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gpucloud/gpucloud/placement"
)

func TestNewStat(t *testing.T) {
	s := NewStat([]float64{1, 2, 3, 4})
	if s.N != 4 || s.Mean != 2.5 || math.Abs(s.Std-1.2909944487358056) > 1e-12 {
		t.Errorf("got %+v", s)
	}
	if s := NewStat([]float64{7}); s != (Stat{Mean: 7, N: 1}) {
		t.Errorf("one value: %+v", s)
	}
	if s := NewStat(nil); s != (Stat{}) {
		t.Errorf("no values: %+v", s)
	}
}

func fakeRuns() []*Run {
	mk := func(policy string, seed int64, u100, u130 float64, failed int, ms int) *Run {
		return &Run{Policy: policy, Seed: seed, Arrivals: 100, Failed: failed, Unalloc100: u100, Unalloc130: u130,
			Arrived: []float64{50, 100, 130}, Allocated: []float64{50, 100 - u100, 100 - u130}, Elapsed: time.Duration(ms) * time.Millisecond}
	}
	return []*Run{
		mk("random", 42, 14, 12, 30, 10), mk("random", 43, 16, 13, 31, 30),
		mk("fgd", 42, 5, 4, 10, 100), mk("fgd", 43, 6, 5, 11, 300),
		mk(placement.DefaultPolicy, 42, 7, 6, 20, 200), mk(placement.DefaultPolicy, 43, math.NaN(), 6, 20, 200),
		mk("bestfit", 42, 7, 6, 12, 20), mk("bestfit", 43, 8, 7, 12, 20),
	}
}

func TestNewReport(t *testing.T) {
	tr := &Trace{Name: "tiny", GPUMilli: 8000, Pods: make([]TracePod, 3)}
	rep := NewReport(tr, fakeRuns())
	var order []string
	for _, p := range rep.Policies {
		order = append(order, p.Policy)
	}
	if got := strings.Join(order, " "); got != placement.DefaultPolicy+" fgd bestfit random" {
		t.Errorf("order %q: want the default policy first, then by unallocated GPU", got)
	}
	if rep.GPUs != 8 || rep.Pods != 3 || len(rep.Seeds) != 2 || rep.Seeds[0] != 42 {
		t.Errorf("header %+v", rep)
	}
	def := rep.Policies[0]
	if !def.Default || def.Seeds[1].Unalloc100 != 100 {
		t.Errorf("default policy %+v: NaN must count as 100%% unallocated", def)
	}
	fgd := rep.Policies[1]
	if fgd.Unalloc100.Mean != 5.5 || math.Abs(fgd.Unalloc100.Std-math.Sqrt(0.5)) > 1e-12 || fgd.Unalloc130.Mean != 4.5 {
		t.Errorf("fgd stats %+v %+v", fgd.Unalloc100, fgd.Unalloc130)
	}
	if fgd.FailedMean != 10.5 || fgd.ArrivalsMean != 100 || math.Abs(fgd.ElapsedMeanSec-0.2) > 1e-12 {
		t.Errorf("fgd means: failed %v arrivals %v elapsed %v", fgd.FailedMean, fgd.ArrivalsMean, fgd.ElapsedMeanSec)
	}
	if len(fgd.Seeds) != 2 || fgd.Seeds[1] != (SeedResult{Seed: 43, Arrivals: 100, Failed: 11, Unalloc100: 6, Unalloc130: 5, ElapsedSec: 0.3}) {
		t.Errorf("fgd seeds %+v", fgd.Seeds)
	}
}

const refCSV = "workload,policy,seeds,total_gpus,unalloc_pct_at_arrival100_mean,unalloc_pct_at_arrival100_std,unalloc_gpus_at_arrival100,unalloc_pct_at_arrival130_mean,unalloc_pct_at_arrival130_std\n" +
	"openb_pod_list_default,Random,10,6212,13.70,0.33,851,11.90,0.30\n" +
	"openb_pod_list_default,GpuClustering,10,6212,8.35,0.40,519,8.10,0.41\n" +
	"openb_pod_list_default,GpuPacking,10,6212,8.22,0.53,511,8.00,0.50\n" +
	"openb_pod_list_default,FGD,10,6212,4.77,0.11,296,4.60,0.10\n" +
	"openb_pod_list_cpu050,FGD,10,6212,5.00,0.11,311,4.79,0.09\n"

func TestParseReference(t *testing.T) {
	refs, err := ParseReference(strings.NewReader(refCSV), "ref.csv")
	if err != nil {
		t.Fatal(err)
	}
	if len(refs) != 5 {
		t.Fatalf("got %d rows", len(refs))
	}
	want := Reference{Workload: "openb_pod_list_default", Policy: "FGD", Builtin: "fgd", Seeds: 10, TotalGPUs: 6212,
		Unalloc100: Stat{4.77, 0.11, 10}, Unalloc100GPUs: 296, Unalloc130: Stat{4.60, 0.10, 10}, Line: 5}
	if refs[3] != want {
		t.Errorf("got  %+v\nwant %+v", refs[3], want)
	}
	if refs[1].Builtin != "" || refs[2].Builtin != "packing" || refs[0].Builtin != "random" {
		t.Errorf("policy mapping: %q %q %q", refs[0].Builtin, refs[1].Builtin, refs[2].Builtin)
	}

	for _, tc := range []struct{ in, want string }{
		{"", "ref.csv:1: no rows"},
		{"workload,policy\nx,FGD\n", "ref.csv:1: missing required column(s) seeds"},
		{strings.SplitAfter(refCSV, "\n")[0] + "w,FGD,10,6212,x,1,1,1,1\n", `ref.csv:2: unalloc_pct_at_arrival100_mean: "x" is not a number`},
		{strings.SplitAfter(refCSV, "\n")[0] + "w,FGD,10,6212,1,1,1,1,1\nw,FGD,10\n", "ref.csv:3: row has 3 fields, header has 9"},
		{strings.SplitAfter(refCSV, "\n")[0], "ref.csv:1: no rows after the header"},
		{strings.SplitAfter(refCSV, "\n")[0] + "w,\"FGD,10\n", "ref.csv:2:"},
	} {
		_, err := ParseReference(strings.NewReader(tc.in), "ref.csv")
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("input %q: got %v, want prefix %q", tc.in, err, tc.want)
		}
	}
	if _, err := ReadReference("/nonexistent/ref.csv"); err == nil || !strings.Contains(err.Error(), "/nonexistent/ref.csv") {
		t.Errorf("missing file: %v", err)
	}
}

func TestReferencePolicy(t *testing.T) {
	for paper, ours := range map[string]string{"Random": "random", "DotProd": "dotprod", "GpuPacking": "packing", "BestFit": "bestfit", "FGD": "fgd", "GpuClustering": ""} {
		got, ok := ReferencePolicy(paper)
		if !ok || got != ours {
			t.Errorf("%s: got %q, %v; want %q", paper, got, ok, ours)
		}
		// Every mapped name must be a real policy.
		if ours != "" {
			if _, err := placement.NewScorer(ours, nil); err != nil {
				t.Errorf("%s maps to %q: %v", paper, ours, err)
			}
		}
	}
	if _, ok := ReferencePolicy("Tetris"); ok {
		t.Error("unknown paper policy accepted")
	}
}

func TestAttachReferenceAndTable(t *testing.T) {
	refs, err := ParseReference(strings.NewReader(refCSV), "ref.csv")
	if err != nil {
		t.Fatal(err)
	}
	if got := ReferenceWorkload("../x/openb_pod_list_default.csv"); got != "openb_pod_list_default" {
		t.Errorf("ReferenceWorkload: %q", got)
	}
	tr := &Trace{Name: "openb_pod_list_default", GPUMilli: 8000}
	rep := NewReport(tr, fakeRuns())
	rep.Inflation = 1.3
	if n := rep.AttachReference(refs, "default"); n != 2 {
		t.Fatalf("matched %d policies, want 2 (fgd, random)", n)
	}
	for _, p := range rep.Policies {
		switch p.Policy {
		case "fgd":
			if p.Paper == nil || p.Paper.Unalloc100.Mean != 4.77 {
				t.Errorf("fgd paper %+v", p.Paper)
			}
		case "random":
			if p.Paper == nil || p.Paper.Unalloc100.Mean != 13.70 {
				t.Errorf("random paper %+v", p.Paper)
			}
		default:
			if p.Paper != nil {
				t.Errorf("%s got paper %+v", p.Policy, p.Paper)
			}
		}
	}

	var b bytes.Buffer
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, s := range []string{"trace openb_pod_list_default", "to 130% of GPU capacity", "seeds 42,43 (2)",
		"paper @100", "4.77 ± 0.11", "5.50 ± 0.71", "10.5", "200ms", "workload default"} {
		if !strings.Contains(out, s) {
			t.Errorf("table lacks %q:\n%s", s, out)
		}
	}
	// The table lines (after the blank line) all have the same width,
	// since every column but the first is right-aligned.
	_, table, _ := strings.Cut(out, "\n\n")
	lines := strings.Split(strings.TrimRight(table, "\n"), "\n")
	if len(lines) != 2+4 {
		t.Fatalf("table has %d lines:\n%s", len(lines), table)
	}
	for _, l := range lines {
		if utf8.RuneCountInString(l) != utf8.RuneCountInString(lines[0]) {
			t.Errorf("misaligned table:\n%s", table)
			break
		}
	}
	if !strings.HasPrefix(lines[2], placement.DefaultPolicy+" ") {
		t.Errorf("first row %q is not the default policy", lines[2])
	}

	// Without a reference the paper column is left out.
	rep.AttachReference(nil, "default")
	b.Reset()
	rep.WriteTable(&b)
	if strings.Contains(b.String(), "paper") {
		t.Errorf("table without reference mentions the paper:\n%s", b.String())
	}
}

func TestReportJSON(t *testing.T) {
	refs, _ := ParseReference(strings.NewReader(refCSV), "ref.csv")
	rep := NewReport(&Trace{Name: "openb_pod_list_default", GPUMilli: 8000}, fakeRuns())
	rep.AttachReference(refs, "openb_pod_list_default")
	var b bytes.Buffer
	if err := rep.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := json.Unmarshal(b.Bytes(), &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"trace", "hosts", "gpus", "pods", "seeds", "policies", "reference_workload"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("JSON lacks %q", k)
		}
	}
	var back Report
	if err := json.Unmarshal(b.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	fgd := back.Policies[1]
	if fgd.Policy != "fgd" || fgd.Unalloc100.Mean != 5.5 || len(fgd.Seeds) != 2 || fgd.Seeds[0].Unalloc100 != 5 ||
		fgd.Paper == nil || fgd.Paper.Unalloc130.Mean != 4.6 {
		t.Errorf("JSON round trip: %+v", fgd)
	}
	for _, k := range []string{`"unalloc_pct_at_100": {`, `"mean":`, `"std":`, `"seeds": [`, `"elapsed_s":`, `"paper": {`} {
		if !strings.Contains(b.String(), k) {
			t.Errorf("JSON lacks %s", k)
		}
	}
}

func TestWriteCurves(t *testing.T) {
	var b bytes.Buffer
	if err := WriteCurves(&b, fakeRuns()); err != nil {
		t.Fatal(err)
	}
	checkSVG(t, b.Bytes(), "<svg", "ideal", "100% arrival", "(seed 42)", placement.DefaultPolicy, "fgd", "random", "bestfit")
	// The default policy's series comes first.
	if i, j := bytes.Index(b.Bytes(), []byte("<title>"+placement.DefaultPolicy)), bytes.Index(b.Bytes(), []byte("<title>random")); i < 0 || j < 0 || i > j {
		t.Error("default policy is not the first series")
	}
	if err := WriteCurves(&b, nil); err == nil {
		t.Error("no runs: want an error")
	}
}

func TestFormatSeeds(t *testing.T) {
	for _, tc := range []struct {
		in   []int64
		want string
	}{
		{[]int64{42, 43, 44, 45, 46, 47, 48, 49, 50, 51}, "42-51"},
		{[]int64{42, 43}, "42,43"},
		{[]int64{1, 3, 7, 8, 9}, "1,3,7-9"},
		{nil, ""},
	} {
		if got := FormatSeeds(tc.in); got != tc.want {
			t.Errorf("FormatSeeds(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestReportFromReplay aggregates real replays of a small synthetic trace.
func TestReportFromReplay(t *testing.T) {
	nodes, pods := SyntheticTrace(20, 2)
	tr, err := NewTrace("syn", nodes, pods, nil)
	if err != nil {
		t.Fatal(err)
	}
	var runs []*Run
	for _, p := range []string{"bestfit", placement.DefaultPolicy} {
		for _, s := range []int64{42, 43} {
			r, err := tr.Replay(p, s, nil)
			if err != nil {
				t.Fatal(err)
			}
			runs = append(runs, r)
		}
	}
	rep := NewReport(tr, runs)
	if len(rep.Policies) != 2 || rep.Policies[0].Policy != placement.DefaultPolicy || rep.Hosts != 20 || rep.Pods != len(pods) {
		t.Fatalf("report %+v", rep)
	}
	for _, p := range rep.Policies {
		for _, s := range p.Seeds {
			if s.Unalloc100 < 0 || s.Unalloc100 > 100 || s.Unalloc130 > s.Unalloc100+1e-9 || s.Arrivals == 0 {
				t.Errorf("%s seed %d: %+v", p.Policy, s.Seed, s)
			}
		}
	}
	var b bytes.Buffer
	if err := WriteCurves(&b, runs); err != nil {
		t.Fatal(err)
	}
	checkSVG(t, b.Bytes(), "ideal", "bestfit")
}

// TestNoPolicyBeatsPackingBound: on a synthetic trace, no policy's
// unallocated share at 100% or 130% arrival is below the fractional packing
// bound of the same arrivals, and the bound is not trivially zero.
func TestNoPolicyBeatsPackingBound(t *testing.T) {
	nodes, pods := SyntheticTrace(40, 3)
	tr, err := NewTrace("syn", nodes, pods, nil)
	if err != nil {
		t.Fatal(err)
	}
	var runs []*Run
	var b100, b130 []float64
	for _, s := range []int64{42, 43, 44} {
		at100, at130, err := tr.PackingBound(s)
		if err != nil {
			t.Fatal(err)
		}
		if at100 <= 0 || at130 > at100+1e-9 {
			t.Fatalf("seed %d: bound %v @100, %v @130", s, at100, at130)
		}
		b100, b130 = append(b100, at100), append(b130, at130)
		for _, p := range placement.Policies() {
			r, err := tr.Replay(p, s, nil)
			if err != nil {
				t.Fatal(err)
			}
			if r.Unalloc100 < at100-1e-9 || r.Unalloc130 < at130-1e-9 {
				t.Errorf("%s seed %d: %.3f @100, %.3f @130 is below the bound %.3f, %.3f", p, s, r.Unalloc100, r.Unalloc130, at100, at130)
			}
			runs = append(runs, r)
		}
	}
	rep := NewReport(tr, runs)
	rep.SetBound(b100, b130)
	var out bytes.Buffer
	if err := rep.WriteTable(&out); err != nil {
		t.Fatal(err)
	}
	if want := "bound: no placement of the same arrivals leaves less than " + fmtStat(*rep.Bound100); !strings.Contains(out.String(), want) {
		t.Fatalf("table lacks %q:\n%s", want, out.String())
	}
}

// TestReplayLearnedWorkload: with WorkloadSource learned the default policy
// starts from the generic mix and learns the running one; the replay stays
// deterministic, and learning changes what it places.
func TestReplayLearnedWorkload(t *testing.T) {
	nodes, pods := SyntheticTrace(60, 4)
	tr, err := NewTrace("syn", nodes, pods, nil)
	if err != nil {
		t.Fatal(err)
	}
	trace, err := tr.Replay(placement.DefaultPolicy, 42, nil)
	if err != nil {
		t.Fatal(err)
	}
	tr.WorkloadSource = WorkloadLearned
	a, err := tr.Replay(placement.DefaultPolicy, 42, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := tr.Replay(placement.DefaultPolicy, 42, nil)
	if err != nil {
		t.Fatal(err)
	}
	if a.Unalloc100 != b.Unalloc100 || a.Failed != b.Failed {
		t.Fatalf("two learned replays differ: %v/%d and %v/%d", a.Unalloc100, a.Failed, b.Unalloc100, b.Failed)
	}
	if a.Unalloc100 < 0 || a.Unalloc100 > 100 {
		t.Fatalf("learned replay: %+v", a)
	}
	// Were WorkloadSource ignored, the two would place alike.
	if a.Failed == trace.Failed && a.Unalloc100 == trace.Unalloc100 && a.Unalloc130 == trace.Unalloc130 {
		t.Fatalf("the learned and the trace's workload placed alike (%v, %d failed)", a.Unalloc100, a.Failed)
	}
}
