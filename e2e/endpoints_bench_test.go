package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agent/gpu/sim"
	"github.com/gpucloud/gpucloud/agent/runtime/containerd"
	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/testkit"
)

// TestEndpointFigures measures what docs/BENCHMARKS.md reports of
// serverless endpoints, on one server (SQLite, TLS 1.3) with three
// simulated 8-GPU hosts running containers, the workers
// examples/echoworker:
//
//   - the gateway's overhead: an HTTP-mode endpoint's request at a fixed
//     rate through the gateway against the same request to the same
//     program on loopback (p50, p99);
//   - cold starts from zero: a runsync to an endpoint with no worker, the
//     image on the host (p50, p95 of the runs), and the same runsync to an
//     endpoint whose one worker is paused in its warm pool;
//   - a burst of jobs on an endpoint at zero: the time to its max of 20
//     workers and to the last job's answer, and every job completed once.
//
// It runs only with GPUCLOUD_BENCH=1 (GPUCLOUD_BENCH_RATE, _SECONDS, _COLD
// and _JOBS change the sizes):
//
//	GPUCLOUD_BENCH=1 go test ./e2e -run TestEndpointFigures -v -count=1 -timeout 30m
func TestEndpointFigures(t *testing.T) {
	if os.Getenv("GPUCLOUD_BENCH") != "1" {
		t.Skip("a measurement: GPUCLOUD_BENCH=1 runs it")
	}
	rate, secs, colds, jobs := envInt("GPUCLOUD_BENCH_RATE", 500), envInt("GPUCLOUD_BENCH_SECONDS", 10),
		envInt("GPUCLOUD_BENCH_COLD", 10), envInt("GPUCLOUD_BENCH_JOBS", 2000)
	ch := startContainerHost(t)
	bin := buildStatic(t, "echoworker")
	ch.importImage(t, echoImage, containerd.File{Path: "/usr/local/bin/echoworker", Mode: 0o755, Data: bin})
	specs := []sim.Spec{
		{ID: "bench-a", Zone: "zone-a", Rack: "rack-1", GPUs: sim.GPUSpec{Model: "L4", Count: 8}},
		{ID: "bench-b", Zone: "zone-a", Rack: "rack-2", GPUs: sim.GPUSpec{Model: "L4", Count: 8}},
		{ID: "bench-c", Zone: "zone-a", Rack: "rack-3", GPUs: sim.GPUSpec{Model: "L4", Count: 8}},
	}
	c := startClusterOn(t, "sqlite://"+filepath.Join(t.TempDir(), "gpucloud.db"), nil, nil, ch.runtimeOf, specs...)
	ctx := t.Context()
	tn, alice, _ := c.member("acme", "alice")
	if _, err := c.admin.SetQuota(ctx, tn.ID, api.QuotaSpec{Instances: 64, GPUsPerModel: 32}); err != nil {
		t.Fatal(err)
	}
	base := cloud.EndpointSpec{Image: echoImage, Command: []string{"/usr/local/bin/echoworker"}, Offerings: []string{"l4.1x"}}

	// 1. The gateway's overhead.
	web := base
	web.Mode, web.Min, web.Max, web.Concurrency = cloud.EndpointHTTP, 1, 1, 256
	if _, err := alice.CreateEndpoint(ctx, api.CreateEndpointRequest{Name: "web", EndpointSpec: web}, ""); err != nil {
		t.Fatal(err)
	}
	viaGateway := func() error {
		resp, err := alice.EndpointRequest(ctx, "web", "GET", "/echo", nil, nil)
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return err
	}
	c.until("the web endpoint's worker to answer", func() (bool, string) {
		err := viaGateway()
		return err == nil, fmt.Sprint(err)
	})
	direct := startEchoWorker(t, bin)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	straight := func() error {
		resp, err := hc.Get(direct + "/echo")
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return err
	}
	for round := 1; round <= 2; round++ {
		g := atRate(t, rate, secs, viaGateway)
		d := atRate(t, rate, secs, straight)
		t.Logf("round %d at %d/s for %ds: gateway p50 %s p99 %s (%d errors); straight p50 %s p99 %s; added p50 %s p99 %s",
			round, rate, secs, g.p50, g.p99, g.errors, d.p50, d.p99, g.p50-d.p50, g.p99-d.p99)
	}

	// 2. Cold starts from zero.
	queue := base
	queue.Max, queue.IdleTimeoutSeconds = 1, 1
	if _, err := alice.CreateEndpoint(ctx, api.CreateEndpointRequest{Name: "cold", EndpointSpec: queue}, ""); err != nil {
		t.Fatal(err)
	}
	var cold []time.Duration
	var ready []int64
	for i := range colds {
		c.until("the cold endpoint to be at zero", func() (bool, string) {
			d, err := alice.GetEndpoint(ctx, "cold")
			return err == nil && len(d.Workers) == 0, fmt.Sprintf("%+v %v", d, err)
		})
		// The gateway reads its workers from the store every 250 ms: a
		// job that comes sooner after the last worker went may be sent to
		// it first (its host refuses it, and the job goes back to the
		// queue uncounted: gateway.Undelivered). Wait for the gateway to
		// see it gone, so that the figure is a cold start alone.
		time.Sleep(time.Second)
		start := time.Now()
		j, err := alice.RunJobSync(ctx, "cold", json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)), 60*time.Second, "")
		if err != nil || j.State != cloud.JobCompleted {
			t.Fatalf("cold runsync %d: %+v %v", i, j, err)
		}
		cold = append(cold, time.Since(start))
	}
	if d, err := alice.GetEndpoint(ctx, "cold"); err == nil {
		for _, cs := range d.Status.ColdStarts {
			ready = append(ready, cs.ReadyMillis)
		}
	}
	slices.Sort(cold)
	slices.Sort(ready)
	t.Logf("cold start from zero, request to answer (%d runs): p50 %s, p95 %s, max %s; launch to ready (ms): %v",
		len(cold), cold[len(cold)/2].Round(time.Millisecond), cold[(len(cold)*95+99)/100-1].Round(time.Millisecond),
		cold[len(cold)-1].Round(time.Millisecond), ready)

	// 2b. The same from a paused worker: an endpoint with no running
	// worker and a warm pool of one (created, ready, paused).
	pool := base
	pool.Max, pool.IdleTimeoutSeconds, pool.Warm = 1, 1, 1
	if _, err := alice.CreateEndpoint(ctx, api.CreateEndpointRequest{Name: "paused", EndpointSpec: pool}, ""); err != nil {
		t.Fatal(err)
	}
	var fromPaused []time.Duration
	for i := range colds {
		c.until("the paused endpoint's one worker to be paused", func() (bool, string) {
			d, err := alice.GetEndpoint(ctx, "paused")
			return err == nil && len(d.Workers) == 1 && d.Workers[0].State == cloud.Paused, fmt.Sprintf("%+v %v", d, err)
		})
		time.Sleep(time.Second) // as for the cold starts: the gateway sees the worker paused
		start := time.Now()
		j, err := alice.RunJobSync(ctx, "paused", json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)), 60*time.Second, "")
		if err != nil || j.State != cloud.JobCompleted {
			t.Fatalf("runsync at a paused worker %d: %+v %v", i, j, err)
		}
		fromPaused = append(fromPaused, time.Since(start))
	}
	slices.Sort(fromPaused)
	t.Logf("start from a paused worker, request to answer (%d runs): p50 %s, p95 %s, max %s (beside the cold start from zero: p50 %s, p95 %s)",
		len(fromPaused), fromPaused[len(fromPaused)/2].Round(time.Millisecond), fromPaused[(len(fromPaused)*95+99)/100-1].Round(time.Millisecond),
		fromPaused[len(fromPaused)-1].Round(time.Millisecond),
		cold[len(cold)/2].Round(time.Millisecond), cold[(len(cold)*95+99)/100-1].Round(time.Millisecond))

	// 3. A burst on an endpoint at zero.
	burst := base
	burst.Max, burst.IdleTimeoutSeconds, burst.Retries = 20, 30, 2
	if _, err := alice.CreateEndpoint(ctx, api.CreateEndpointRequest{Name: "burst", EndpointSpec: burst}, ""); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ids := make([]string, jobs)
	var wg sync.WaitGroup
	var next atomic.Int64
	for range 16 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= jobs {
					return
				}
				j, err := alice.RunJob(ctx, "burst", json.RawMessage(fmt.Sprintf(`{"n":%d,"sleep_ms":100}`, i)), fmt.Sprintf("burst-%d", i))
				if err != nil {
					t.Errorf("run %d: %v", i, err)
					return
				}
				ids[i] = j.ID
			}
		})
	}
	wg.Wait()
	submitted := time.Since(start)
	var atMax time.Duration
	lastLog := time.Now()
	c.until("the burst to finish", func() (bool, string) {
		d, err := alice.GetEndpoint(ctx, "burst")
		if err != nil {
			return false, err.Error()
		}
		ready := 0
		for _, w := range d.Workers {
			if w.Ready {
				ready++
			}
		}
		if ready >= burst.Max && atMax == 0 {
			atMax = time.Since(start)
		}
		if time.Since(lastLog) > 2*time.Second {
			lastLog = time.Now()
			t.Logf("%s: queue %+v, %d workers (%d ready), desired %d: %s", time.Since(start).Round(time.Millisecond), d.Queue, len(d.Workers), ready, d.Status.Desired, d.Status.Reason)
		}
		return d.Queue.Queued == 0 && d.Queue.Running == 0, fmt.Sprintf("queue %+v, %d workers (%d ready)", d.Queue, len(d.Workers), ready)
	})
	took := time.Since(start)
	completed, retried, outputs := 0, 0, map[string]int{}
	for _, id := range ids {
		j, err := alice.JobStatus(ctx, "burst", id)
		if err != nil {
			t.Fatalf("status %s: %v", id, err)
		}
		if j.State == cloud.JobCompleted {
			completed++
		}
		if j.Attempts > 1 {
			retried++
		}
		var out struct {
			Job string `json:"job"`
		}
		_ = json.Unmarshal(j.Output, &out)
		outputs[out.Job]++
	}
	dups := 0
	for _, n := range outputs {
		if n > 1 {
			dups++
		}
	}
	if completed != jobs || len(outputs) != jobs || dups > 0 {
		t.Errorf("%d of %d jobs completed, %d distinct outputs, %d answered twice", completed, jobs, len(outputs), dups)
	}
	// Stop the workers before the cluster's cleanup, which gives its
	// runtimes 10 s to stop what still runs.
	for _, ref := range []string{"web", "cold", "paused", "burst"} {
		if _, err := alice.DeleteEndpoint(ctx, ref); err != nil {
			t.Errorf("delete %s: %v", ref, err)
		}
	}
	testkit.EventuallySays(t, 2*time.Minute, "the endpoints to be deleted", func() (bool, string) {
		es, err := alice.Endpoints(ctx, "", false)
		return err == nil && len(es) == 0, fmt.Sprintf("%d left (%v)", len(es), err)
	})
	t.Logf("burst of %d jobs (100 ms each) at zero: submitted in %s, %d ready workers after %s, all answered after %s (%.0f jobs/s); %d completed, %d run more than once",
		jobs, submitted.Round(time.Millisecond), burst.Max, atMax.Round(time.Millisecond), took.Round(time.Millisecond),
		float64(jobs)/took.Seconds(), completed, retried)
}

