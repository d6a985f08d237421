package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/testkit"
)

// setEndpoint changes an endpoint in the store, as its controller would.
func (e *cloudEnv) setEndpoint(id string, fn func(*cloud.Endpoint)) {
	e.t.Helper()
	ctx := context.Background()
	if err := e.st.Tx(ctx, func(tx cloud.Tx) error {
		ep, err := tx.GetEndpoint(ctx, id)
		if err != nil {
			return err
		}
		fn(ep)
		return tx.UpdateEndpoint(ctx, ep)
	}); err != nil {
		e.t.Fatal(err)
	}
}

// rowFields returns the fields of the line of a table whose first field is
// first, or nil.
func rowFields(out, first string) []string {
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == first {
			return f
		}
	}
	return nil
}

// TestEndpointsRoundTrip: create (defaults and every flag), list,
// describe (with a worker and a cold start), update (only the flags
// given), delete --wait; another tenant finds none of it.
func TestEndpointsRoundTrip(t *testing.T) {
	e := newCloudEnv(t)
	_, tok := e.member("acme", "alice")
	_, other := e.member("bobco", "bob")

	var echo cloud.Endpoint
	decodeJSON(t, e.ok(tok, "endpoints", "create", "echo", "--image", "ghcr.io/acme/echo:1", "--offering", "l4.1x", "-o", "json"), &echo)
	want := cloud.EndpointSpec{Image: "ghcr.io/acme/echo:1", Offerings: []string{"l4.1x"}, Port: 8080, HealthPath: "/health",
		Mode: cloud.EndpointQueue, Min: 0, Max: 3, Concurrency: 1, IdleTimeoutSeconds: 30, TimeoutSeconds: 600, Retries: 2,
		RetentionSeconds: 86400, QueueWaitSeconds: 30}
	if echo.Name != "echo" || !strings.HasPrefix(echo.ID, "ep-") || !reflect.DeepEqual(echo.Spec, want) || echo.State != cloud.EndpointActive {
		t.Errorf("created with defaults: %+v, want spec %+v", echo, want)
	}
	var chat cloud.Endpoint
	decodeJSON(t, e.ok(tok, "endpoints", "create", "chat", "--mode", "http", "--image", "ghcr.io/acme/llm:2", "--offering", "l4.1x",
		"--offering", "L40S.1x", "--port", "9000", "--health-path", "/ready", "--min", "1", "--max", "4", "--concurrency", "8",
		"--idle-timeout", "5m", "--timeout", "90s", "--retries", "0", "--retention", "1h", "--queue-wait", "45s", "--spot", "--warm", "2",
		"--zone", "zone-a", "--label", "driver>=550", "--env", "MODEL=llama", "--env", "A=1", "--idempotency-key", "k1",
		"-o", "json", "--", "python", "serve.py"), &chat)
	want = cloud.EndpointSpec{Image: "ghcr.io/acme/llm:2", Command: []string{"python", "serve.py"}, Env: map[string]string{"MODEL": "llama", "A": "1"},
		Offerings: []string{"l4.1x", "l40s.1x"}, Port: 9000, HealthPath: "/ready", Mode: cloud.EndpointHTTP, Min: 1, Max: 4, Concurrency: 8,
		IdleTimeoutSeconds: 300, TimeoutSeconds: 90, Retries: 0, RetentionSeconds: 3600, QueueWaitSeconds: 45, Spot: true, Warm: 2,
		Zones: []string{"zone-a"}, Labels: []string{"driver>=550"}}
	if !reflect.DeepEqual(chat.Spec, want) {
		t.Errorf("created from every flag:\n%+v\nwant\n%+v", chat.Spec, want)
	}
	// The same key answers the same endpoint.
	var again cloud.Endpoint
	decodeJSON(t, e.ok(tok, "endpoints", "create", "chat", "--mode", "http", "--image", "ghcr.io/acme/llm:2", "--offering", "l4.1x",
		"--offering", "L40S.1x", "--port", "9000", "--health-path", "/ready", "--min", "1", "--max", "4", "--concurrency", "8",
		"--idle-timeout", "5m", "--timeout", "90s", "--retries", "0", "--retention", "1h", "--queue-wait", "45s", "--spot", "--warm", "2",
		"--zone", "zone-a", "--label", "driver>=550", "--env", "MODEL=llama", "--env", "A=1", "--idempotency-key", "k1",
		"-o", "json", "--", "python", "serve.py"), &again)
	if again.ID != chat.ID {
		t.Errorf("a retry with key k1 made %s, want %s", again.ID, chat.ID)
	}

	out := e.ok(tok, "endpoints", "list")
	for _, c := range []struct {
		name string
		want []string
	}{
		{"echo", []string{"echo", echo.ID, "queue", "0/0", "0/3", "active", "ghcr.io/acme/echo:1"}},
		{"chat", []string{"chat", chat.ID, "http", "0/0", "1/4", "active", "ghcr.io/acme/llm:2"}},
	} {
		if got := rowFields(out, c.name); !reflect.DeepEqual(got, c.want) {
			t.Errorf("list row of %s = %q, want %q\n%s", c.name, got, c.want, out)
		}
	}
	if h := rowFields(out, "NAME"); !reflect.DeepEqual(h, []string{"NAME", "ID", "MODE", "WORKERS", "MIN/MAX", "STATE", "IMAGE"}) {
		t.Errorf("list header %q", h)
	}

	out = e.ok(tok, "endpoints", "describe", "chat")
	for _, s := range []string{"Mode:", "http", "python serve.py", "A=1, MODEL=llama", "l4.1x, l40s.1x", "9000, ready when GET /ready answers 2xx",
		"min 1, desired 0, max 4; 0 launched, 0 ready", "8 per worker", "idle timeout 5m0s, timeout 1m30s, queue wait 45s",
		"0 retries, results kept 1h0m0s", "spot, on demand when none fits", "Warm pool:", "2 paused kept (billed as running), 0 paused now", "zone-a", "driver>=550", "0 queued, 0 running",
		"Latency:", "nothing finished", "Cost:", "$0.00 so far in", "Workers: none", "Cold starts: none"} {
		if !strings.Contains(out, s) {
			t.Errorf("describe lacks %q:\n%s", s, out)
		}
	}

	// A worker and its cold start, as the controller records them.
	var in cloud.Instance
	decodeJSON(t, e.ok(tok, "instances", "create", "--offering", "l4.1x", "--name", "echo-1", "-o", "json"), &in)
	launched := e.clock.Now()
	e.setEndpoint(echo.ID, func(ep *cloud.Endpoint) {
		ep.Status.Workers = []cloud.WorkerRef{{ID: in.ID, Generation: 1, Market: cloud.MarketOnDemand, LaunchedAt: launched}}
		ep.Status.Desired, ep.Status.Reason = 1, "1 queued job: 1 worker wanted"
		ep.Status.ColdStarts = []cloud.ColdStart{{Worker: in.ID, LaunchedAt: launched, ScheduledMillis: 12, StartingMillis: 40, RunningMillis: 850, ReadyMillis: 1320, ImageMillis: 3}}
	})
	if got := rowFields(e.ok(tok, "endpoints", "list"), "echo"); len(got) < 4 || got[3] != "1/1" {
		t.Errorf("list row with a worker: %q", got)
	}
	out = e.ok(tok, "endpoints", "describe", echo.ID)
	for _, s := range []string{"min 0, desired 1, max 3; 1 launched, 0 ready", "1 queued job: 1 worker wanted", "Workers:", "Cold starts:",
		launched.UTC().Format(time.RFC3339) + "  12ms    40ms      850ms    1320ms  3ms"} {
		if !strings.Contains(out, s) {
			t.Errorf("describe with a worker lacks %q:\n%s", s, out)
		}
	}
	if row := rowFields(out, in.ID); len(row) < 9 || row[1] != "echo-1" || row[3] != "-" || row[4] != "0" || row[6] != "-" || row[8] != "l4.1x" {
		t.Errorf("worker row %q:\n%s", row, out)
	}
	var d struct {
		Workers []struct{ ID string } `json:"workers"`
		Status  cloud.EndpointStatus  `json:"status"`
	}
	decodeJSON(t, e.ok(tok, "endpoints", "describe", "echo", "-o", "json"), &d)
	if len(d.Workers) != 1 || d.Workers[0].ID != in.ID || len(d.Status.ColdStarts) != 1 {
		t.Errorf("describe -o json = %+v", d)
	}

	// Update sends only the flags given.
	var up cloud.Endpoint
	decodeJSON(t, e.ok(tok, "endpoints", "update", "echo", "--image", "ghcr.io/acme/echo:2", "--max", "5", "--idle-timeout", "2m",
		"--env", "A=2", "--warm", "1", "-o", "json"), &up)
	if up.Spec.Image != "ghcr.io/acme/echo:2" || up.Spec.Max != 5 || up.Spec.Warm != 1 || up.Spec.IdleTimeoutSeconds != 120 || !reflect.DeepEqual(up.Spec.Env, map[string]string{"A": "2"}) ||
		up.Spec.TimeoutSeconds != 600 || up.Spec.Retries != 2 || up.Spec.Concurrency != 1 || up.Status.Generation != 2 {
		t.Errorf("update = %+v", up)
	}
	decodeJSON(t, e.ok(tok, "endpoints", "update", "echo", "--retries", "0", "--if-match", `"`+jsonInt(up.Version)+`"`, "-o", "json", "--", "python", "v2.py"), &up)
	if up.Spec.Retries != 0 || !reflect.DeepEqual(up.Spec.Command, []string{"python", "v2.py"}) || up.Spec.Max != 5 || up.Spec.Warm != 1 || up.Status.Generation != 3 {
		t.Errorf("update with a command = %+v", up)
	}
	code, _, errOut := e.as(tok, "endpoints", "update", "echo", "--max", "6", "--if-match", "1")
	if code != ExitError || !strings.Contains(errOut, "conflict") {
		t.Errorf("update with a stale --if-match: %d %q", code, errOut)
	}

	// Another tenant sees none of it, by name or ID, and changes nothing.
	before := e.ok(tok, "endpoints", "list", "-o", "json")
	if out := e.ok(other, "endpoints", "list"); strings.TrimSpace(out) != "no endpoints" {
		t.Errorf("bob's list: %q", out)
	}
	for _, args := range [][]string{
		{"endpoints", "describe", "echo"},
		{"endpoints", "describe", echo.ID},
		{"endpoints", "update", echo.ID, "--max", "1"},
		{"endpoints", "delete", echo.ID},
		{"endpoints", "run", echo.ID, "--input", "1"},
		{"endpoints", "status", echo.ID, "job-0123456789abcdef"},
		{"endpoints", "cancel", echo.ID, "job-0123456789abcdef"},
		{"endpoints", "call", chat.ID, "/"},
	} {
		code, _, errOut := e.as(other, args...)
		if code != ExitError || !strings.Contains(errOut, "not_found") {
			t.Errorf("bob: %v: exit %d, %q; want not_found", args, code, errOut)
		}
	}
	if after := e.ok(tok, "endpoints", "list", "-o", "json"); after != before {
		t.Errorf("bob's calls changed alice's endpoints:\n%s\n%s", before, after)
	}

	// Delete --wait returns once the controller marks the endpoint deleted.
	wait := e.start(tok, "endpoints", "delete", "echo", "--wait", "-o", "json")
	e.askedAgain("GET /v1/endpoints/" + echo.ID)
	e.setEndpoint(echo.ID, func(ep *cloud.Endpoint) { ep.State, ep.Status.Workers = cloud.EndpointDeleted, nil })
	code, out, errOut = wait()
	if code != 0 || !strings.Contains(out, `"state": "deleted"`) {
		t.Errorf("delete --wait: %d %s %s", code, out, errOut)
	}
	if got := rowFields(e.ok(tok, "endpoints", "list"), "echo"); got != nil {
		t.Errorf("list after delete shows %q", got)
	}
	if got := rowFields(e.ok(tok, "endpoints", "list", "--all"), "echo"); len(got) < 6 || got[5] != "deleted" {
		t.Errorf("list --all after delete: %q", got)
	}
	// Its name is free, and answers the live endpoint before the deleted one.
	var echo2 cloud.Endpoint
	decodeJSON(t, e.ok(tok, "endpoints", "create", "echo", "--image", "ghcr.io/acme/echo:3", "--offering", "l4.1x", "-o", "json"), &echo2)
	if out := e.ok(tok, "endpoints", "describe", "echo"); !strings.Contains(out, echo2.ID) {
		t.Errorf("describe echo after a new one: %s", out)
	}
	// Delete without --wait, and a timed-out wait.
	code, _, errOut = e.as(tok, "endpoints", "delete", "chat", "--wait", "--timeout", "50ms")
	if code != ExitError || !strings.Contains(errOut, "gave up after 50ms") {
		t.Errorf("delete --wait --timeout 50ms: %d %q", code, errOut)
	}
}

