package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agent/gpu/sim"
	"github.com/gpucloud/gpucloud/agent/runtime/containerd"
	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/controlplane"
	"github.com/gpucloud/gpucloud/relay"
	"github.com/gpucloud/gpucloud/store/pgtest"
)

// Several server replicas on one PostgreSQL database, in one process
// (docs/CONTROL_PLANE.md, "Several replicas"): the cluster's server is
// replica A, which the agents join and hold their control channels to;
// replica B is a second server on the same database, which the tests'
// clients call.

const (
	replicaBeat = 300 * time.Millisecond
	replicaTTL  = 2 * time.Second
)

func tuneReplica(name string) func(*controlplane.Config) {
	return func(cfg *controlplane.Config) {
		cfg.Replica, cfg.ReplicaHeartbeat, cfg.ReplicaTTL = name, replicaBeat, replicaTTL
	}
}

// startReplica starts another replica on c's database.
func startReplica(t *testing.T, db, name string) *controlplane.Replica {
	t.Helper()
	cfg := controlplane.Config{DB: db, Listen: "127.0.0.1:0", ScheduleInterval: scheduleInterval, Log: logger()}
	tuneReplica(name)(&cfg)
	srv, err := controlplane.Start(t.Context(), cfg)
	if err != nil {
		t.Fatalf("start replica %s: %v", name, err)
	}
	t.Cleanup(func() {
		shut, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Close(shut); err != nil {
			t.Errorf("close replica %s: %v", name, err)
		}
	})
	return srv
}

// clientOn is a client of token on replica srv.
func clientOn(t *testing.T, srv *controlplane.Replica, token string) *client.Client {
	hc := srv.HTTPClient()
	t.Cleanup(hc.CloseIdleConnections)
	return client.New(srv.URL, token, hc)
}

// TestCrossReplicaAccess: an agent holds its control channel to replica
// A; exec and port forwards through replica B reach its instance (B
// forwards them to A over mutual TLS); another tenant gets not_found
// through either replica; a replica that dies is forgotten once its
// record is older than the TTL.
func TestCrossReplicaAccess(t *testing.T) {
	db := pgtest.URL(t)
	spec := sim.Spec{ID: "sim-xreplica", Zone: "e2e-a", Rack: "rack-1", GPUs: sim.GPUSpec{Model: "L4", Count: 1}}
	c := startClusterWith(t, db, tuneReplica("replica-a"), spec)
	b := startReplica(t, db, "replica-b")
	ctx := t.Context()
	_, aliceA, aliceToken := c.member("acme", "alice")
	_, malloryA, malloryToken := c.member("globex", "mallory")
	aliceB, malloryB := clientOn(t, b, aliceToken), clientOn(t, b, malloryToken)

	in, err := aliceA.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "l4.1x", Command: []string{"sleep", "600"},
		Env: map[string]string{"GREETING": "hi across replicas"}}, "")
	if err != nil {
		t.Fatal(err)
	}
	c.waitState(aliceA, in.ID, cloud.Running)
	c.until("each replica to see the other", func() (bool, string) {
		a, bb := c.srv.LiveReplicas(), b.LiveReplicas()
		return slices.Contains(a, "replica-b") && slices.Contains(bb, "replica-a"), fmt.Sprintf("A sees %v, B sees %v", a, bb)
	})

	t.Run("exec through B", func(t *testing.T) {
		var st any
		var out, errOut string
		c.until("an exec through B", func() (bool, string) {
			s, o, e, err := execOut(t, aliceB, in.ID, client.ExecOptions{Command: []string{"sh", "-c", `echo "$GREETING"; echo oops >&2; exit 7`}})
			st, out, errOut = s, o, e
			return err == nil && s != nil && s.ExitCode == 7, fmt.Sprintf("%+v %q %v", s, o, err)
		})
		if out != "hi across replicas\n" || errOut != "oops\n" {
			t.Errorf("through B: %+v out %q err %q", st, out, errOut)
		}
		s, out, _, err := execOut(t, aliceB, in.ID, client.ExecOptions{Command: []string{"cat"}, Stdin: strings.NewReader(strings.Repeat("y", 300_000))})
		if err != nil || s.ExitCode != 0 || out != strings.Repeat("y", 300_000) {
			t.Errorf("stdin through B: %+v, %d bytes, %v", s, len(out), err)
		}
	})

	t.Run("port-forward through B", func(t *testing.T) {
		// The process runtime's instances share the host's loopback.
		conn, err := aliceB.PortForward(ctx, in.ID, loopbackEcho(t))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		msg := strings.Repeat("ping ", 20_000)
		go conn.Write([]byte(msg))
		got := make([]byte, len(msg))
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(conn, got); err != nil || string(got) != msg {
			t.Fatalf("forward through B: %v", err)
		}
	})

	t.Run("another tenant through either replica", func(t *testing.T) {
		for name, cl := range map[string]*client.Client{"A": malloryA, "B": malloryB} {
			_, _, _, err := execOut(t, cl, in.ID, client.ExecOptions{Command: []string{"id"}})
			wantCode(t, "mallory's exec through "+name, err, cloud.NotFound)
			_, err = cl.PortForward(ctx, in.ID, 22)
			wantCode(t, "mallory's port-forward through "+name, err, cloud.NotFound)
		}
	})

	t.Run("the peer route refuses all but replicas", func(t *testing.T) {
		for _, srv := range []*controlplane.Replica{c.srv, b} {
			for name, hc := range map[string]*http.Client{"a tenant's token": srv.HTTPClient(), "an agent's certificate": c.hosts[spec.ID].hc} {
				req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+relay.PeerPath, nil)
				req.Header.Set("Authorization", "Bearer "+aliceToken)
				req.Header.Set("Connection", "Upgrade")
				req.Header.Set("Upgrade", "websocket")
				req.Header.Set("Sec-WebSocket-Version", "13")
				req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
				resp, err := hc.Do(req)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusForbidden {
					t.Errorf("%s on %s: %d, want 403", name, srv.URL, resp.StatusCode)
				}
			}
		}
	})

	t.Run("a dead replica is forgotten after its TTL", func(t *testing.T) {
		d := startReplica(t, db, "replica-d")
		c.until("A to see D", func() (bool, string) {
			return slices.Contains(c.srv.LiveReplicas(), "replica-d"), fmt.Sprint(c.srv.LiveReplicas())
		})
		shut, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := d.Close(shut); err != nil {
			t.Fatal(err)
		}
		gone := time.Now()
		c.until("A to forget D", func() (bool, string) {
			return !slices.Contains(c.srv.LiveReplicas(), "replica-d"), fmt.Sprint(c.srv.LiveReplicas())
		})
		if took := time.Since(gone); took < replicaTTL-replicaBeat {
			t.Errorf("D forgotten %s after it stopped, before its TTL of %s", took, replicaTTL)
		}
		// B still reaches the instance.
		if s, out, _, err := execOut(t, aliceB, in.ID, client.ExecOptions{Command: []string{"echo", "still"}}); err != nil || s.ExitCode != 0 || out != "still\n" {
			t.Errorf("after D: %+v %q %v", s, out, err)
		}
	})
}

