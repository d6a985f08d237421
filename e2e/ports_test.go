package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/gpucloud/gpucloud/agent/gpu/sim"
	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/controlplane"
	"github.com/gpucloud/gpucloud/store/pgtest"
)

// TestPublishedPorts: HTTP to an instance's published port through the
// server (TLS 1.3) and the agent's relay, with the process runtime, on
// both stores.
func TestPublishedPorts(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { testPublishedPorts(t, "sqlite://"+filepath.Join(t.TempDir(), "gpucloud.db")) })
	t.Run("postgres", func(t *testing.T) { testPublishedPorts(t, pgtest.URL(t)) })
}

// workloadHTTP is the instance's web server: the process runtime's
// instances share the host's loopback, so a listener there is inside the
// instance, as in TestAccess's port-forward. It answers what it was sent
// as JSON, and echoes a WebSocket on /ws.
func workloadHTTP(t *testing.T) (int, *http.Server) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
		if err != nil {
			return
		}
		defer ws.CloseNow()
		ws.SetReadLimit(1 << 20)
		for {
			typ, b, err := ws.Read(r.Context())
			if err != nil {
				return
			}
			if err := ws.Write(r.Context(), typ, append([]byte("echo: "), b...)); err != nil {
				return
			}
		}
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		json.NewEncoder(w).Encode(map[string]any{"method": r.Method, "path": r.URL.RequestURI(),
			"header": r.Header, "body": string(body)})
	})
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().(*net.TCPAddr).Port, srv
}

// portsSessionLimit is the test server's --session-limit.
const portsSessionLimit = 6

type echoed struct {
	Method string      `json:"method"`
	Path   string      `json:"path"`
	Header http.Header `json:"header"`
	Body   string      `json:"body"`
}