func jsonInt(v int64) string { b, _ := json.Marshal(v); return string(b) }

func compact(t *testing.T, m json.RawMessage) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, m); err != nil {
		t.Errorf("%q: %v", m, err)
	}
	return b.String()
}

// TestEndpointsJobs: run, status and cancel on a queue endpoint without
// workers (jobs stay queued); run --sync answered by a worker the test
// plays; the verbs of one mode refused on the other.
func TestEndpointsJobs(t *testing.T) {
	e := newCloudEnv(t)
	_, tok := e.member("acme", "alice")
	var ep cloud.Endpoint
	decodeJSON(t, e.ok(tok, "endpoints", "create", "echo", "--image", "ghcr.io/acme/echo:1", "--offering", "l4.1x", "--retries", "0", "-o", "json"), &ep)

	// run --sync: the test claims the job and answers it as a gateway
	// would, while the CLI polls.
	ctx := context.Background()
	answer := func(output, errMsg string) {
		t.Helper()
		var js []*cloud.Job
		testkit.Eventually(t, 0, "a job to claim", func() bool {
			var err error
			js, err = e.Services.Endpoints.Claim(ctx, ep.ID, "test", 1, time.Minute)
			return err == nil && len(js) == 1
		})
		if _, err := e.Services.Endpoints.Finish(ctx, js[0], "i-0123456789abcdef", json.RawMessage(output), errMsg, false); err != nil {
			t.Fatal(err)
		}
	}
	wait := e.start(tok, "endpoints", "run", "echo", "--input", `{"prompt": "hi"}`, "--sync", "-o", "json")
	answer(`{"echo": "hi"}`, "")
	code, out, errOut := wait()
	var done cloud.Job
	decodeJSON(t, out, &done)
	if code != 0 || done.State != cloud.JobCompleted || compact(t, done.Output) != `{"echo":"hi"}` || compact(t, done.Input) != `{"prompt":"hi"}` {
		t.Errorf("run --sync: exit %d, %+v, %q", code, done, errOut)
	}
	out = e.ok(tok, "endpoints", "status", "echo", done.ID)
	for _, s := range []string{"ID:", done.ID, "State:", "completed", "Attempts:", "1 of 1", "i-0123456789abcdef", "Output:\n{\n  \"echo\": \"hi\"\n}"} {
		if !strings.Contains(out, s) {
			t.Errorf("status of a completed job lacks %q:\n%s", s, out)
		}
	}
	wait = e.start(tok, "endpoints", "run", "echo", "--sync")
	answer("", "the worker answered 500")
	code, out, errOut = wait()
	if code != ExitError || !strings.Contains(out, "failed") || !strings.Contains(errOut, "failed: the worker answered 500") {
		t.Errorf("run --sync of a failing job: exit %d\n%s\n%s", code, out, errOut)
	}

	// Without workers, jobs stay queued.
	var j cloud.Job
	decodeJSON(t, e.ok(tok, "endpoints", "run", "echo", "--input", `{"n": 1}`, "-o", "json"), &j)
	if j.State != cloud.JobQueued || j.EndpointID != ep.ID || !strings.HasPrefix(j.ID, "job-") {
		t.Errorf("run = %+v", j)
	}
	file := filepath.Join(t.TempDir(), "job.json")
	if err := os.WriteFile(file, []byte(`[1, 2, 3]`), 0o600); err != nil {
		t.Fatal(err)
	}
	out = e.ok(tok, "endpoints", "run", ep.ID, "--input-file", file)
	if !strings.Contains(out, "queued") || strings.Contains(out, "Output:") {
		t.Errorf("run --input-file:\n%s", out)
	}
	var idem [2]cloud.Job
	for i := range idem {
		decodeJSON(t, e.ok(tok, "endpoints", "run", "echo", "--idempotency-key", "j1", "-o", "json"), &idem[i])
	}
	if idem[0].ID != idem[1].ID || compact(t, idem[0].Input) != "null" {
		t.Errorf("runs with one key: %+v", idem)
	}
	code, out, errOut = e.as(tok, "endpoints", "run", "echo", "--input", "{}", "--sync", "--wait", "1s", "-o", "json")
	if code != ExitError || !strings.Contains(out, `"state": "queued"`) || !strings.Contains(errOut, "still queued after 1s") {
		t.Errorf("run --sync --wait 1s without workers: exit %d\n%s\n%s", code, out, errOut)
	}
	if out := e.ok(tok, "endpoints", "status", "echo", j.ID); !strings.Contains(out, "queued") {
		t.Errorf("status:\n%s", out)
	}
	if d := e.ok(tok, "endpoints", "describe", "echo"); !strings.Contains(d, "4 queued, 0 running") {
		t.Errorf("describe's queue:\n%s", d)
	}

	// Cancel, twice; a completed job is not cancelled.
	for range 2 {
		var c cloud.Job
		decodeJSON(t, e.ok(tok, "endpoints", "cancel", "echo", j.ID, "-o", "json"), &c)
		if c.State != cloud.JobCancelled || c.ID != j.ID {
			t.Errorf("cancel = %+v", c)
		}
	}
	code, _, errOut = e.as(tok, "endpoints", "cancel", "echo", done.ID)
	if code != ExitError || !strings.Contains(errOut, "completed") || !strings.Contains(errOut, "conflict") {
		t.Errorf("cancel of a completed job: %d %q", code, errOut)
	}

	// Each mode's verbs are refused on the other; without a gateway, the
	// HTTP mode is unavailable.
	e.ok(tok, "endpoints", "create", "chat", "--mode", "http", "--image", "ghcr.io/acme/llm:1", "--offering", "l4.1x")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"endpoints", "call", "echo", "/"}, "queue mode"},
		{[]string{"endpoints", "run", "chat", "--input", "1"}, "http mode"},
		{[]string{"endpoints", "call", "chat", "/v1/models"}, "no endpoint gateway (unavailable)"},
	} {
		code, _, errOut := e.as(tok, c.args...)
		if code != ExitError || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, %q; want %q", c.args, code, errOut, c.want)
		}
	}
}