// startEchoWorker runs the echo worker program on a loopback port and
// answers its base URL.
func startEchoWorker(t *testing.T, bin []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "echoworker")
	if err := os.WriteFile(path, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command(path)
	cmd.Env = append(os.Environ(), fmt.Sprintf("PORT=%d", port))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	testkit.Eventually(t, 0, "the echo worker to answer", func() bool {
		resp, err := http.Get(url + "/health")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == 200
	})
	return url
}

type rateResult struct {
	p50, p99 time.Duration
	errors   int
}

// atRate sends rate requests a second for secs seconds (open loop: each
// on its own goroutine at its time) and answers their latencies' p50 and
// p99, after 2 s of warm-up at the same rate.
func atRate(t *testing.T, rate, secs int, do func() error) rateResult {
	t.Helper()
	run := func(n int) ([]time.Duration, int) {
		var mu sync.Mutex
		var lat []time.Duration
		errs := 0
		var wg sync.WaitGroup
		tick := time.Second / time.Duration(rate)
		start := time.Now()
		for i := range n {
			if d := time.Until(start.Add(time.Duration(i) * tick)); d > 0 {
				time.Sleep(d)
			}
			wg.Go(func() {
				s := time.Now()
				err := do()
				d := time.Since(s)
				mu.Lock()
				if err != nil {
					errs++
				} else {
					lat = append(lat, d)
				}
				mu.Unlock()
			})
		}
		wg.Wait()
		return lat, errs
	}
	run(2 * rate)
	lat, errs := run(secs * rate)
	if len(lat) == 0 {
		t.Fatalf("every request failed (%d)", errs)
	}
	slices.Sort(lat)
	q := func(p int) time.Duration { return lat[min(len(lat)*p/100, len(lat)-1)].Round(10 * time.Microsecond) }
	return rateResult{p50: q(50), p99: q(99), errors: errs}
}
