package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

// agentFuzzRoutes lists the agent protocol's routes that take a body, as
// the server decodes them (the logs route's is raw text: newReq nil).
// {join} in a body becomes the fixture's join token, {id} the instance
// scheduled on the fixture's host.
var agentFuzzRoutes = []bodyRoute{
	{method: "POST", path: "/v1/agent/join", newReq: newOf[agentapi.JoinRequest](),
		seeds: []string{
			fuzzJoinBody("h-new", 2),
			fuzzJoinBody(fuzzHost, 2),
			fuzzJoinBody("", 0),
			`{"join_token":"{join}","inventory":{"host":{"id":"h-mig","zone":"zone-a","rack":"r1","cpu_milli":64000,"memory_mib":262144,` +
				`"gpus":[{"index":0,"uuid":"GPU-m0","model":"H100","memory_mib":81920,"island":-1,"mig":true,` +
				`"instances":[{"profile_id":9,"start":0},{"profile_id":9,"start":4}]}]},"driver":"550.54.15","cuda":"12.4"}}`,
			`{"join_token":"{join}","inventory":{"host":{"gpus":[{"index":0,"uuid":"","model":"H100"}]}}}`,
			`{"join_token":"{join}","inventory":{"host":{"gpus":[{"index":0,"uuid":"GPU-1","model":"nope"}]}}}`,
			`{"join_token":"{join}"}`,
			`{"join_token":"gpc_nope_nope","inventory":{"host":{}}}`,
			`{"inventory":{"host":{}}}`,
		}},
	{method: "POST", path: "/v1/agent/heartbeat", optional: true, newReq: newOf[agentapi.HeartbeatRequest](),
		seeds: []string{``, `{}`, fuzzHeartbeatBody(2), fuzzHeartbeatBody(1),
			`{"inventory":{"host":{"id":"other"}}}`,
			`{"inventory":{"host":{"labels":{"driver":"550","bad key":"x"}}}}`,
			`{"inventory":{"host":{"gpus":[{"index":0,"uuid":"GPU-a","model":"H100","island":-2}]}}}`}},
	{method: "POST", path: "/v1/agent/instances/{id}/status", newReq: newOf[agentapi.StatusReport](),
		seeds: []string{`{"phase":"starting"}`, `{"phase":"running"}`, `{"phase":"exited","exit_code":0}`, `{"phase":"exited","exit_code":137,"message":"killed"}`,
			`{"phase":"exited"}`, `{"phase":"failed","message":"nvidia-smi mig: Insufficient Resources\nstack:\n\tmain.go:12"}`,
			`{"phase":"stopped"}`, `{"phase":"paused"}`, `{"phase":""}`, "{\"phase\":\"failed\",\"message\":\"\\u0000\\u001b[31m\\ud800\"}"}},
	{method: "POST", path: "/v1/agent/instances/{id}/logs",
		seeds: []string{"hello\n", "", "\xff\xfe partial utf-8 \xe2\x82", strings.Repeat("x", 4096)}},
	{method: "POST", path: "/v1/agent/instances/{id}/scale-in-lock", newReq: newOf[agentapi.LockRequest](),
		seeds: []string{`{"locked":true,"reason":"saving step 1200"}`, `{"locked":false}`, `{"locked":true}`,
			`{"locked":true,"reason":"bell\u0007"}`, `{"locked":false,"reason":"ignored \u0007"}`}},
	{method: "POST", path: "/v1/agent/metrics", newReq: newOf[agentapi.MetricsReport](),
		seeds: []string{
			`{"samples":[{"instance_id":"{id}","at":"2025-03-01T11:59:30Z","gpu_utilization":0.5,"cpu_utilization":0.25,"gpu_memory_used_bytes":1073741824}]}`,
			`{"samples":[{"instance_id":"{id}","at":"2025-03-01T11:59:30Z","gpu_utilization":0.5}],"sent_at":"2025-03-01T11:00:00Z"}`,
			`{"samples":[{"instance_id":"{id}","at":"2030-01-01T00:00:00Z","cpu_utilization":1}]}`,
			`{"samples":[{"instance_id":"{id}","at":"2025-03-01T11:59:30Z","gpu_utilization":1.5}]}`,
			`{"samples":[{"instance_id":"{id}","at":"2025-03-01T11:59:30Z"}]}`,
			`{"samples":[{"instance_id":"i-other","at":"2025-03-01T11:59:30Z","gpu_utilization":0.1}]}`,
			`{"samples":[]}`,
			// Times that once made the metrics unreadable: stored before
			// year 1 (UTC), which the store cannot read back.
			`{"samples":[{"instance_id":"{id}","at":"0000-01-01T00:00:00+01:00","gpu_utilization":0.5}]}`,
			`{"samples":[{"instance_id":"{id}","at":"0001-01-01T00:00:01Z","gpu_utilization":0.5}],"sent_at":"9999-12-31T23:59:59Z"}`,
			`{"samples":[{"instance_id":"{id}","at":"9999-12-31T23:59:59Z","gpu_utilization":0.5}],"sent_at":"0001-01-01T00:00:01Z"}`,
			`{"samples":[{"instance_id":"{id}","at":"2025-03-01T09:00:00Z","cpu_utilization":0.5}]}`,
		}},
	{method: "POST", path: "/v1/agent/gone", newReq: newOf[agentapi.GoneRequest](),
		seeds: []string{`{}`, `{"volumes":["v-1","v-1",""],"instances":["{id}","i-none"]}`, `{"volumes":null}`, `{"instances":[1]}`}},
	{method: "POST", path: "/v1/agent/direct-sessions", newReq: newOf[agentapi.DirectReportsRequest](),
		seeds: []string{`{}`, `{"reports":[{"grant":"x.y","connections":1,"bytes_in":1,"bytes_out":2,"first":"2025-03-01T11:59:30Z","last":"2025-03-01T11:59:31Z"}]}`,
			`{"reports":[{"grant":"","connections":-1,"bytes_in":-5}]}`, `{"reports":null}`, `{"reports":[1]}`}},
}

