package cli

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/gpucloud/gpucloud/placement"
	"github.com/gpucloud/gpucloud/sim"
)

// run executes gpucloud in-process.
func run(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Main(args, &out, &errb)
	return code, out.String(), errb.String()
}

// small is the synthetic trace the tests replay.
var small = []string{"--hosts", "50", "--seeds", "42-43"}

func args(a ...[]string) []string {
	var out []string
	for _, x := range a {
		out = append(out, x...)
	}
	return out
}

func TestReplayTable(t *testing.T) {
	code, out, errOut := run(t, args([]string{"sim", "replay"}, small)...)
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	for _, s := range []string{"built-in synthetic", "50 hosts", "seeds 42,43 (2)", "unalloc% @100", "unalloc% @130", "time/seed", placement.DefaultPolicy + " "} {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}
	if errOut != "" {
		t.Errorf("stderr not empty: %q", errOut)
	}
}

// TestReplayBound: --bound adds the packing bound below the table and to
// the JSON, and the default policy is not below it.
func TestReplayBound(t *testing.T) {
	code, out, errOut := run(t, args([]string{"sim", "replay", "--bound"}, small)...)
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	if !strings.Contains(out, "bound: no placement of the same arrivals leaves less than ") {
		t.Errorf("output lacks the bound:\n%s", out)
	}
	code, out, errOut = run(t, args([]string{"sim", "replay", "--bound", "-o", "json"}, small)...)
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	var rep sim.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	if rep.Bound100 == nil || rep.Bound100.N != 2 || rep.Bound100.Mean <= 0 || rep.Policies[0].Unalloc100.Mean < rep.Bound100.Mean {
		t.Fatalf("bound %+v, policy %+v", rep.Bound100, rep.Policies[0].Unalloc100)
	}
}

// TestReplayLearnedWorkload: --workload learned replays the default policy
// as the live scheduler runs it, and says so.
func TestReplayLearnedWorkload(t *testing.T) {
	code, out, errOut := run(t, args([]string{"sim", "replay", "--workload", "learned", "--policy", "gpucloud,fgd"}, small)...)
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	if !strings.Contains(out, "learns the mix the fleet runs") || !strings.Contains(out, "fgd ") {
		t.Errorf("output:\n%s", out)
	}
}

func TestReplayJSONAllPoliciesParallelDeterministic(t *testing.T) {
	decode := func(parallel string) sim.Report {
		code, out, errOut := run(t, args([]string{"sim", "replay", "-o", "json", "--policy", "all", "--parallel", parallel}, small)...)
		if code != 0 {
			t.Fatalf("exit %d, stderr %q", code, errOut)
		}
		var rep sim.Report
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("output is not JSON: %v\n%s", err, out)
		}
		for i := range rep.Policies {
			rep.Policies[i].ElapsedMeanSec = 0
			for j := range rep.Policies[i].Seeds {
				rep.Policies[i].Seeds[j].ElapsedSec = 0
			}
		}
		return rep
	}
	rep := decode("4")
	if !rep.Synthetic || rep.Hosts != 50 || !reflect.DeepEqual(rep.Seeds, []int64{42, 43}) {
		t.Errorf("header %+v", rep)
	}
	if len(rep.Policies) != len(placement.Policies()) {
		t.Fatalf("%d policies, want %d", len(rep.Policies), len(placement.Policies()))
	}
	if rep.Policies[0].Policy != placement.DefaultPolicy {
		t.Errorf("first policy %s, want %s", rep.Policies[0].Policy, placement.DefaultPolicy)
	}
	for _, p := range rep.Policies {
		if len(p.Seeds) != 2 || p.Unalloc100.N != 2 {
			t.Errorf("%s: %d seeds", p.Policy, len(p.Seeds))
		}
	}
	if serial := decode("1"); !reflect.DeepEqual(serial, rep) {
		t.Error("--parallel 1 and --parallel 4 give different results")
	}
}

func TestReplayChart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "curves.svg")
	code, out, errOut := run(t, args([]string{"sim", "replay", "--policy", "fgd,gpucloud", "--chart", path}, small)...)
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	if !strings.Contains(out, "chart: "+path) {
		t.Errorf("output does not mention the chart:\n%s", out)
	}
	checkSVGFile(t, path, "fgd", placement.DefaultPolicy, "ideal", "100% arrival")
}

