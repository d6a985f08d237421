package metrics

import (
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/controller"
)

// TestSpotHooks: reclaims by reason (every reason at 0 from the start, an
// unknown one as other), relaunches and clearings with their duration.
func TestSpotHooks(t *testing.T) {
	s := NewRegistry()
	want := `
# HELP gpucloud_spot_reclaims_total Spot instances that got a reclaim notice, by reason: capacity (on-demand or reserved demand needs the slot), price (the spot price passed the max price), rebalance (a recommendation to move, without a deadline).
# TYPE gpucloud_spot_reclaims_total counter
gpucloud_spot_reclaims_total{reason="capacity"} 0
gpucloud_spot_reclaims_total{reason="price"} 0
gpucloud_spot_reclaims_total{reason="rebalance"} 0
`
	if err := testutil.GatherAndCompare(s.Registry, strings.NewReader(want), "gpucloud_spot_reclaims_total"); err != nil {
		t.Errorf("before any reclaim: %v", err)
	}
	s.AddReclaims(cloud.ReclaimCapacity, 2)
	s.AddReclaims(cloud.ReclaimPrice, 1)
	s.AddReclaims(cloud.ReclaimCapacity, 0)
	s.AddReclaims("made-up", 1)
	s.AddRelaunches(1)
	s.AddRelaunches(0)
	s.AddRelaunches(2)
	s.ObserveClearing(300 * time.Microsecond)
	s.ObserveClearing(2 * time.Millisecond)
	want = `
# HELP gpucloud_market_clearings_total Clearings of the spot prices of every pool by the market.
# TYPE gpucloud_market_clearings_total counter
gpucloud_market_clearings_total 2
# HELP gpucloud_spot_reclaims_total Spot instances that got a reclaim notice, by reason: capacity (on-demand or reserved demand needs the slot), price (the spot price passed the max price), rebalance (a recommendation to move, without a deadline).
# TYPE gpucloud_spot_reclaims_total counter
gpucloud_spot_reclaims_total{reason="capacity"} 2
gpucloud_spot_reclaims_total{reason="other"} 1
gpucloud_spot_reclaims_total{reason="price"} 1
gpucloud_spot_reclaims_total{reason="rebalance"} 0
# HELP gpucloud_spot_relaunches_total Instances that spot requests launched again after their previous instance was reclaimed, failed, was lost or went away (a stopped instance started again included).
# TYPE gpucloud_spot_relaunches_total counter
gpucloud_spot_relaunches_total 3
`
	if err := testutil.GatherAndCompare(s.Registry, strings.NewReader(want),
		"gpucloud_spot_reclaims_total", "gpucloud_spot_relaunches_total", "gpucloud_market_clearings_total"); err != nil {
		t.Error(err)
	}
	exp := exposition(t, s)
	for _, line := range []string{
		"gpucloud_market_clearing_duration_seconds_count 2",
		`gpucloud_market_clearing_duration_seconds_bucket{le="0.0005"} 1`,
		`gpucloud_market_clearing_duration_seconds_bucket{le="0.0025"} 2`,
	} {
		if !strings.Contains(exp, line) {
			t.Errorf("the exposition lacks %s", line)
		}
	}
}

type pendingBy map[string]int

func (p pendingBy) PendingByReason() map[string]int { return p }

// TestPendingCollector: every reason of the bounded set is served, 0
// included; one outside it counts as other; nothing before the first step.
func TestPendingCollector(t *testing.T) {
	src := pendingBy{controller.PendingGPUs: 3, controller.PendingSpotPrice: 1, "a reason from elsewhere": 2, controller.PendingOther: 1}
	values := map[string]int{controller.PendingGPUs: 3, controller.PendingSpotPrice: 1, controller.PendingOther: 3}
	reasons := controller.PendingReasons()
	sort.Strings(reasons)
	want := ""
	for _, r := range reasons {
		want += fmt.Sprintf("gpucloud_instances_pending{reason=%q} %d\n", r, values[r])
	}
	exp := gather(t, NewPendingCollector(src))
	if !strings.Contains(exp, want) {
		t.Errorf("got\n%s\nwant\n%s", exp, want)
	}
	if n := testutil.CollectAndCount(NewPendingCollector(pendingBy(nil))); n != 0 {
		t.Errorf("no step yet: %d series", n)
	}
}

// TestPendingFromTheScheduler: a real scheduler's summary reaches the
// exposition, in a form promtool accepts.
func TestPendingFromTheScheduler(t *testing.T) {
	s := NewRegistry()
	sched := controller.NewScheduler(nil, nil)
	s.WatchPending(sched)
	if strings.Contains(exposition(t, s), "gpucloud_instances_pending{") {
		t.Error("pending series before the scheduler's first step")
	}
	s.AddReclaims(cloud.ReclaimRebalance, 1)
	s.ObserveClearing(time.Millisecond)
	promtool(t, exposition(t, s))
}

// gather is the text exposition of one collector.
func gather(t *testing.T, c prometheus.Collector) string {
	t.Helper()
	r := prometheus.NewPedanticRegistry()
	r.MustRegister(c)
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(r, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("scrape: %d %s", rec.Code, rec.Body.String())
	}
	return rec.Body.String()
}

// promtool runs promtool check metrics on an exposition: skipped, saying
// so, without promtool on PATH unless CI is set.
func promtool(t *testing.T, exposition string) {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("promtool is not on PATH and CI is set: install it (Debian: apt-get install prometheus)")
		}
		t.Skip("promtool is not on PATH: the exposition is not checked (CI checks it)")
	}
	cmd := exec.Command(path, "check", "metrics")
	cmd.Stdin = strings.NewReader(exposition)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s\nexposition:\n%s", err, out, exposition)
	}
}
