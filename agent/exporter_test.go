package agent_test

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"

	"github.com/gpucloud/gpucloud/agent/exporter"
	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/agentapi"
)

// TestExporterFollowsAgent: the exporter labels the GPUs of a running
// instance with its ID and tenant from the agent's assignments, and
// serves the load its workload set on the metadata endpoint once the
// sampler passed it to the simulated driver.
func TestExporterFollowsAgent(t *testing.T) {
	e := newEnv(t, h100)
	if got := e.ag.Assignments(); got != nil {
		t.Fatalf("assignments before any pass: %+v", got)
	}
	e.assign(e.assignment("i-x", whole(e.host.ID(), 1), serveScript))
	env := e.workloadEnv("i-x")
	e.untilPhase("i-x", agentapi.PhaseRunning)
	if got := e.ag.Assignments(); len(got) != 1 || got[0].InstanceID != "i-x" {
		t.Fatalf("assignments: %+v", got)
	}
	if status, body := metadataCall(t, env[runtime.EnvMetadataURL], http.MethodPut, "/v1/load", `{"gpu_utilization": 0.4}`); status != 200 {
		t.Fatalf("PUT /v1/load: %d %s", status, body)
	}
	e.sample("i-x")

	h := exporter.Handler(exporter.New(exporter.Config{Driver: e.host, Hostname: e.host.ID(), Assignments: e.ag.Assignments,
		Workloads: e.rt}), nil)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body := rec.Body.String()
	busy := regexp.MustCompile(`(?m)^DCGM_FI_DEV_GPU_UTIL\{Hostname="` + e.host.ID() + `",UUID="[^"]+",gpu="1",instance_id="i-x",modelName="[^"]+",tenant="tenant-1"\} 40$`)
	if !busy.MatchString(body) {
		t.Errorf("no DCGM_FI_DEV_GPU_UTIL 40 for gpu 1 of i-x in:\n%s", body)
	}
	idle := regexp.MustCompile(`(?m)^DCGM_FI_DEV_GPU_UTIL\{Hostname="[^"]+",UUID="[^"]+",gpu="0",modelName="[^"]+"\} 0$`)
	if !idle.MatchString(body) {
		t.Errorf("no unlabelled DCGM_FI_DEV_GPU_UTIL 0 for gpu 0 in:\n%s", body)
	}
	// The workload's process group, read by the process runtime.
	for _, re := range []string{
		`(?m)^gpucloud_instance_cpu_seconds_total\{instance_id="i-x",tenant="tenant-1"\} [0-9.e+-]+$`,
		`(?m)^gpucloud_instance_memory_bytes\{instance_id="i-x",tenant="tenant-1"\} [1-9][0-9.e+-]*$`,
	} {
		if !regexp.MustCompile(re).MatchString(body) {
			t.Errorf("no %s in:\n%s", re, body)
		}
	}
}