func TestReplayEventsMode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "alloc.svg")
	code, out, errOut := run(t, "sim", "replay", "--mode", "events", "--hosts", "50", "--policy", "all", "-o", "json", "--chart", path)
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	var rep sim.EventsReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	if len(rep.Runs) != len(placement.Policies()) || rep.Runs[0].Policy != placement.DefaultPolicy || rep.Seed != 42 {
		t.Fatalf("report %+v", rep)
	}
	for _, r := range rep.Runs {
		if r.Arrivals != 500 || r.Placed+r.Failed != r.Arrivals || r.PeakAllocPct <= 0 || len(r.Series) == 0 {
			t.Errorf("%s: %+v", r.Policy, r)
		}
	}
	checkSVGFile(t, path, "fgd", "allocation over trace time")

	code, out, _ = run(t, "sim", "replay", "--mode", "events", "--hosts", "50")
	if code != 0 || !strings.Contains(out, "peak alloc %") || !strings.Contains(out, "tie-breaking only") {
		t.Errorf("events table, exit %d:\n%s", code, out)
	}
}

// writeTrace writes a tiny trace; podsName lets a test pick the workload.
func writeTrace(t *testing.T, podsName, pods string) (nodesPath, podsPath string) {
	t.Helper()
	dir := t.TempDir()
	nodesPath, podsPath = filepath.Join(dir, "nodes.csv"), filepath.Join(dir, podsName)
	nodes := "sn,cpu_milli,memory_mib,gpu,model\n" +
		"n1,96000,393216,8,G2\n" +
		"n2,64000,262144,2,P100\n" +
		"n3,104000,524288,2,T4\n"
	if err := os.WriteFile(nodesPath, []byte(nodes), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(podsPath, []byte(pods), 0o644); err != nil {
		t.Fatal(err)
	}
	return nodesPath, podsPath
}

const tinyPods = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n" +
	"p1,4000,8192,1,1000,,LS,Running,0,100,0\n" +
	"p2,4000,8192,1,500,,LS,Running,10,200,10\n" +
	"p3,8000,16384,2,1000,T4,LS,Running,20,,20\n" +
	"p4,2000,4096,0,0,,BE,Running,30,40,30\n" +
	"p5,4000,8192,1,250,P100,BE,Running,50,60,50\n"

func TestReplayFilesWithReference(t *testing.T) {
	nodes, pods := writeTrace(t, "openb_pod_list_tiny.csv", tinyPods)
	ref := filepath.Join(filepath.Dir(pods), "ref.csv")
	refCSV := "workload,policy,seeds,total_gpus,unalloc_pct_at_arrival100_mean,unalloc_pct_at_arrival100_std,unalloc_gpus_at_arrival100,unalloc_pct_at_arrival130_mean,unalloc_pct_at_arrival130_std\n" +
		"openb_pod_list_tiny,FGD,10,12,12.34,0.56,1,10.00,0.50\n" +
		"openb_pod_list_tiny,GpuClustering,10,12,20.00,0.56,2,18.00,0.50\n"
	if err := os.WriteFile(ref, []byte(refCSV), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run(t, "sim", "replay", "--nodes", nodes, "--pods", pods, "--policy", "gpucloud,fgd", "--seeds", "1-3", "--reference", ref)
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	for _, s := range []string{"trace openb_pod_list_tiny: 3 hosts, 12 GPUs, 5 pods", "paper @100", "12.34 ± 0.56", "seeds 1-3 (3)"} {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}
	if strings.Contains(out, "synthetic") {
		t.Errorf("file trace reported as synthetic:\n%s", out)
	}

	// A reference without this workload warns and still reports.
	nodes2, pods2 := writeTrace(t, "other.csv", tinyPods)
	code, out, errOut = run(t, "sim", "replay", "--nodes", nodes2, "--pods", pods2, "--seeds", "1", "--reference", ref)
	if code != 0 || !strings.Contains(errOut, `warning: `+ref+` has no results for workload "other"`) || strings.Contains(out, "paper") {
		t.Errorf("exit %d, stderr %q, stdout:\n%s", code, errOut, out)
	}
}

// oneLine checks a runtime error: exit 1 and a single "error: " line.
func oneLine(t *testing.T, code int, errOut string, want ...string) {
	t.Helper()
	if code != ExitError {
		t.Errorf("exit %d, want %d", code, ExitError)
	}
	if !strings.HasPrefix(errOut, "error: ") || strings.Count(errOut, "\n") != 1 {
		t.Errorf("stderr is not one error line: %q", errOut)
	}
	for _, w := range want {
		if !strings.Contains(errOut, w) {
			t.Errorf("stderr %q lacks %q", errOut, w)
		}
	}
	if strings.Contains(errOut, "Usage:") || strings.Contains(errOut, "Flags:") {
		t.Errorf("runtime error printed usage: %q", errOut)
	}
}

func TestReplayBadPath(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-nodes.csv")
	_, pods := writeTrace(t, "pods.csv", tinyPods)
	code, out, errOut := run(t, "sim", "replay", "--nodes", missing, "--pods", pods)
	oneLine(t, code, errOut, missing)
	if out != "" {
		t.Errorf("stdout not empty: %q", out)
	}
}

func TestReplayMalformedCSV(t *testing.T) {
	bad := strings.Replace(tinyPods, "p2,4000,8192,1,500", "p2,4000,lots,1,500", 1)
	nodes, pods := writeTrace(t, "file.csv", bad)
	code, _, errOut := run(t, "sim", "replay", "--nodes", nodes, "--pods", pods)
	oneLine(t, code, errOut, "file.csv:3:", "memory_mib")
}

func TestReplayUnknownModel(t *testing.T) {
	nodes, pods := writeTrace(t, "pods.csv", strings.Replace(tinyPods, ",T4,", ",H999,", 1))
	code, _, errOut := run(t, "sim", "replay", "--nodes", nodes, "--pods", pods)
	oneLine(t, code, errOut, pods, "p3", "line 4")
}

func TestReplayEventsWithoutTimes(t *testing.T) {
	nodes, pods := writeTrace(t, "openb_pod_list_multigpu50.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np1,1000,1024,1,1000\n")
	code, _, errOut := run(t, "sim", "replay", "--mode", "events", "--nodes", nodes, "--pods", pods)
	oneLine(t, code, errOut, pods, "creation_time", "--mode sample")
}

func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"sim", "replay", "--policy", "nope"}, append([]string{`"nope"`, `"all"`}, placement.Policies()...)},
		{[]string{"sim", "replay", "--nodes", "x.csv"}, []string{"--nodes and --pods must be given together"}},
		{[]string{"sim", "replay", "--seeds", "9-1"}, []string{"backwards"}},
		{[]string{"sim", "replay", "--seeds", "x"}, []string{`"x" is not an integer`}},
		{[]string{"sim", "replay", "--mode", "live"}, []string{`--mode "live"`}},
		{[]string{"sim", "replay", "--mode", "events", "--bound"}, []string{"--bound applies to --mode sample only"}},
		{[]string{"sim", "replay", "--workload", "oracle"}, []string{`--workload "oracle"`, `"learned"`}},
		{[]string{"sim", "replay", "--mode", "events", "--workload", "learned"}, []string{"--workload applies to --mode sample only"}},
		{[]string{"sim", "replay", "-o", "xml"}, []string{`--output "xml"`}},
		{[]string{"sim", "replay", "--parallel", "-1"}, []string{"--parallel -1"}},
		{[]string{"sim", "replay", "--inflation", "0.5"}, []string{"--inflation 0.5", "1..10"}},
		{[]string{"sim", "replay", "--bogus"}, []string{"unknown flag: --bogus"}},
		{[]string{"sim", "replay", "--hosts", "abc"}, []string{"--hosts"}},
		{[]string{"sim", "replay", "stray"}, []string{"no arguments"}},
		{[]string{"sim", "nope"}, []string{`unknown command "nope"`}},
	} {
		code, out, errOut := run(t, tc.args...)
		if code != ExitUsage {
			t.Errorf("%v: exit %d, want %d (stderr %q)", tc.args, code, ExitUsage, errOut)
		}
		if !strings.HasPrefix(errOut, "error: ") || !strings.Contains(errOut, "--help' for usage.") {
			t.Errorf("%v: stderr %q lacks the error and hint", tc.args, errOut)
		}
		for _, w := range tc.want {
			if !strings.Contains(errOut, w) {
				t.Errorf("%v: stderr %q lacks %q", tc.args, errOut, w)
			}
		}
		if out != "" {
			t.Errorf("%v: stdout %q", tc.args, out)
		}
	}
}

