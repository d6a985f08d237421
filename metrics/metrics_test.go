package metrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/controller"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/money"
	"github.com/gpucloud/gpucloud/testkit"
)

func TestRegistryGathers(t *testing.T) {
	s := NewRegistry()
	n, err := testutil.GatherAndCount(s.Registry)
	if err != nil || n == 0 {
		t.Fatalf("gathered %d series, %v", n, err)
	}
}

// TestInstrumentLabelsByPattern: the route label is the mux pattern that
// matched, never the path (which carries IDs), and "unmatched" for none
// and for the catch-all "/".
func TestInstrumentLabelsByPattern(t *testing.T) {
	s := NewRegistry()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/instances/{id}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("id") == "i-missing" {
			http.Error(w, "no", http.StatusNotFound)
			return
		}
		w.Write([]byte("ok"))
	})
	mux.HandleFunc("POST /v1/instances", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) })
	srv := httptest.NewServer(s.Instrument(mux))
	defer srv.Close()
	for _, c := range []struct{ method, path string }{
		{"GET", "/v1/instances/i-0123"},
		{"GET", "/v1/instances/i-4567"},
		{"GET", "/v1/instances/i-missing"},
		{"POST", "/v1/instances"},
		{"GET", "/v1/no/such/route/i-0123"},
		{"BREW", "/v1/instances"},
	} {
		req, _ := http.NewRequest(c.method, srv.URL+c.path, nil)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	want := `
# HELP gpucloud_http_requests_total HTTP requests answered by the API, by method, route pattern ("unmatched" for none) and status code.
# TYPE gpucloud_http_requests_total counter
gpucloud_http_requests_total{code="200",method="GET",route="GET /v1/instances/{id}"} 2
gpucloud_http_requests_total{code="404",method="GET",route="GET /v1/instances/{id}"} 1
gpucloud_http_requests_total{code="201",method="POST",route="POST /v1/instances"} 1
gpucloud_http_requests_total{code="404",method="GET",route="unmatched"} 1
gpucloud_http_requests_total{code="404",method="OTHER",route="unmatched"} 1
`
	if err := testutil.CollectAndCompare(s.requests, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(s.duration); n != 4 {
		t.Errorf("%d duration series, want 4 (one per method and route)", n)
	}
	exp := exposition(t, s)
	if strings.Contains(exp, "i-0123") || strings.Contains(exp, "i-missing") {
		t.Errorf("a raw path leaked into the labels:\n%s", exp)
	}
}

func TestControllerHooks(t *testing.T) {
	s := NewRegistry()
	s.ObserveStep("market", 3*time.Millisecond, nil)
	s.ObserveStep("scheduler", 2*time.Millisecond, nil)
	s.ObserveStep("scheduler", 40*time.Millisecond, errors.New("store down"))
	s.AddPlacements(3)
	s.AddPlacements(0)
	s.AddPlacements(2)
	want := `
# HELP gpucloud_controller_step_errors_total Rounds of a controller that failed, by controller.
# TYPE gpucloud_controller_step_errors_total counter
gpucloud_controller_step_errors_total{controller="market"} 0
gpucloud_controller_step_errors_total{controller="scheduler"} 1
# HELP gpucloud_scheduler_placements_total Instances the scheduler placed.
# TYPE gpucloud_scheduler_placements_total counter
gpucloud_scheduler_placements_total 5
`
	if err := testutil.GatherAndCompare(s.Registry, strings.NewReader(want),
		"gpucloud_controller_step_errors_total", "gpucloud_scheduler_placements_total"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(s.stepDuration); n != 2 {
		t.Errorf("%d step duration series, want 2", n)
	}
	exp := exposition(t, s)
	if !strings.Contains(exp, `gpucloud_controller_step_duration_seconds_count{controller="scheduler"} 2`) {
		t.Errorf("scheduler rounds not timed:\n%s", exp)
	}
}

// TestLoopObserve: controller.Loop reports each round to the hook.
func TestLoopObserve(t *testing.T) {
	s := NewRegistry()
	fail := errors.New("boom")
	loop := &controller.Loop{Controllers: []controller.Controller{ctl{"a", nil}, ctl{"b", fail}}, Observe: s.ObserveStep,
		Log: quietLog()}
	loop.Step(context.Background())
	if got := testutil.ToFloat64(s.stepErrors.WithLabelValues("b")); got != 1 {
		t.Errorf("errors of b = %v, want 1", got)
	}
	if got := testutil.ToFloat64(s.stepErrors.WithLabelValues("a")); got != 0 {
		t.Errorf("errors of a = %v, want 0", got)
	}
}

type ctl struct {
	name string
	err  error
}

func (c ctl) Name() string                    { return c.name }
func (c ctl) Interval() time.Duration         { return time.Second }
func (c ctl) Reconcile(context.Context) error { return c.err }

type quotes map[cloud.Pool]controller.PoolQuote

func (q quotes) Quotes() map[cloud.Pool]controller.PoolQuote { return q }

func TestMarketCollector(t *testing.T) {
	q := quotes{
		{Offering: "h100.1x", Zone: "eu-1a"}: {OnDemand: 2_490_000, Spot: money.Micros(1_000_001), Free: 7},
		{Offering: "l40s.1x", Zone: "eu-1b"}: {OnDemand: 990_000, Spot: 300_000, Free: 0},
	}
	want := `
# HELP gpucloud_on_demand_price_dollars_per_hour On-demand price of an instance of the offering in the zone, in dollars per hour.
# TYPE gpucloud_on_demand_price_dollars_per_hour gauge
gpucloud_on_demand_price_dollars_per_hour{offering="h100.1x",zone="eu-1a"} 2.49
gpucloud_on_demand_price_dollars_per_hour{offering="l40s.1x",zone="eu-1b"} 0.99
# HELP gpucloud_pool_free_instances How many more instances of the offering fit in the zone now, as of the market's last clearing.
# TYPE gpucloud_pool_free_instances gauge
gpucloud_pool_free_instances{offering="h100.1x",zone="eu-1a"} 7
gpucloud_pool_free_instances{offering="l40s.1x",zone="eu-1b"} 0
# HELP gpucloud_spot_price_dollars_per_hour Current spot price of an instance of the offering in the zone, in dollars per hour.
# TYPE gpucloud_spot_price_dollars_per_hour gauge
gpucloud_spot_price_dollars_per_hour{offering="h100.1x",zone="eu-1a"} 1.000001
gpucloud_spot_price_dollars_per_hour{offering="l40s.1x",zone="eu-1b"} 0.3
`
	if err := testutil.CollectAndCompare(NewMarketCollector(q), strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(NewMarketCollector(quotes(nil))); n != 0 {
		t.Errorf("no clearing yet: %d series", n)
	}
}

type gpus []fleet.GPUCount

func (g gpus) GPUUsage() []fleet.GPUCount { return g }

func TestFleetCollector(t *testing.T) {
	f := fleet.MockFleet(fleet.MockHost("a", "H100", 4), fleet.MockHost("b", "L40S", 2))
	p := &fleet.Placement{ID: "x", HostID: "a", CPUMilli: 100, MemoryMiB: 100, Devices: []fleet.Device{{GPU: 0, Kind: fleet.Whole}}}
	if err := f.Apply(p); err != nil {
		t.Fatal(err)
	}
	src := append(gpus(f.GPUUsage()), fleet.GPUCount{Model: "H100-80GB-SXM", Mode: fleet.ModeMIG, Allocated: true, GPUs: 1, SlicesUsed: 2, SlicesFree: 5})
	want := `
# HELP gpucloud_gpu_mig_slices MIG compute slices of the GPUs in MIG mode, by model and status (allocated, free).
# TYPE gpucloud_gpu_mig_slices gauge
gpucloud_gpu_mig_slices{model="H100-80GB-SXM",status="allocated"} 2
gpucloud_gpu_mig_slices{model="H100-80GB-SXM",status="free"} 5
# HELP gpucloud_gpus GPUs of the fleet by model, mode (whole, shared: time-sliced, mig) and status (allocated: something is rented on it, free).
# TYPE gpucloud_gpus gauge
gpucloud_gpus{mode="mig",model="H100-80GB-SXM",status="allocated"} 1
gpucloud_gpus{mode="mig",model="H100-80GB-SXM",status="free"} 0
gpucloud_gpus{mode="whole",model="H100-80GB-SXM",status="allocated"} 1
gpucloud_gpus{mode="whole",model="H100-80GB-SXM",status="free"} 3
gpucloud_gpus{mode="whole",model="L40S",status="allocated"} 0
gpucloud_gpus{mode="whole",model="L40S",status="free"} 2
`
	if err := testutil.CollectAndCompare(NewFleetCollector(src), strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(NewFleetCollector(gpus(nil))); n != 0 {
		t.Errorf("no fleet yet: %d series", n)
	}
}

func TestStoreCollector(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		ctx := context.Background()
		err := st.Tx(ctx, func(tx cloud.Tx) error {
			for _, id := range []string{"t-a", "t-b"} {
				if err := tx.CreateTenant(ctx, &cloud.Tenant{ID: id, Name: id, CreatedAt: testkit.Epoch}); err != nil {
					return err
				}
			}
			for i, r := range []struct {
				tenant string
				state  cloud.State
				market cloud.Market
			}{
				{"t-a", cloud.Running, cloud.MarketOnDemand},
				{"t-a", cloud.Running, cloud.MarketOnDemand},
				{"t-a", cloud.Pending, cloud.MarketSpot},
				{"t-b", cloud.Running, cloud.MarketOnDemand},
			} {
				in := &cloud.Instance{ID: fmt.Sprintf("i-%d", i), TenantID: r.tenant, Offering: "h100.1x", State: r.state,
					Market: r.market, CreatedAt: testkit.Epoch, UpdatedAt: testkit.Epoch}
				if err := tx.CreateInstance(ctx, in); err != nil {
					return err
				}
			}
			return tx.PutHost(ctx, &cloud.Host{ID: "h-1", State: fleet.Cordoned, Spec: *fleet.MockHost("h-1", "H100", 8)})
		})
		if err != nil {
			t.Fatal(err)
		}
		want := `
# HELP gpucloud_hosts Hosts by state (schedulable, cordoned, unhealthy).
# TYPE gpucloud_hosts gauge
gpucloud_hosts{state="cordoned"} 1
gpucloud_hosts{state="schedulable"} 0
gpucloud_hosts{state="unhealthy"} 0
# HELP gpucloud_instances Instances by state, offering, market (on_demand, spot) and tenant.
# TYPE gpucloud_instances gauge
gpucloud_instances{market="on_demand",offering="h100.1x",state="running",tenant="t-a"} 2
gpucloud_instances{market="on_demand",offering="h100.1x",state="running",tenant="t-b"} 1
gpucloud_instances{market="spot",offering="h100.1x",state="pending",tenant="t-a"} 1
`
		if err := testutil.CollectAndCompare(NewStoreCollector(st), strings.NewReader(want)); err != nil {
			t.Error(err)
		}
	})
}

// TestStoreCollectorError: a store that fails leaves its series out of the
// scrape, which still serves the rest.
func TestStoreCollectorError(t *testing.T) {
	st := testkit.Backends()[0].Open(t)
	st.Close()
	s := NewRegistry()
	s.Log = quietLog()
	s.WatchStore(st)
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != http.StatusOK || strings.Contains(rec.Body.String(), "gpucloud_instances") ||
		!strings.Contains(rec.Body.String(), "gpucloud_scheduler_placements_total") {
		t.Errorf("scrape with the store down: %d\n%s", rec.Code, rec.Body.String())
	}
}

// exposition is the text exposition of s.
func exposition(t *testing.T, s *Registry) string {
	t.Helper()
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("scrape: %d %s", rec.Code, rec.Body.String())
	}
	return rec.Body.String()
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestScrapeErrorLog: a scraper that went away mid-answer (a reset, a
// broken pipe) is logged at debug level; any other scrape error at error
// level.
func TestScrapeErrorLog(t *testing.T) {
	for _, c := range []struct {
		name  string
		err   error
		level string
	}{
		{"reset", fmt.Errorf("write tcp 127.0.0.1:7878->127.0.0.1:52208: %w", syscall.ECONNRESET), "DEBUG"},
		{"broken pipe", &net.OpError{Op: "write", Net: "tcp", Err: syscall.EPIPE}, "DEBUG"},
		{"closed", net.ErrClosed, "DEBUG"},
		{"a collector's failure", errors.New("collected metric x was collected before"), "ERROR"},
	} {
		var buf strings.Builder
		log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
		errorLog{log}.Println("error encoding and sending metric family:", c.err)
		if !strings.Contains(buf.String(), "level="+c.level) {
			t.Errorf("%s: logged %q, want level %s", c.name, buf.String(), c.level)
		}
	}
}