func fuzzJoinBody(id string, gpus int) string {
	inv := fuzzInventory(id)
	if gpus == 0 {
		inv.Host.GPUs = nil
	}
	b, _ := json.Marshal(agentapi.JoinRequest{JoinToken: "{join}", Inventory: inv})
	return string(b)
}

func fuzzHeartbeatBody(gpus int) string {
	inv := fuzzInventory(fuzzHost)
	inv.Host.GPUs = inv.Host.GPUs[:gpus]
	b, _ := json.Marshal(agentapi.HeartbeatRequest{Inventory: inv})
	return string(b)
}

// FuzzAgentProtocol sends a body to one of the agent protocol's routes
// (agentFuzzRoutes), with the fixture host's credential, over the real
// handler and store (service.Agents behind it). Besides checkAnswer's
// properties (no internal error, typed errors, no change when refused)
// and the decoder's (a body it refuses is invalid_argument), what is
// accepted is what the protocol allows:
//   - join and heartbeat: the host as stored is one the scheduler can
//     build its fleet from (fleet.AddHost with the catalog), and the
//     credential a join answers opens the agent routes;
//   - status: a known phase (exited with its code), and the instance's
//     reason afterwards is clean text of bounded length;
//   - logs: the store's log grows by exactly the chunk, which reads back;
//   - scale-in lock: the lock as stored is the request's, with printable
//     reason;
//   - metrics: valid samples only, one point per value, none stored in
//     the future beyond service.MaxMetricSkew nor older than
//     service.MetricMaxAge, and the store reads them all back.
func FuzzAgentProtocol(f *testing.F) {
	for i, rt := range agentFuzzRoutes {
		for _, s := range rt.seeds {
			ct := "application/json"
			if rt.newReq == nil {
				ct = "text/plain; charset=utf-8"
			}
			f.Add(uint8(i), ct, []byte(s))
		}
	}
	f.Add(uint8(3), "application/octet-stream", []byte("\x00\x01"))
	f.Add(uint8(3), "application/json", []byte(`{}`))
	f.Add(uint8(2), "text/plain", []byte(`{"phase":"running"}`))
	var pool fuzzServers
	f.Cleanup(pool.close)
	f.Fuzz(func(t *testing.T, route uint8, ctype string, body []byte) {
		rt := agentFuzzRoutes[int(route)%len(agentFuzzRoutes)]
		s := pool.get(t)
		body = []byte(strings.ReplaceAll(s.fill(rt.path, string(body)), "{join}", s.join))
		path := s.fill(rt.path, rt.path)
		what := fmt.Sprintf("%s %s %q (Content-Type %q)", rt.method, path, body, ctype)
		token := s.agent
		if rt.path == "/v1/agent/join" {
			token = ""
		}

		ctx := context.Background()
		before := s.count(t)
		beforeIn := s.getInstance(t, s.placed)
		code, _, answer := s.do(rt.method, path, token, ctype, body)
		refused := s.checkAnswer(t, what, code, answer, before)
		if code == http.StatusTooManyRequests {
			return // limited before its handler, which never read the body
		}

		if rt.newReq == nil { // logs
			if refused {
				return
			}
			after := testkit.CountRows(t, s.st)
			if after.LogBytes != before.LogBytes+int64(len(body)) {
				t.Fatalf("%s: accepted, but the logs grew by %d bytes", what, after.LogBytes-before.LogBytes)
			}
			if len(body) > 0 {
				var c *cloud.LogChunk
				err := s.st.Tx(ctx, func(tx cloud.Tx) (err error) {
					c, err = tx.ReadLog(ctx, s.placed, after.LogBytes-int64(len(body)), len(body))
					return err
				})
				if err != nil || string(c.Data) != string(body) {
					t.Fatalf("%s: accepted, but the log reads back %+v, %v", what, c, err)
				}
			}
			return
		}

		req := rt.newReq()
		if err := decodeFuzzBody(rt, ctype, body, req); err != nil {
			if !refused || fuzzErrorBody(t, answer).Code != cloud.Invalid {
				t.Fatalf("%s: the decoder refuses it (%v) but the route answered %d %s", what, err, code, answer)
			}
			return
		}
		if refused {
			return
		}
		switch req := req.(type) {
		case *agentapi.JoinRequest:
			// A re-join of the fixture's host revoked its credential: the
			// next input gets a fresh fixture.
			s.changed = maxChanges
			var jr agentapi.JoinResponse
			if err := json.Unmarshal(answer, &jr); err != nil || jr.HostID == "" || jr.Credential == "" {
				t.Fatalf("%s: accepted with %s (%v)", what, answer, err)
			}
			if err := service.CheckName("host", jr.HostID, true); err != nil {
				t.Fatalf("%s: joined host %q: %v", what, jr.HostID, err)
			}
			s.checkHost(t, what, jr.HostID)
			if c, _, b := s.do("GET", "/v1/agent/assignments", jr.Credential, "", nil); c != 200 {
				t.Fatalf("%s: the credential it answered does not open the agent routes: %d %s", what, c, b)
			}
		case *agentapi.HeartbeatRequest:
			s.checkHost(t, what, fuzzHost)
		case *agentapi.StatusReport:
			switch req.Phase {
			case agentapi.PhaseStarting, agentapi.PhaseRunning, agentapi.PhaseStopped, agentapi.PhaseFailed:
			case agentapi.PhaseExited:
				if req.ExitCode == nil {
					t.Fatalf("%s: accepted an exit without its code", what)
				}
			default:
				t.Fatalf("%s: accepted phase %q", what, req.Phase)
			}
			in := s.getInstance(t, s.placed)
			if in.Reason != beforeIn.Reason {
				checkCleanText(t, what, "reason", in.Reason, 2048)
			}
			if !cloud.CanMove(beforeIn.State, in.State) && beforeIn.State != in.State && !canMoveTwice(beforeIn.State, in.State) {
				t.Fatalf("%s: moved the instance from %s to %s", what, beforeIn.State, in.State)
			}
		case *agentapi.LockRequest:
			in := s.getInstance(t, s.placed)
			var lock *cloud.ScaleLock
			if in.ScaleIn != nil {
				lock = in.ScaleIn.Lock
			}
			switch {
			case req.Locked && (lock == nil || lock.Reason != req.Reason):
				t.Fatalf("%s: accepted, but the instance's lock is %+v", what, lock)
			case !req.Locked && lock != nil:
				t.Fatalf("%s: released, but the instance's lock is %+v", what, lock)
			case lock != nil:
				if len(lock.Reason) > agentapi.MaxLockReason || !utf8.ValidString(lock.Reason) ||
					strings.IndexFunc(lock.Reason, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
					t.Fatalf("%s: stored the lock reason %q", what, lock.Reason)
				}
			}
		case *agentapi.MetricsReport:
			s.checkMetrics(t, what, req, before)
		}
	})
}