// TestReplayInflation: fewer arrivals with a smaller inflation, and the
// 130% figure falls back to the last arrival when sampling stops at 100%.
func TestReplayInflation(t *testing.T) {
	arrivals := func(infl string) sim.SeedResult {
		code, out, errOut := run(t, "sim", "replay", "-o", "json", "--hosts", "50", "--seeds", "42", "--inflation", infl)
		if code != 0 {
			t.Fatalf("exit %d, stderr %q", code, errOut)
		}
		var rep sim.Report
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatal(err)
		}
		return rep.Policies[0].Seeds[0]
	}
	full, short := arrivals("1.3"), arrivals("1.0")
	if short.Arrivals >= full.Arrivals {
		t.Fatalf("inflation 1.0 has %d arrivals, 1.3 has %d", short.Arrivals, full.Arrivals)
	}
	if short.Unalloc100 != short.Unalloc130 {
		t.Errorf("inflation 1.0: unalloc at 100%% %v and at 130%% %v should both be the final value", short.Unalloc100, short.Unalloc130)
	}
}

func TestReplayHelpListsEveryFlag(t *testing.T) {
	code, out, _ := run(t, "sim", "replay", "--help")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	root := NewRootCommand(io.Discard, io.Discard)
	cmd, _, err := root.Find([]string{"sim", "replay"})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		n++
		if !strings.Contains(out, "--"+f.Name) {
			t.Errorf("help lacks --%s", f.Name)
		}
		if f.Usage == "" {
			t.Errorf("--%s has no description", f.Name)
		}
	})
	if n < 11 {
		t.Errorf("only %d flags", n)
	}
	for _, s := range []string{"Examples:", "../shared/traces/alibaba-gpu-v2023/openb_node_list_gpu_node.csv", "reference_unallocated_gpu_by_policy.csv", "--mode events"} {
		if !strings.Contains(out, s) {
			t.Errorf("help lacks %q", s)
		}
	}
}