// TestEndpointsFlagErrors: bad command lines are usage errors (exit 2)
// before any call, refusals of the server exit 1, and neither changes an
// endpoint.
func TestEndpointsFlagErrors(t *testing.T) {
	e := newCloudEnv(t)
	_, tok := e.member("acme", "alice")
	e.ok(tok, "endpoints", "create", "echo", "--image", "ghcr.io/acme/echo:1", "--offering", "l4.1x")
	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte("{nope"), 0o600); err != nil {
		t.Fatal(err)
	}
	create := []string{"endpoints", "create", "x", "--image", "ghcr.io/acme/x:1", "--offering", "l4.1x"}
	before, rows := e.ok(tok, "endpoints", "list", "-o", "json"), e.Rows()
	for _, c := range []struct {
		code int
		args []string
		want string
	}{
		{ExitUsage, append(create, "--idle-timeout", "1.5s"), "--idle-timeout 1.5s: want whole seconds"},
		{ExitUsage, append(create, "--timeout", "500ms"), "--timeout 500ms: want a duration of at least 1s"},
		{ExitUsage, append(create, "--retention", "0s"), "--retention 0s"},
		{ExitUsage, append(create, "--queue-wait", "-5s"), "--queue-wait -5s"},
		{ExitUsage, append(create, "--idle-timeout", "soon"), "invalid argument"},
		{ExitUsage, append(create, "--mode", "batch"), `--mode "batch": want queue`},
		{ExitUsage, append(create, "--env", "A"), "KEY=VALUE"},
		{ExitUsage, append(create, "extra"), `unexpected argument "extra"`},
		{ExitUsage, []string{"endpoints", "create", "x", "--offering", "l4.1x"}, "--image is required"},
		{ExitUsage, []string{"endpoints", "create", "x", "--image", "ghcr.io/acme/x:1"}, "--offering is required"},
		{ExitUsage, []string{"endpoints", "create", "--image", "ghcr.io/acme/x:1", "--offering", "l4.1x"}, "NAME"},
		{ExitUsage, []string{"endpoints", "update", "echo"}, "nothing to change"},
		{ExitUsage, []string{"endpoints", "update", "echo", "--timeout", "2.5s"}, "whole seconds"},
		{ExitUsage, []string{"endpoints", "update", "echo", "--mode", "http"}, "unknown flag: --mode"},
		{ExitUsage, []string{"endpoints", "update", "echo", "--max", "2", "--if-match", "x"}, "--if-match"},
		{ExitUsage, []string{"endpoints", "delete", "echo", "--timeout", "1m"}, "--timeout only applies with --wait"},
		{ExitUsage, []string{"endpoints", "run", "echo", "--wait", "10s"}, "--wait only applies with --sync"},
		{ExitUsage, []string{"endpoints", "run", "echo", "--sync", "--wait", "1.5s"}, "whole seconds"},
		{ExitUsage, []string{"endpoints", "run", "echo", "--input", "{nope"}, "not JSON"},
		{ExitUsage, []string{"endpoints", "run", "echo", "--input-file", bad}, "not JSON"},
		{ExitUsage, []string{"endpoints", "run", "echo", "--input", "1", "--input-file", bad}, "do not mix"},
		{ExitUsage, []string{"endpoints", "status", "echo"}, "an endpoint ID or name and a job ID"},
		{ExitUsage, []string{"endpoints", "call"}, "PATH"},
		{ExitUsage, []string{"endpoints", "call", "echo", "/", "-X", "TRACE"}, "-X TRACE"},
		{ExitUsage, []string{"endpoints", "call", "echo", "/", "-H", "no colon"}, "KEY: VALUE"},
		{ExitError, []string{"endpoints", "create", "x", "--image", "ghcr.io/acme/x:1", "--offering", "h900.1x"}, "offerings[0]"},
		{ExitError, append(create, "--min", "4", "--max", "2"), "min 4 and max 2"},
		{ExitError, append(create, "--retries", "11"), "retries"},
		{ExitError, []string{"endpoints", "create", "echo", "--image", "ghcr.io/acme/x:1", "--offering", "l4.1x"}, "conflict"},
		{ExitError, []string{"endpoints", "update", "echo", "--max", "0"}, "max"},
		{ExitError, []string{"endpoints", "describe", "nope"}, `no endpoint named "nope"`},
		{ExitError, []string{"endpoints", "describe", "ep-0000000000000000"}, "not_found"},
		{ExitError, []string{"endpoints", "status", "echo", "job-0000000000000000"}, "not_found"},
	} {
		code, _, errOut := e.as(tok, c.args...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, %q; want exit %d naming %q", c.args, code, errOut, c.code, c.want)
		}
	}
	if after := e.ok(tok, "endpoints", "list", "-o", "json"); after != before {
		t.Errorf("refused commands changed the endpoints:\n%s\n%s", before, after)
	}
	if after := e.Rows(); after != rows {
		t.Errorf("refused commands wrote something: %+v -> %+v", rows, after)
	}
}

