package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agent/gpu/sim"
	"github.com/gpucloud/gpucloud/agent/runtime/containerd"
	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/store/pgtest"
)

// echoImage is the endpoints' worker image: the base image with
// examples/echoworker.
const echoImage = "docker.io/gpucloud/echoworker:1"

// TestEndpoints: serverless endpoints end to end on containers, on both
// stores: a queue endpoint at zero answers a runsync (a cold start), runs
// a burst on up to its max workers, retries a failing job until its
// attempts run out, scales back to zero once idle; an HTTP endpoint at
// zero answers a request with the tenant's token kept from the worker;
// another tenant can neither see nor call either; deleting them
// terminates their workers.
func TestEndpoints(t *testing.T) {
	ch := startContainerHost(t)
	// The image runs the worker when an endpoint gives no command.
	ch.importImageWith(t, echoImage, containerd.ImageConfig{Cmd: []string{"/usr/local/bin/echoworker"}},
		containerd.File{Path: "/usr/local/bin/echoworker", Mode: 0o755, Data: buildStatic(t, "echoworker")})
	t.Run("sqlite", func(t *testing.T) { testEndpoints(t, ch, "sqlite://"+filepath.Join(t.TempDir(), "gpucloud.db")) })
	t.Run("postgres", func(t *testing.T) { testEndpoints(t, ch, pgtest.URL(t)) })
}

