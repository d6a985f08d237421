package sim

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/gpucloud/gpucloud/placement"
)

const evNodes = "sn,cpu_milli,memory_mib,gpu,model\nn1,32000,65536,1,T4\n"

const evPodHeader = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"

// evPods on a one-GPU fleet: a holds the GPU from 0 to 10, so c (arriving
// at 5) fails; b arrives at 10, when a leaves (the departure goes first);
// d shares the GPU from 30 for ever; e is CPU-only; z leaves before it
// arrives and is skipped.
const evPods = evPodHeader +
	"a,1000,1024,1,1000,,LS,Running,0,10,0\n" +
	"c,1000,1024,1,1000,,LS,Running,5,15,5\n" +
	"b,1000,1024,1,1000,,LS,Running,10,30,10\n" +
	"d,1000,1024,1,500,,LS,Running,30,,30\n" +
	"e,1000,1024,0,0,,BE,Running,40,50,40\n" +
	"z,1000,1024,1,1000,,BE,Failed,45,45,45\n"

func evTrace(t *testing.T, nodesCSV, podsCSV string) *Trace {
	t.Helper()
	nodes, err := ParseNodes(strings.NewReader(nodesCSV), "nodes.csv")
	if err != nil {
		t.Fatal(err)
	}
	pods, err := ParsePods(strings.NewReader(podsCSV), "pods.csv")
	if err != nil {
		t.Fatal(err)
	}
	tr, err := NewTrace("ev", nodes, pods, nil)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func TestEventsOrder(t *testing.T) {
	tr := evTrace(t, evNodes, evPods)
	events, skipped, err := tr.Events()
	if err != nil {
		t.Fatal(err)
	}
	if skipped != 1 {
		t.Errorf("skipped %d, want 1", skipped)
	}
	// Pod indexes: a0 c1 b2 d3 e4 z5.
	want := []Event{
		{0, 0, false},
		{5, 1, false},
		{10, 0, true}, {10, 2, false},
		{15, 1, true},
		{30, 2, true}, {30, 3, false},
		{40, 4, false},
		{50, 4, true},
	}
	if !reflect.DeepEqual(events, want) {
		t.Errorf("events\n got %v\nwant %v", events, want)
	}
}

func TestReplayEvents(t *testing.T) {
	tr := evTrace(t, evNodes, evPods)
	for _, policy := range placement.Policies() {
		t.Run(policy, func(t *testing.T) {
			arrivals := 0
			run, err := tr.ReplayEvents(policy, 42, EventsOptions{Progress: func() { arrivals++ }})
			if err != nil {
				t.Fatal(err)
			}
			if run.Policy != policy || run.Seed != 42 {
				t.Errorf("policy %q seed %d", run.Policy, run.Seed)
			}
			got := [5]int{run.Arrivals, run.Placed, run.Failed, run.Departed, run.Skipped}
			if want := [5]int{5, 4, 1, 3, 1}; got != want {
				t.Errorf("arrivals, placed, failed, departed, skipped = %v, want %v", got, want)
			}
			if arrivals != 5 {
				t.Errorf("progress called %d times, want 5", arrivals)
			}
			if run.Start != 0 || run.End != 50 {
				t.Errorf("span %d..%d, want 0..50", run.Start, run.End)
			}
			if run.PeakAllocPct != 100 || run.PeakTime != 0 {
				t.Errorf("peak %.2f%% at %d, want 100%% at 0", run.PeakAllocPct, run.PeakTime)
			}
			// 100% for 30 s, then 50% for 20 s.
			if run.MeanAllocPct != 80 {
				t.Errorf("mean allocation %.4f%%, want 80%%", run.MeanAllocPct)
			}
			want := []EventPoint{
				{0, 100, 1, 0},
				{5, 100, 1, 1},
				{10, 100, 1, 1},
				{15, 100, 1, 1},
				{30, 50, 1, 1},
				{40, 50, 2, 1},
				{50, 50, 1, 1},
			}
			if !reflect.DeepEqual(run.Series, want) {
				t.Errorf("series\n got %v\nwant %v", run.Series, want)
			}
		})
	}
}

func TestReplayEventsNoTimes(t *testing.T) {
	tr := evTrace(t, evNodes, "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np1,1000,1024,1,1000\n")
	_, err := tr.ReplayEvents("fgd", 1, EventsOptions{})
	if !errors.Is(err, ErrNoTimes) {
		t.Fatalf("got %v, want ErrNoTimes", err)
	}
	if !strings.Contains(err.Error(), "pod p1 (line 2)") {
		t.Errorf("error %q does not name the pod and line", err)
	}
}

func TestReplayEventsUnknownPolicy(t *testing.T) {
	tr := evTrace(t, evNodes, evPods)
	if _, err := tr.ReplayEvents("nope", 1, EventsOptions{}); err == nil || !strings.Contains(err.Error(), "fgd") {
		t.Fatalf("got %v, want an error listing the policies", err)
	}
}

func TestThinPoints(t *testing.T) {
	pts := make([]EventPoint, 101)
	for i := range pts {
		pts[i].Time = int64(i)
	}
	if got := thinPoints(pts, 0); len(got) != 101 {
		t.Errorf("limit 0 kept %d points", len(got))
	}
	if got := thinPoints(pts, 200); len(got) != 101 {
		t.Errorf("limit 200 kept %d points", len(got))
	}
	got := thinPoints(pts, 11)
	if len(got) != 11 || got[0].Time != 0 || got[10].Time != 100 || got[5].Time != 50 {
		t.Errorf("limit 11 kept %v", got)
	}
	if got := thinPoints(pts, 1); len(got) != 1 || got[0].Time != 100 {
		t.Errorf("limit 1 kept %v", got)
	}
}

// TestReplayEventsShared runs replays concurrently on one Trace (run with
// -race): they must neither race nor differ from a serial replay.
func TestReplayEventsShared(t *testing.T) {
	nodes, pods := SyntheticTrace(20, 5)
	tr, err := NewTrace("syn", nodes, pods, nil)
	if err != nil {
		t.Fatal(err)
	}
	opts := EventsOptions{MaxPoints: 50}
	policies := []string{placement.DefaultPolicy, "fgd", "bestfit"}
	serial := make([]*EventsRun, len(policies))
	for i, p := range policies {
		if serial[i], err = tr.ReplayEvents(p, 9, opts); err != nil {
			t.Fatal(err)
		}
		if len(serial[i].Series) != 50 {
			t.Errorf("%s: %d points, want 50", p, len(serial[i].Series))
		}
		if serial[i].Arrivals != len(pods) || serial[i].Placed+serial[i].Failed != serial[i].Arrivals {
			t.Errorf("%s: %d arrivals, %d placed, %d failed for %d pods", p, serial[i].Arrivals, serial[i].Placed, serial[i].Failed, len(pods))
		}
	}
	par := make([]*EventsRun, len(policies))
	var wg sync.WaitGroup
	for i, p := range policies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			par[i], _ = tr.ReplayEvents(p, 9, opts)
		}()
	}
	wg.Wait()
	for i := range policies {
		a, b := *serial[i], *par[i]
		a.Elapsed, b.Elapsed = 0, 0
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s: concurrent replay differs from serial", policies[i])
		}
	}

	rep := NewEventsReport(tr, par)
	if rep.Runs[0].Policy != placement.DefaultPolicy {
		t.Errorf("first run is %s, want the default policy", rep.Runs[0].Policy)
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"peak alloc %", "mean alloc %", "fgd", "bestfit", "seed 9 (tie-breaking only)"} {
		if !strings.Contains(table.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, table.String())
		}
	}
	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back EventsReport
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Runs) != 3 || len(back.Runs[0].Series) != 50 || back.Hosts != 20 {
		t.Errorf("JSON round trip lost data: %+v", back)
	}
	var svg bytes.Buffer
	if err := WriteEventsChart(&svg, rep.Runs); err != nil {
		t.Fatal(err)
	}
	checkSVG(t, svg.Bytes(), "gpucloud", "fgd", "bestfit", "days")
}

// checkSVG parses an SVG document and checks that it mentions every want.
func checkSVG(t *testing.T, b []byte, want ...string) {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(b))
	for {
		_, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG does not parse: %v", err)
		}
	}
	for _, w := range want {
		if !bytes.Contains(b, []byte(w)) {
			t.Errorf("SVG lacks %q", w)
		}
	}
}