// TestEndpointsCall: call sends the method, path, query, headers and body
// it is given through the HTTP mode's route and prints the worker's
// answer as it is; a 503 shows its Retry-After. The server is a stub of
// the route, standing in for a gateway with a worker.
func TestEndpointsCall(t *testing.T) {
	const id = "ep-0123456789abcdef"
	type request struct {
		method, path, query, contentType, custom, auth, body string
	}
	var (
		mu  sync.Mutex
		got request
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = request{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Get("Content-Type"), r.Header.Get("X-Custom"), r.Header.Get("Authorization"), string(b)}
		mu.Unlock()
		if strings.HasSuffix(r.URL.Path, "/busy") {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After", "5")
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `{"code":"unavailable","message":"endpoint echo had no worker free for 30s; retry in 5 s (it is scaling up)","details":{"retry_after_seconds":5}}`)
			return
		}
		io.WriteString(w, "answer of "+r.Method+"\n")
	}))
	defer srv.Close()
	t.Setenv("GPUCLOUD_CONFIG", filepath.Join(t.TempDir(), "config.yaml"))
	body := filepath.Join(t.TempDir(), "body.json")
	if err := os.WriteFile(body, []byte(`{"from": "file"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	prefix := "/v1/endpoints/" + id + "/http"
	for _, c := range []struct {
		name string
		args []string
		want request
	}{
		{"GET by default, with the query", []string{"/v1/models?limit=2"}, request{method: "GET", path: prefix + "/v1/models", query: "limit=2"}},
		{"the root by default", nil, request{method: "GET", path: prefix + "/"}},
		{"POST with -d, JSON", []string{"v1/completions", "-d", `{"prompt": "hi"}`},
			request{method: "POST", path: prefix + "/v1/completions", contentType: "application/json", body: `{"prompt": "hi"}`}},
		{"-X, text, a header", []string{"/items/3", "-X", "put", "-d", "plain", "-H", "X-Custom: 42"},
			request{method: "PUT", path: prefix + "/items/3", custom: "42", body: "plain"}},
		{"-d @file, a Content-Type of its own", []string{"/in", "-d", "@" + body, "-H", "Content-Type: text/plain"},
			request{method: "POST", path: prefix + "/in", contentType: "text/plain", body: `{"from": "file"}`}},
		{"DELETE", []string{"/items/3", "-X", "DELETE"}, request{method: "DELETE", path: prefix + "/items/3"}},
	} {
		code, out, errOut := run(t, append([]string{"--server", srv.URL, "--token", "gpc_test", "endpoints", "call", id}, c.args...)...)
		mu.Lock()
		g := got
		mu.Unlock()
		c.want.auth = "Bearer gpc_test"
		if code != 0 || out != "answer of "+c.want.method+"\n" || g != c.want {
			t.Errorf("%s: exit %d, stdout %q, stderr %q\nsent %+v\nwant %+v", c.name, code, out, errOut, g, c.want)
		}
	}
	code, out, errOut := run(t, "--server", srv.URL, "--token", "gpc_test", "endpoints", "call", id, "/busy", "-d", "{}")
	oneLine(t, code, errOut, "no worker free for 30s", "(unavailable)", "Retry-After: 5s")
	if out != "" {
		t.Errorf("a 503 printed %q", out)
	}
}