func testEndpoints(t *testing.T, ch *containerHost, db string) {
	spec := sim.Spec{ID: "sim-l4", Zone: "zone-a", GPUs: sim.GPUSpec{Model: "L4", Count: 4}}
	c := startClusterOn(t, db, nil, nil, ch.runtimeOf, spec)
	ctx := t.Context()
	_, alice, aliceToken := c.member("acme", "alice")
	_, bob, _ := c.member("globex", "bob")

	ep, err := alice.CreateEndpoint(ctx, api.CreateEndpointRequest{Name: "echo", EndpointSpec: cloud.EndpointSpec{
		Image: echoImage, Command: []string{"/usr/local/bin/echoworker"}, Offerings: []string{"l4.1x"},
		Max: 2, IdleTimeoutSeconds: 3, Retries: 2, TimeoutSeconds: 30}}, "create-echo")
	if err != nil {
		t.Fatal(err)
	}

	// A cold start: the first job of an endpoint at zero.
	began := time.Now()
	j, err := alice.RunJobSync(ctx, "echo", json.RawMessage(`{"msg":"hi"}`), 60*time.Second, "")
	cold := time.Since(began)
	if err != nil || j.State != cloud.JobCompleted {
		t.Fatalf("runsync from zero: %+v, %v", j, err)
	}
	var out struct {
		Echo   map[string]string `json:"echo"`
		Job    string            `json:"job"`
		Worker string            `json:"worker"`
	}
	if err := json.Unmarshal(j.Output, &out); err != nil || out.Echo["msg"] != "hi" || out.Job != j.ID || j.Attempts != 1 {
		t.Errorf("output %s (%v), attempts %d", j.Output, err, j.Attempts)
	}
	t.Logf("cold start from zero, request to answer: %v", cold.Round(time.Millisecond))
	var d *api.EndpointDetail
	c.until("the cold start to be recorded", func() (bool, string) {
		d, err = alice.GetEndpoint(ctx, "echo")
		return err == nil && len(d.Status.ColdStarts) == 1 && len(d.Workers) == 1 && d.Workers[0].Ready, fmt.Sprintf("%+v %v", d, err)
	})
	cs := d.Status.ColdStarts[0]
	t.Logf("cold start: placed after %d ms, its agent took it after %d ms, running after %d ms (the image %d ms of it), ready after %d ms",
		cs.ScheduledMillis, cs.StartingMillis, cs.RunningMillis, cs.ImageMillis, cs.ReadyMillis)
	if cs.ReadyMillis < cs.RunningMillis || cs.RunningMillis <= 0 || cs.ScheduledMillis <= 0 ||
		cs.StartingMillis < cs.ScheduledMillis || cs.RunningMillis < cs.StartingMillis ||
		cs.ImageMillis <= 0 || cs.ImageMillis > cs.RunningMillis-cs.StartingMillis+1 {
		t.Errorf("cold start %+v: want 0 < placed <= agent <= running <= ready, and the image within agent to running", cs)
	}

	// Warm: a worker is ready.
	for i := range 10 {
		if j, err := alice.RunJobSync(ctx, ep.ID, json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)), 30*time.Second, ""); err != nil || j.State != cloud.JobCompleted {
			t.Fatalf("warm runsync %d: %+v %v", i, j, err)
		}
	}

	// A burst of slow jobs: the endpoint grows to its max and runs them all.
	var ids []string
	for i := range 6 {
		j, err := alice.RunJob(ctx, "echo", json.RawMessage(fmt.Sprintf(`{"n":%d,"sleep_ms":1500}`, i)), fmt.Sprintf("burst-%d", i))
		if err != nil || j.State != cloud.JobQueued {
			t.Fatalf("run %d: %+v %v", i, j, err)
		}
		ids = append(ids, j.ID)
	}
	most := 0
	workers := map[string]bool{}
	c.until("the burst to finish", func() (bool, string) {
		if d, err := alice.GetEndpoint(ctx, "echo"); err == nil {
			most = max(most, len(d.Workers))
		}
		done := 0
		for _, id := range ids {
			j, err := alice.JobStatus(ctx, "echo", id)
			if err == nil && j.State == cloud.JobCompleted {
				done++
				workers[j.Worker] = true
			}
		}
		return done == len(ids), fmt.Sprintf("%d of %d done, at most %d workers", done, len(ids), most)
	})
	if most != 2 || len(workers) != 2 {
		t.Errorf("the burst ran on %d workers (at most %d at once); want the max, 2", len(workers), most)
	}

	// A job that always fails: its attempts run out.
	bad, err := alice.RunJobSync(ctx, "echo", json.RawMessage(`{"fail":true}`), 60*time.Second, "")
	if err != nil || bad.State != cloud.JobFailed || bad.Attempts != 3 || !strings.Contains(bad.Error, "500") {
		t.Errorf("failing job: %+v %v", bad, err)
	}

	// The host's agent restarts while a job runs: the attempt is lost
	// with the agent's connection, and the job runs again to completion.
	slow, err := alice.RunJob(ctx, "echo", json.RawMessage(`{"sleep_ms":4000}`), "")
	if err != nil {
		t.Fatal(err)
	}
	// The job is marked running when the gateway takes it, a moment
	// before its session to the worker opens through the agent; a
	// restart in that moment fails the dial, and the job goes back to
	// the queue uncounted (service.Endpoints.Return), to run once on the
	// new agent. A second in, the request is at the worker, and three
	// seconds of it remain for the restart to cut.
	c.until("the slow job to be a second into its run", func() (bool, string) {
		j, err := alice.JobStatus(ctx, "echo", slow.ID)
		return err == nil && j.State == cloud.JobRunning && j.StartedAt != nil && time.Since(*j.StartedAt) >= time.Second,
			fmt.Sprintf("%+v %v", j, err)
	})
	c.hosts[spec.ID].restart()
	c.until("the slow job to finish after the agent's restart", func() (bool, string) {
		j, err := alice.JobStatus(ctx, "echo", slow.ID)
		return err == nil && j.State.Finished(), fmt.Sprintf("%+v %v", j, err)
	})
	if j, _ := alice.JobStatus(ctx, "echo", slow.ID); j.State != cloud.JobCompleted || j.Attempts < 2 {
		t.Errorf("the job the agent's restart cut: %+v", j)
	}

	// A new spec rolls the workers over: a current worker takes the jobs,
	// and the outdated ones go once idle.
	up, err := alice.UpdateEndpoint(ctx, "echo", api.UpdateEndpointRequest{Env: &map[string]string{"RELEASE": "2"}}, 0)
	if err != nil || up.Status.Generation != 2 {
		t.Fatalf("update: %+v %v", up, err)
	}
	if j, err := alice.RunJobSync(ctx, "echo", json.RawMessage(`{"after":"update"}`), 60*time.Second, ""); err != nil || j.State != cloud.JobCompleted {
		t.Errorf("a job after the update: %+v %v", j, err)
	}
	c.until("every worker to run the new spec", func() (bool, string) {
		d, err := alice.GetEndpoint(ctx, "echo")
		if err != nil || len(d.Workers) == 0 {
			return false, fmt.Sprintf("%+v %v", d, err)
		}
		for _, w := range d.Workers {
			if w.Outdated && w.State != cloud.Terminating && w.State != cloud.Terminated {
				return false, fmt.Sprintf("worker %s is outdated and %s", w.Name, w.State)
			}
		}
		return true, ""
	})

	// Another tenant sees and calls nothing, by name or ID.
	for _, ref := range []string{"echo", ep.ID} {
		if _, err := bob.GetEndpoint(ctx, ref); cloud.ErrorCode(err) != cloud.NotFound {
			t.Errorf("bob describes %s: %v", ref, err)
		}
		if _, err := bob.RunJob(ctx, ref, nil, ""); cloud.ErrorCode(err) != cloud.NotFound {
			t.Errorf("bob runs on %s: %v", ref, err)
		}
		if _, err := bob.JobStatus(ctx, ref, ids[0]); cloud.ErrorCode(err) != cloud.NotFound {
			t.Errorf("bob reads a job of %s: %v", ref, err)
		}
		if _, err := bob.CancelJob(ctx, ref, ids[0]); cloud.ErrorCode(err) != cloud.NotFound {
			t.Errorf("bob cancels a job of %s: %v", ref, err)
		}
		if _, err := bob.DeleteEndpoint(ctx, ref); cloud.ErrorCode(err) != cloud.NotFound {
			t.Errorf("bob deletes %s: %v", ref, err)
		}
	}
	if es, err := bob.Endpoints(ctx, "", true); err != nil || len(es) != 0 {
		t.Errorf("bob lists %v %v", es, err)
	}

	// Idle for the idle timeout: back to zero.
	c.until("the endpoint to scale to zero", func() (bool, string) {
		d, err := alice.GetEndpoint(ctx, "echo")
		return err == nil && len(d.Workers) == 0, fmt.Sprintf("%+v %v", d, err)
	})

	// HTTP mode, from zero; the worker never sees the tenant's token.
	web, err := alice.CreateEndpoint(ctx, api.CreateEndpointRequest{Name: "web", EndpointSpec: cloud.EndpointSpec{
		Image: echoImage, Offerings: []string{"l4.1x"}, Mode: cloud.EndpointHTTP, // the image's own command
		Max: 1, IdleTimeoutSeconds: 3, QueueWaitSeconds: 60}}, "")
	if err != nil {
		t.Fatal(err)
	}
	began = time.Now()
	resp, err := alice.EndpointRequest(ctx, "web", "POST", "/v1/generate?x=1", strings.NewReader(`{"prompt":"hello"}`),
		http.Header{"Content-Type": {"application/json"}, "Cookie": {"gpucloud_session=secret; theirs=1"}})
	if err != nil {
		t.Fatalf("HTTP request from zero: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	t.Logf("HTTP cold start from zero, request to answer: %v", time.Since(began).Round(time.Millisecond))
	var echoed struct {
		Method, Path, Query, Body string
		Header                    http.Header
	}
	if err := json.Unmarshal(body, &echoed); err != nil || echoed.Method != "POST" || echoed.Path != "/v1/generate" || echoed.Query != "x=1" ||
		echoed.Body != `{"prompt":"hello"}` {
		t.Errorf("the worker saw %s (%v)", body, err)
	}
	if echoed.Header.Get("Authorization") != "" || strings.Contains(echoed.Header.Get("Cookie"), "gpucloud_") ||
		strings.Contains(string(body), aliceToken) || !strings.Contains(echoed.Header.Get("Cookie"), "theirs=1") {
		t.Errorf("the worker saw the tenant's credentials, or lost its own cookie: %v", echoed.Header)
	}
	if got := echoed.Header.Get("X-Forwarded-Prefix"); got != "/v1/endpoints/web/http" {
		t.Errorf("X-Forwarded-Prefix %q", got)
	}
	if _, err := bob.EndpointRequest(ctx, "web", "GET", "/", nil, nil); cloud.ErrorCode(err) != cloud.NotFound {
		t.Errorf("bob calls web: %v", err)
	}
	if _, err := bob.EndpointRequest(ctx, web.ID, "GET", "/", nil, nil); cloud.ErrorCode(err) != cloud.NotFound {
		t.Errorf("bob calls web by ID: %v", err)
	}
	// A queue endpoint takes no HTTP, an HTTP one no jobs: both say so.
	if _, err := alice.EndpointRequest(ctx, "echo", "GET", "/", nil, nil); cloud.ErrorCode(err) != cloud.Conflict {
		t.Errorf("HTTP to a queue endpoint: %v", err)
	}
	if _, err := alice.RunJob(ctx, "web", nil, ""); cloud.ErrorCode(err) != cloud.Conflict {
		t.Errorf("a job to an HTTP endpoint: %v", err)
	}

	// Delete both: their workers go, then they are deleted.
	for _, ref := range []string{"echo", "web"} {
		if _, err := alice.DeleteEndpoint(ctx, ref); err != nil {
			t.Fatal(err)
		}
	}
	c.until("both endpoints to be deleted", func() (bool, string) {
		es, err := alice.Endpoints(ctx, "", true)
		deleted := 0
		for _, e := range es {
			if e.State == cloud.EndpointDeleted {
				deleted++
			}
		}
		return err == nil && deleted == 2, fmt.Sprintf("%d of 2 deleted (%v)", deleted, err)
	})
	for _, in := range c.instances(alice, client.ListInstancesOptions{}) {
		if in.State != cloud.Terminated {
			t.Errorf("worker %s (%s) is %s after its endpoint's deletion", in.ID, in.Name, in.State)
		}
	}
}