func TestVersionAndCompletion(t *testing.T) {
	code, out, _ := run(t, "version")
	if code != 0 || !strings.HasPrefix(out, "gpucloud ") {
		t.Errorf("version: exit %d, %q", code, out)
	}
	code, out, errOut := run(t, "completion", "bash")
	if code != 0 || !strings.Contains(out, "bash completion") {
		t.Errorf("completion: exit %d, stderr %q", code, errOut)
	}
	code, out, _ = run(t)
	if code != 0 || !strings.Contains(out, "sim") {
		t.Errorf("no args: exit %d, %q", code, out)
	}
}

func TestParseSeeds(t *testing.T) {
	for in, want := range map[string][]int64{
		"42-51":     {42, 43, 44, 45, 46, 47, 48, 49, 50, 51},
		"42,43":     {42, 43},
		"1, 5-7,5":  {1, 5, 6, 7},
		"7":         {7},
		"0-0":       {0},
		" 3 - 4 ,,": {3, 4},
	} {
		got, err := parseSeeds(in)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("parseSeeds(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", ",", "a", "5-", "-5", "9-1", "1-999999"} {
		if _, err := parseSeeds(in); err == nil {
			t.Errorf("parseSeeds(%q) accepted", in)
		}
	}
}

func TestParsePolicies(t *testing.T) {
	if got, _ := parsePolicies("all"); !reflect.DeepEqual(got, placement.Policies()) {
		t.Errorf("all: %v", got)
	}
	if got, _ := parsePolicies("FGD, default,fgd"); !reflect.DeepEqual(got, []string{"fgd", placement.DefaultPolicy}) {
		t.Errorf("list: %v", got)
	}
	if _, err := parsePolicies(" , "); err == nil {
		t.Error("empty list accepted")
	}
}

func checkSVGFile(t *testing.T, path string, want ...string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(bytes.NewReader(b))
	root := ""
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s does not parse: %v", path, err)
		}
		if se, ok := tok.(xml.StartElement); ok && root == "" {
			root = se.Name.Local
		}
	}
	if root != "svg" {
		t.Errorf("%s: root element %q, want svg", path, root)
	}
	for _, w := range want {
		if !bytes.Contains(b, []byte(w)) {
			t.Errorf("%s lacks %q", path, w)
		}
	}
}