// canMoveTwice reports whether a report may have made two moves from one
// state to another (running from scheduled goes through starting; exited
// 0 from running goes through stopping).
func canMoveTwice(from, to cloud.State) bool {
	for _, via := range []cloud.State{cloud.Starting, cloud.Stopping} {
		if cloud.CanMove(from, via) && cloud.CanMove(via, to) {
			return true
		}
	}
	return false
}

func (s *fuzzServer) getInstance(t *testing.T, id string) *cloud.Instance {
	t.Helper()
	var in *cloud.Instance
	err := s.st.Tx(context.Background(), func(tx cloud.Tx) (err error) {
		in, err = tx.GetInstance(context.Background(), id)
		return err
	})
	if err != nil {
		t.Fatalf("get instance %s: %v", id, err)
	}
	return in
}

// checkHost checks that the stored host id is one the scheduler can build
// its fleet from.
func (s *fuzzServer) checkHost(t *testing.T, what, id string) {
	t.Helper()
	var h *cloud.Host
	err := s.st.Tx(context.Background(), func(tx cloud.Tx) (err error) {
		h, err = tx.GetHost(context.Background(), id)
		return err
	})
	if err != nil {
		t.Fatalf("%s: accepted, but host %s reads %v", what, id, err)
	}
	spec := h.Spec
	if spec.ID != id || spec.State != h.State {
		t.Fatalf("%s: host %s stored with spec id %q and state %q (host state %q)", what, id, spec.ID, spec.State, h.State)
	}
	if err := fleet.New().AddHost(&spec, s.cat); err != nil {
		t.Fatalf("%s: accepted a host the scheduler cannot use: %v\n%+v", what, err, spec)
	}
}