func testPublishedPorts(t *testing.T, db string) {
	// Two GPUs: the keep-prefix subtest runs a second instance.
	spec := sim.Spec{ID: "sim-ports", Zone: "e2e-a", Rack: "rack-1", GPUs: sim.GPUSpec{Model: "L4", Count: 2}}
	// A small session limit, so that the proxy's refusal past it is seen.
	c := startClusterWith(t, db, func(cfg *controlplane.Config) { cfg.SessionLimit = portsSessionLimit }, spec)
	ctx := t.Context()
	_, alice, aliceTok := c.member("acme", "alice")
	_, _, malloryTok := c.member("globex", "mallory")
	port, workload := workloadHTTP(t)
	in, err := alice.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "l4.1x", Command: []string{"sleep", "600"},
		Publish: []int{port}}, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Publish) != 1 || in.Publish[0] != port {
		t.Fatalf("created with publish %v, want [%d]", in.Publish, port)
	}
	c.waitState(alice, in.ID, cloud.Running)
	base := alice.PortURL(in.ID, port)
	if want := c.srv.URL + "/v1/instances/" + in.ID + "/ports/" + strconv.Itoa(port) + "/"; base != want {
		t.Fatalf("PortURL %s, want %s", base, want)
	}
	send := func(method, url, token, cookie, body string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if cookie != "" {
			req.Header.Set("Cookie", cookie)
		}
		resp, err := c.hc.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, url, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}

	t.Run("proxied", func(t *testing.T) {
		cases := []struct {
			method, path, body string
			wantPath           string
		}{
			{"GET", "", "", "/"},
			{"GET", "tree/notebooks?x=1&y=2", "", "/tree/notebooks?x=1&y=2"},
			{"POST", "api/contents", `{"type":"notebook"}`, "/api/contents"},
			{"DELETE", "api/sessions/1", "", "/api/sessions/1"},
		}
		for _, tc := range cases {
			resp, body := send(tc.method, base+tc.path, aliceTok, "gpucloud_session="+aliceTok+"; _xsrf=abc", tc.body)
			if resp.StatusCode != http.StatusOK {
				t.Errorf("%s %s: %d %s", tc.method, tc.path, resp.StatusCode, body)
				continue
			}
			var e echoed
			if err := json.Unmarshal([]byte(body), &e); err != nil {
				t.Errorf("%s %s: %v in %s", tc.method, tc.path, err, body)
				continue
			}
			if e.Method != tc.method || e.Path != tc.wantPath || e.Body != tc.body {
				t.Errorf("%s %s: the workload saw %s %s %q", tc.method, tc.path, e.Method, e.Path, e.Body)
			}
			// The tenant's credentials never reach the workload; its own
			// cookies do.
			if a := e.Header.Get("Authorization"); a != "" {
				t.Errorf("%s %s: the workload got Authorization %q", tc.method, tc.path, a)
			}
			if ck := e.Header.Get("Cookie"); ck != "_xsrf=abc" {
				t.Errorf("%s %s: the workload got Cookie %q, want only _xsrf=abc", tc.method, tc.path, ck)
			}
			if strings.Contains(body, aliceTok) {
				t.Errorf("%s %s: the token reached the workload: %s", tc.method, tc.path, body)
			}
			prefix := "/v1/instances/" + in.ID + "/ports/" + strconv.Itoa(port)
			if p := e.Header.Get("X-Forwarded-Prefix"); p != prefix {
				t.Errorf("%s %s: X-Forwarded-Prefix %q, want %q", tc.method, tc.path, p, prefix)
			}
		}
	})

	t.Run("keep prefix", func(t *testing.T) {
		// A port published to keep its prefix (Jupyter with its base URL
		// set to it) gets the whole path.
		kin, err := alice.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "l4.1x", Command: []string{"sleep", "600"},
			Publish: []int{port}, PublishKeepPrefix: []int{port}}, "")
		if err != nil {
			t.Fatal(err)
		}
		if len(kin.PublishKeepPrefix) != 1 || kin.PublishKeepPrefix[0] != port {
			t.Fatalf("created with publish_keep_prefix %v", kin.PublishKeepPrefix)
		}
		c.waitState(alice, kin.ID, cloud.Running)
		prefix := "/v1/instances/" + kin.ID + "/ports/" + strconv.Itoa(port)
		resp, body := send("GET", alice.PortURL(kin.ID, port)+"tree/notebooks?x=1", aliceTok, "", "")
		var e echoed
		if resp.StatusCode != http.StatusOK || json.Unmarshal([]byte(body), &e) != nil || e.Path != prefix+"/tree/notebooks?x=1" {
			t.Errorf("keep prefix: %d, the workload saw %q (want %q)", resp.StatusCode, e.Path, prefix+"/tree/notebooks?x=1")
		}
		// A port that keeps its prefix must be published.
		_, err = alice.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "l4.1x", Command: []string{"sleep", "600"},
			Publish: []int{port}, PublishKeepPrefix: []int{port + 1}}, "")
		var ce *cloud.Error
		if !errors.As(err, &ce) || ce.Code != cloud.Invalid || ce.Details["field"] != "publish_keep_prefix[0]" {
			t.Errorf("keep prefix of an unpublished port: %v, want invalid_argument on publish_keep_prefix[0]", err)
		}
		if _, err := alice.TerminateInstance(ctx, kin.ID, 0); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("websocket", func(t *testing.T) {
		wsURL := "wss" + strings.TrimPrefix(base, "https") + "ws"
		ws, resp, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPClient: c.hc,
			HTTPHeader: http.Header{"Authorization": {"Bearer " + aliceTok}}})
		if err != nil {
			t.Fatalf("dial %s: %v (%v)", wsURL, err, resp)
		}
		defer ws.CloseNow()
		for _, msg := range []string{"hello", strings.Repeat("k", 100000)} {
			if err := ws.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
				t.Fatal(err)
			}
			ws.SetReadLimit(1 << 20)
			_, got, err := ws.Read(ctx)
			if err != nil || string(got) != "echo: "+msg {
				t.Fatalf("echo of %d bytes: %d bytes back, %v", len(msg), len(got), err)
			}
		}
		ws.Close(websocket.StatusNormalClosure, "")
	})

	t.Run("refusals", func(t *testing.T) {
		other := strconv.Itoa(port + 1)
		if port == 65535 {
			other = "1"
		}
		cases := []struct {
			name, url, token string
			status           int
			code             cloud.Code
			msg              string
		}{
			{"an unpublished port", c.srv.URL + "/v1/instances/" + in.ID + "/ports/" + other + "/", aliceTok, 404, cloud.NotFound,
				"does not publish port " + other + " (published: " + strconv.Itoa(port) + ")"},
			{"another tenant", base, malloryTok, 404, cloud.NotFound, "not found"},
			{"no token", base, "", 401, cloud.Unauthenticated, ""},
			{"not a port", c.srv.URL + "/v1/instances/" + in.ID + "/ports/http/", aliceTok, 400, cloud.Invalid, "port"},
		}
		for _, tc := range cases {
			resp, body := send("GET", tc.url, tc.token, "", "")
			var e cloud.Error
			json.Unmarshal([]byte(body), &e)
			if resp.StatusCode != tc.status || e.Code != tc.code || !strings.Contains(e.Message, tc.msg) {
				t.Errorf("%s: %d %s; want %d %s with %q", tc.name, resp.StatusCode, body, tc.status, tc.code, tc.msg)
			}
		}
	})

	t.Run("sessions", func(t *testing.T) {
		// Each proxied TCP connection is a forward session: pooled ones
		// stay open while idle, the WebSocket's ended when it closed.
		want := "port " + strconv.Itoa(port) + " (http)"
		c.until("the proxied connections' session events", func() (bool, string) {
			page, err := alice.InstanceEvents(ctx, in.ID, client.EventsOptions{Limit: 1000})
			if err != nil {
				return false, err.Error()
			}
			started, ended := 0, 0
			for _, e := range page.Events {
				if !strings.Contains(e.Reason, want) {
					continue
				}
				switch e.Kind {
				case cloud.EventSessionStarted:
					started++
				case cloud.EventSessionEnded:
					ended++
				}
			}
			return started >= 2 && ended >= 1, fmt.Sprintf("%d started, %d ended", started, ended)
		})
	})

	t.Run("session limit", func(t *testing.T) {
		// Held WebSockets are connections, each a session: past the
		// limit, the proxy answers the sessions' quota_exceeded as JSON.
		wsURL := "wss" + strings.TrimPrefix(base, "https") + "ws"
		var refused *http.Response
		for i := 0; i <= portsSessionLimit && refused == nil; i++ {
			ws, resp, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPClient: c.hc,
				HTTPHeader: http.Header{"Authorization": {"Bearer " + aliceTok}}})
			if err != nil {
				if resp == nil {
					t.Fatalf("WebSocket %d: %v", i, err)
				}
				refused = resp
				break
			}
			defer ws.CloseNow()
		}
		if refused == nil {
			t.Fatalf("%d WebSockets held, none refused; the limit is %d", portsSessionLimit+1, portsSessionLimit)
		}
		// (A plain request may still pass here, over an idle pooled
		// connection: that is no new session.)
		b, _ := io.ReadAll(refused.Body)
		if refused.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(b), `"quota_exceeded"`) {
			t.Errorf("a WebSocket past the limit: %d %s", refused.StatusCode, b)
		}
	})

	t.Run("stopped instance", func(t *testing.T) {
		if _, err := alice.StopInstance(ctx, in.ID, 0); err != nil {
			t.Fatal(err)
		}
		c.waitState(alice, in.ID, cloud.Stopped)
		deadline := time.Now().Add(5 * time.Second)
		for {
			resp, body := send("GET", base, aliceTok, "", "")
			if resp.StatusCode == http.StatusConflict && strings.Contains(body, "is stopped; a forward session needs a running instance") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("a stopped instance's port: %d %s", resp.StatusCode, body)
			}
			time.Sleep(100 * time.Millisecond)
		}
		// The workload's end closes its connections (this one lives in
		// the test, not in the instance, so it is closed here), and so
		// every proxied session ends, pooled ones included (and nothing
		// still writes when the test's database goes).
		workload.Close()
		c.until("every proxied session ended", func() (bool, string) {
			page, err := alice.InstanceEvents(ctx, in.ID, client.EventsOptions{Limit: 1000})
			if err != nil {
				return false, err.Error()
			}
			open := 0
			for _, e := range page.Events {
				switch e.Kind {
				case cloud.EventSessionStarted:
					open++
				case cloud.EventSessionEnded:
					open--
				}
			}
			return open == 0, fmt.Sprintf("%d sessions open", open)
		})
	})
}