// TestCrossReplicaEndpoint: an HTTP-mode endpoint's requests through
// replica B reach a worker whose host's agent holds replica A (B's
// gateway probes and proxies through A); B's waiting request, published
// in its registry record, is what makes the leader (A) start the worker
// from zero; another tenant gets not_found through either replica.
func TestCrossReplicaEndpoint(t *testing.T) {
	ch := startContainerHost(t)
	ch.importImageWith(t, echoImage, containerd.ImageConfig{Cmd: []string{"/usr/local/bin/echoworker"}},
		containerd.File{Path: "/usr/local/bin/echoworker", Mode: 0o755, Data: buildStatic(t, "echoworker")})
	db := pgtest.URL(t)
	spec := sim.Spec{ID: "sim-xreplica-ep", Zone: "zone-a", GPUs: sim.GPUSpec{Model: "L4", Count: 2}}
	c := startClusterOn(t, db, tuneReplica("replica-a"), nil, ch.runtimeOf, spec)
	b := startReplica(t, db, "replica-b")
	ctx := t.Context()
	_, aliceA, aliceToken := c.member("acme", "alice")
	_, bobA, bobToken := c.member("globex", "bob")
	aliceB, bobB := clientOn(t, b, aliceToken), clientOn(t, b, bobToken)
	c.until("B to see A", func() (bool, string) {
		return slices.Contains(b.LiveReplicas(), "replica-a"), fmt.Sprint(b.LiveReplicas())
	})

	web, err := aliceA.CreateEndpoint(ctx, api.CreateEndpointRequest{Name: "web", EndpointSpec: cloud.EndpointSpec{
		Image: echoImage, Offerings: []string{"l4.1x"}, Mode: cloud.EndpointHTTP,
		Max: 1, IdleTimeoutSeconds: 30, QueueWaitSeconds: 90}}, "")
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	resp, err := aliceB.EndpointRequest(ctx, "web", "POST", "/v1/generate?x=1", strings.NewReader(`{"prompt":"hello"}`),
		http.Header{"Content-Type": {"application/json"}})
	if err != nil {
		t.Fatalf("HTTP request through B from zero: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	t.Logf("HTTP cold start from zero through B, request to answer: %v", time.Since(began).Round(time.Millisecond))
	var echoed struct {
		Method, Path, Query, Body string
		Header                    http.Header
	}
	if err := json.Unmarshal(body, &echoed); err != nil || echoed.Method != "POST" || echoed.Path != "/v1/generate" ||
		echoed.Query != "x=1" || echoed.Body != `{"prompt":"hello"}` || echoed.Header.Get("Authorization") != "" {
		t.Errorf("the worker saw %s (%v)", body, err)
	}
	// Warm, through both replicas.
	for i := range 6 {
		cl := map[bool]*client.Client{true: aliceA, false: aliceB}[i%2 == 0]
		resp, err := cl.EndpointRequest(ctx, web.ID, "GET", fmt.Sprintf("/n/%d", i), nil, nil)
		if err != nil {
			t.Fatalf("warm request %d: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), fmt.Sprintf(`/n/%d`, i)) {
			t.Errorf("warm request %d: %d %s", i, resp.StatusCode, body)
		}
	}
	for name, cl := range map[string]*client.Client{"A": bobA, "B": bobB} {
		if _, err := cl.EndpointRequest(ctx, "web", "GET", "/", nil, nil); cloud.ErrorCode(err) != cloud.NotFound {
			t.Errorf("bob calls web through %s: %v", name, err)
		}
		if _, err := cl.EndpointRequest(ctx, web.ID, "GET", "/", nil, nil); cloud.ErrorCode(err) != cloud.NotFound {
			t.Errorf("bob calls web by ID through %s: %v", name, err)
		}
	}
	if _, err := aliceA.DeleteEndpoint(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	c.until("the endpoint to be deleted", func() (bool, string) {
		e, err := aliceA.GetEndpoint(ctx, web.ID)
		return err == nil && e.State == cloud.EndpointDeleted, fmt.Sprintf("%+v %v", e, err)
	})
}