// checkMetrics checks an accepted metrics report: valid samples, and one
// stored point for each value, none in the future.
func (s *fuzzServer) checkMetrics(t *testing.T, what string, rep *agentapi.MetricsReport, before testkit.Rows) {
	t.Helper()
	if len(rep.Samples) > agentapi.MaxMetricSamples {
		t.Fatalf("%s: accepted %d samples", what, len(rep.Samples))
	}
	values := 0
	for i, smp := range rep.Samples {
		n := 0
		for _, v := range []*float64{smp.GPUUtilization, smp.CPUUtilization} {
			if v != nil {
				n++
				if !(*v >= 0 && *v <= 1) {
					t.Fatalf("%s: accepted utilization %v in sample %d", what, *v, i)
				}
			}
		}
		if smp.GPUMemoryUsedBytes != nil {
			n++
		}
		if smp.InstanceID == "" || smp.At.IsZero() || n == 0 {
			t.Fatalf("%s: accepted sample %d without an instance, a time or a value", what, i)
		}
		values += n
	}
	after := testkit.CountRows(t, s.st)
	if after.Metrics != before.Metrics+values {
		t.Fatalf("%s: accepted %d values, but the store has %d more points", what, values, after.Metrics-before.Metrics)
	}
	var ps []cloud.MetricPoint
	err := s.st.Tx(context.Background(), func(tx cloud.Tx) (err error) {
		ps, err = tx.ListMetrics(context.Background(), cloud.MetricFilter{})
		return err
	})
	if err != nil {
		t.Fatalf("%s: accepted, but the metrics read %v", what, err)
	}
	latest, earliest := s.clock.Now().Add(service.MaxMetricSkew), s.clock.Now().Add(-service.MetricMaxAge)
	for _, p := range ps {
		if p.At.After(latest) || p.At.Before(earliest) || math.IsNaN(p.Value) || math.IsInf(p.Value, 0) {
			t.Fatalf("%s: stored point %+v (now %s)", what, p, s.clock.Now())
		}
	}
}

// checkCleanText fails unless s is valid UTF-8 without control characters,
// at most max bytes long.
func checkCleanText(t *testing.T, what, field, s string, max int) {
	t.Helper()
	if len(s) > max || !utf8.ValidString(s) || strings.IndexFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0 {
		t.Fatalf("%s: stored %s %q", what, field, s)
	}
}
