package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/autoscale"
)

// writeDemand writes a synthetic series as a CSV and returns its path.
func writeDemand(t *testing.T, days int, interval time.Duration) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "demand.csv")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	s := autoscale.Synthetic(autoscale.SyntheticConfig{Interval: interval, Steps: int(time.Duration(days) * 24 * time.Hour / interval), Seed: 3})
	if err := autoscale.WriteCSV(f, s); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestAutoscaleTableAndChart(t *testing.T) {
	demand := writeDemand(t, 10, time.Minute)
	chart := filepath.Join(t.TempDir(), "c.svg")
	code, out, errOut := run(t, "sim", "autoscale", "--demand", demand, "--chart", chart,
		"--on-demand-price", "2.50", "--spot-price", "1", "--on-demand-percent", "20")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, w := range append(autoscale.Policies(), "oracle", "shortfall %", "cost vs oracle", "chart: "+chart, "history 1440 steps") {
		if !strings.Contains(out, w) {
			t.Errorf("table lacks %q:\n%s", w, out)
		}
	}
	checkSVGFile(t, chart, "demand", "gpucloud", "target", "history ends")
}

func TestAutoscaleJSON(t *testing.T) {
	demand := writeDemand(t, 8, time.Hour)
	code, out, errOut := run(t, "sim", "autoscale", "--demand", demand, "--policy", "target,gpucloud", "-o", "json", "--history", "2d", "--unit-gpus", "4")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep struct {
		HistorySteps int                `json:"history_steps"`
		Oracle       autoscale.Result   `json:"oracle"`
		Policies     []autoscale.Result `json:"policies"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.HistorySteps != 48 || len(rep.Policies) != 2 || rep.Policies[0].Policy != "target" || rep.Policies[1].Policy != "gpucloud" {
		t.Fatalf("%+v", rep)
	}
	for _, key := range []string{"demand_gpu_hours", "capacity_gpu_hours", "shortfall_gpu_hours", "idle_gpu_hours", "scaling_actions", "cost_vs_oracle"} {
		if !strings.Contains(out, `"`+key+`"`) {
			t.Errorf("JSON lacks %q", key)
		}
	}
	for _, r := range rep.Policies {
		if r.DemandGPUHours != rep.Oracle.DemandGPUHours || r.CostVsOracle <= 0 || r.Cost != nil {
			t.Errorf("%+v", r)
		}
	}
}

func TestAutoscaleErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.csv")
	os.WriteFile(bad, []byte("time,gpus\n2024-01-01T00:00,1\n2024-01-01T00:01,2\n2024-01-01T00:01,3\n"), 0o644)
	code, _, errOut := run(t, "sim", "autoscale", "--demand", bad)
	oneLine(t, code, errOut, "bad.csv:4:", "repeats line 3")

	demand := writeDemand(t, 2, time.Hour)
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "--demand is required"},
		{[]string{"--demand", demand, "--policy", "nope"}, "unknown autoscaling policy"},
		{[]string{"--demand", demand, "-o", "xml"}, `--output "xml"`},
		{[]string{"--demand", demand, "--unit-gpus", "0"}, "--unit-gpus 0"},
		{[]string{"--demand", demand, "--history", "3d"}, "whole series"},
		{[]string{"--demand", demand, "--history", "x"}, "--history"},
		{[]string{"--demand", demand, "--spot-price", "1"}, "needs --on-demand-price"},
		{[]string{"--demand", demand, "--target-utilization", "1.5"}, "--target-utilization"},
	} {
		code, _, errOut := run(t, append([]string{"sim", "autoscale"}, c.args...)...)
		if code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q, want %q", c.args, code, errOut, c.want)
		}
	}
}

func TestSimDemand(t *testing.T) {
	_, podsPath := writeTrace(t, "openb_pod_list_default.csv",
		"name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"+
			"p0,1000,1024,2,1000,,LS,Running,0,120,0\n"+
			"p1,1000,1024,1,500,,LS,Running,60,,60\n")
	out := filepath.Join(t.TempDir(), "d.csv")
	code, _, errOut := run(t, "sim", "demand", "--pods", podsPath, "--out", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	s, err := autoscale.ReadCSV(out, autoscale.CSVOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// p1 has no deletion time: it runs to the trace's end (120 s).
	if len(s.GPUs) != 2 || s.GPUs[0] != 2 || s.GPUs[1] != 2.5 || s.Interval != time.Minute {
		t.Fatalf("%+v", s)
	}
	code, stdout, errOut := run(t, "sim", "demand", "--synthetic", "--days", "1", "--interval", "1h")
	if code != 0 || strings.Count(stdout, "\n") != 25 {
		t.Fatalf("synthetic: exit %d %s %q", code, errOut, stdout)
	}
	code, _, errOut = run(t, "sim", "demand")
	if code == 0 || !strings.Contains(errOut, "--pods or --synthetic") {
		t.Fatalf("no input: %d %q", code, errOut)
	}
}

// TestAutoscaleTraceAndPolicies: --trace writes one row per step with the
// decision and its reason; --policies replays a group's own policy list
// (here a cron action beside target tracking); --trace wants one policy.
func TestAutoscaleTraceAndPolicies(t *testing.T) {
	demand := writeDemand(t, 2, time.Hour)
	dir := t.TempDir()
	trace := filepath.Join(dir, "trace.csv")
	code, _, errOut := run(t, "sim", "autoscale", "--demand", demand, "--policy", "target", "--trace", trace)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	b, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 1+48 || lines[0] != "time,demand_gpus,ready,booting,leaving,desired,launched,released,policy,limit,reason" ||
		!strings.Contains(lines[2], "wants") {
		t.Errorf("trace: %d lines\n%s\n%s", len(lines), lines[0], lines[2])
	}
	pols := filepath.Join(dir, "mine.json")
	if err := os.WriteFile(pols, []byte(`[{"type":"target","metric":"custom:demand_gpus","target":4},
		{"type":"scheduled","cron":"0 9 * * *","set_min":60}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run(t, "sim", "autoscale", "--demand", demand, "--policies", pols, "--trace", trace)
	if code != 0 || !strings.Contains(out, "mine") {
		t.Fatalf("exit %d: %s%s", code, out, errOut)
	}
	if b, _ := os.ReadFile(trace); !strings.Contains(string(b), "min 60") {
		t.Errorf("the scheduled action is not in the trace")
	}
	if code, _, errOut := run(t, "sim", "autoscale", "--demand", demand, "--policy", "all", "--trace", trace); code == 0 || !strings.Contains(errOut, "one --policy") {
		t.Errorf("--trace with every policy: %d %s", code, errOut)
	}
	// Without --policy, a trace is the gpucloud policy's.
	if code, out, errOut := run(t, "sim", "autoscale", "--demand", demand, "--trace", trace); code != 0 {
		t.Fatalf("--trace without --policy: exit %d: %s%s", code, out, errOut)
	} else if b, _ := os.ReadFile(trace); !strings.Contains(string(b), ",gpucloud,") {
		t.Errorf("--trace without --policy: not the gpucloud policy's steps:\n%.400s", b)
	}
}
