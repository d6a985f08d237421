package agent_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agent"
	"github.com/gpucloud/gpucloud/agent/metadata"
	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/cloud"
)

// metadataCall sends a request to an instance's metadata endpoint, with a
// session token.
func metadataCall(t *testing.T, base, method, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := metadata.Token(t.Context(), nil, base, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(metadata.TokenHeader, tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// metadataGet reads path from an instance's metadata endpoint, with a
// session token.
func metadataGet(t *testing.T, base, path string) (*http.Response, error) {
	tok, err := metadata.Token(t.Context(), nil, base, time.Minute)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set(metadata.TokenHeader, tok)
	return http.DefaultClient.Do(req)
}

// sample takes one sample and returns the samples of id it sent.
func (e *env) sample(id string) []agentapi.InstanceSample {
	e.t.Helper()
	if err := e.ag.SampleMetrics(e.t.Context()); err != nil {
		e.t.Fatalf("SampleMetrics: %v", err)
	}
	return e.srv.Samples(id)
}

// TestMetricsSampleGPUAndCPU: the sampler reports the GPU load the workload
// set on its metadata endpoint (a simulated host) from the next sample on,
// and the CPU time its busy loop burns as a utilization of its vCPUs.
func TestMetricsSampleGPUAndCPU(t *testing.T) {
	e := newEnv(t, h100)
	pl := whole(e.host.ID(), 0, 1)
	pl.CPUMilli = 1000
	// A busy loop in the background keeps one CPU busy.
	e.assign(e.assignment("i-busy", pl, `(while :; do :; done) & `+serveScript))
	env := e.workloadEnv("i-busy")
	e.untilPhase("i-busy", agentapi.PhaseRunning)
	if len(e.srv.Samples("")) != 0 {
		t.Fatal("samples before any SampleMetrics")
	}
	first := e.sample("i-busy")
	if len(first) != 1 || first[0].GPUUtilization == nil || *first[0].GPUUtilization != 0 {
		t.Fatalf("first sample %+v, want GPU utilization 0", first)
	}
	if first[0].CPUUtilization != nil {
		t.Fatalf("the first sample has a CPU utilization %v, without an interval", *first[0].CPUUtilization)
	}
	if at := first[0].At; at.IsZero() || time.Since(at) > time.Minute {
		t.Fatalf("sample time %v", at)
	}

	base := env[runtime.EnvMetadataURL]
	if status, body := metadataCall(t, base, http.MethodPut, "/v1/load", `{"gpu_utilization": 0.8}`); status != 200 {
		t.Fatalf("PUT /v1/load: %d %s", status, body)
	}
	time.Sleep(600 * time.Millisecond) // CPU time to measure
	got := e.sample("i-busy")
	last := got[len(got)-1]
	if len(got) != 2 || last.GPUUtilization == nil || *last.GPUUtilization != 0.8 {
		t.Fatalf("the sample after PUT /v1/load: %+v", got)
	}
	// The whole GPU's memory is the instance's: the simulated GPU's
	// memory in use grows with its load.
	if first[0].GPUMemoryUsedBytes == nil || last.GPUMemoryUsedBytes == nil || *last.GPUMemoryUsedBytes <= *first[0].GPUMemoryUsedBytes {
		t.Fatalf("GPU memory used: first %v, then %v; want it reported and growing with the load", first[0].GPUMemoryUsedBytes, last.GPUMemoryUsedBytes)
	}
	// One busy CPU of one vCPU, on a machine that runs other tests too.
	if last.CPUUtilization == nil || *last.CPUUtilization < 0.2 || *last.CPUUtilization > 1 {
		t.Fatalf("CPU utilization %v of a busy loop", last.CPUUtilization)
	}
}

// TestMetricsSharedGPUAndDroppedInstance: two workloads on one shared GPU
// both see the GPU as busy as they are together; an instance that left the
// host behind the agent's back makes the server refuse the report, and the
// agent sends it again without that instance.
func TestMetricsSharedGPUAndDroppedInstance(t *testing.T) {
	e := newEnv(t, h100)
	e.assign(e.assignment("i-a", shared(e.host.ID(), 2, 500, 1024), serveScript),
		e.assignment("i-b", shared(e.host.ID(), 2, 500, 1024), serveScript))
	envA, envB := e.workloadEnv("i-a"), e.workloadEnv("i-b")
	e.untilPhase("i-a", agentapi.PhaseRunning)
	e.untilPhase("i-b", agentapi.PhaseRunning)
	for env, load := range map[string]string{envA[runtime.EnvMetadataURL]: "0.25", envB[runtime.EnvMetadataURL]: "0.5"} {
		if status, body := metadataCall(t, env, http.MethodPut, "/v1/load", `{"gpu_utilization": `+load+`}`); status != 200 {
			t.Fatalf("PUT /v1/load: %d %s", status, body)
		}
	}
	for _, id := range []string{"i-a", "i-b"} {
		got := e.sample(id)
		if len(got) == 0 || got[len(got)-1].GPUUtilization == nil || *got[len(got)-1].GPUUtilization != 0.75 {
			t.Fatalf("%s: %+v, want 0.75", id, got)
		}
		// A share's GPU memory is its neighbours' too: not reported.
		if m := got[len(got)-1].GPUMemoryUsedBytes; m != nil {
			t.Errorf("%s: a share reports the GPU's memory %d", id, *m)
		}
	}
	e.srv.Drop("i-b") // the agent has not seen it go yet
	before := e.srv.Calls("ReportMetrics")
	got := e.sample("i-a")
	if len(got) != 3 || e.srv.Calls("ReportMetrics") != before+2 || len(e.srv.Samples("i-b")) != 2 {
		t.Fatalf("after the drop: %d samples of i-a, %d calls, %d samples of i-b", len(got), e.srv.Calls("ReportMetrics")-before, len(e.srv.Samples("i-b")))
	}
}

// TestMetricsRun: Run samples every MetricsInterval, and a failed report is
// retried with the next tick.
func TestMetricsRun(t *testing.T) {
	e := newEnv(t, h100, func(c *agent.Config) { c.MetricsInterval = 30 * time.Millisecond })
	e.srv.FailNext("ReportMetrics", 2, cloud.Errorf(cloud.Internal, "database down"))
	e.run()
	e.assign(e.assignment("i-run", whole(e.host.ID(), 3), serveScript))
	e.until("samples of i-run", func() bool { return len(e.srv.Samples("i-run")) >= 2 })
}

// TestMetadataLockReachesControlPlane: a workload's PUT of its scale-in
// lock answers only once the control plane recorded it; a control plane
// that fails answers 503 and shows no lock; DELETE releases it.
func TestMetadataLockReachesControlPlane(t *testing.T) {
	e := newEnv(t, h100)
	e.assign(e.assignment("i-lock", whole(e.host.ID(), 0), serveScript))
	base := e.workloadEnv("i-lock")[runtime.EnvMetadataURL]

	e.srv.FailNext("SetScaleInLock", 1, cloud.Errorf(cloud.Internal, "database down"))
	status, body := metadataCall(t, base, http.MethodPut, "/v1/scale-in-lock", `{"reason": "checkpointing"}`)
	if status != 503 || !strings.Contains(body, "database down") {
		t.Fatalf("PUT with a failing control plane: %d %s", status, body)
	}
	if status, _ := metadataCall(t, base, http.MethodGet, "/v1/scale-in-lock", ""); status != 404 || e.srv.ScaleIn("i-lock") != nil {
		t.Fatalf("a lock the control plane did not take shows: %d", status)
	}

	status, body = metadataCall(t, base, http.MethodPut, "/v1/scale-in-lock", `{"reason": "checkpointing"}`)
	// Recorded by the time the workload has its answer.
	si := e.srv.ScaleIn("i-lock")
	if status != 200 || si == nil || si.Lock == nil || si.Lock.Reason != "checkpointing" {
		t.Fatalf("PUT: %d %s; the control plane has %+v", status, body, si)
	}
	var shown cloud.ScaleLock
	if err := json.Unmarshal([]byte(body), &shown); err != nil || !shown.At.Equal(si.Lock.At) || shown.Reason != "checkpointing" {
		t.Fatalf("PUT answered %s, the control plane recorded %+v", body, si.Lock)
	}
	if reqs := e.srv.LockRequests("i-lock"); len(reqs) != 1 || !reqs[0].Locked || reqs[0].Reason != "checkpointing" {
		t.Fatalf("lock requests %+v", reqs)
	}
	if status, _ := metadataCall(t, base, http.MethodDelete, "/v1/scale-in-lock", ""); status != 204 || e.srv.ScaleIn("i-lock") != nil {
		t.Fatalf("DELETE: %d; the control plane has %+v", status, e.srv.ScaleIn("i-lock"))
	}
	if status, _ := metadataCall(t, base, http.MethodGet, "/v1/scale-in-lock", ""); status != 404 {
		t.Fatalf("GET after DELETE: %d", status)
	}
	// The sim host takes loads; the endpoint says so by accepting one.
	if status, _ := metadataCall(t, base, http.MethodPut, "/v1/load", `{"gpu_utilization": 0.1}`); status != 200 {
		t.Fatalf("PUT /v1/load on a simulated host: %d", status)
	}
}

// TestScaleInNoticeOnDemand: an on-demand group member chosen for
// scale-in sees the notice, with its reason, at both instance-action paths.
func TestScaleInNoticeOnDemand(t *testing.T) {
	e := newEnv(t, h100)
	a := e.assignment("i-od", whole(e.host.ID(), 1), serveScript)
	a.Market = cloud.MarketOnDemand
	e.assign(a)
	base := e.workloadEnv("i-od")[runtime.EnvMetadataURL]
	at := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	a.Interruption = &cloud.Interruption{Action: cloud.ActionTerminate, Reason: cloud.ReclaimScaleIn, NoticedAt: at, Deadline: at.Add(2 * time.Minute)}
	e.assign(a)
	for _, path := range []string{"/v1/instance-action", "/v1/spot/instance-action"} {
		var body string
		e.until("the scale-in notice at "+path, func() bool {
			var status int
			status, body = metadataCall(t, base, http.MethodGet, path, "")
			return status == 200
		})
		if want := `{"action":"terminate","time":"2026-12-02T12:02:00Z","reason":"scale-in"}`; body != want {
			t.Fatalf("%s: %s, want %s", path, body, want)
		}
	}
}
