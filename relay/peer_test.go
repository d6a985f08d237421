package relay

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/internal/pki"
	"github.com/gpucloud/gpucloud/internal/stream"
)

var (
	tlsMu    sync.Mutex
	tlsByURL = map[string]*http.Client{}
)

func tlsClients() map[string]*http.Client {
	tlsMu.Lock()
	defer tlsMu.Unlock()
	out := make(map[string]*http.Client, len(tlsByURL))
	for k, v := range tlsByURL {
		out[k] = v
	}
	return out
}

// tlsReplica serves h as testServer does, over TLS 1.3 with a server
// certificate of ca that verifies client certificates of ca when given,
// plus the peer route; it answers the wss base URL and the host:port.
func tlsReplica(t *testing.T, h *Hub, ca *pki.CA) (base, addr string) {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc(PeerPath, h.ServePeer)
	mux.Handle("/", proxyTo(t, h))
	cert, err := ca.ServerCert([]string{"127.0.0.1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(mux)
	srv.TLS = &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert},
		ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: ca.Pool()}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	base = "wss" + strings.TrimPrefix(srv.URL, "https")
	tlsMu.Lock()
	tlsByURL[base] = clientWith(ca, nil)
	tlsMu.Unlock()
	t.Cleanup(func() { tlsMu.Lock(); delete(tlsByURL, base); tlsMu.Unlock() })
	return base, strings.TrimPrefix(srv.URL, "https://")
}

// proxyTo serves a hub's control channels (/control?host=) and
// dial-backs (/session?host=&id=) as the API's agent routes do, and a
// client route (/client?host=&id=, id s-1 when absent) that opens a
// framed session and splices it: testServer's and the TLS servers' mux.
func proxyTo(t *testing.T, h *Hub) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/control", func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		h.ServeControl(r.Context(), r.URL.Query().Get("host"), ws)
	})
	mux.HandleFunc("/session", func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		done, ok := h.Accept(r.URL.Query().Get("host"), r.URL.Query().Get("id"), ws, nil)
		if !ok {
			ws.Close(websocket.StatusPolicyViolation, "no such session")
			return
		}
		<-done
	})
	mux.HandleFunc("/client", func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		id := r.URL.Query().Get("id")
		if id == "" {
			id = "s-1"
		}
		s, err := h.Open(r.Context(), r.URL.Query().Get("host"), agentapi.SessionRequest{ID: id, Kind: "exec"})
		if err != nil {
			ws.Close(websocket.StatusTryAgainLater, err.Error())
			return
		}
		defer s.Close(websocket.StatusNormalClosure, "")
		Splice(r.Context(), ws, nil, s, true)
	})
	return mux
}

func clientWith(ca *pki.CA, certs []tls.Certificate) *http.Client {
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS13,
		RootCAs: ca.Pool(), Certificates: certs}}}
}

func replicaClient(t *testing.T, ca *pki.CA, id string) *http.Client {
	t.Helper()
	cert, err := ca.ReplicaCert(id, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return clientWith(ca, []tls.Certificate{cert})
}

// echo runs one exec session through base's /client route to host and
// answers its output and exit code.
func echo(t *testing.T, base, host, id, input string) (string, int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, base+"/client?host="+host+"&id="+id, dialOptions(base))
	if err != nil {
		return "", 0, err
	}
	c := stream.NewConn(ws)
	out := c.Reader(stream.Stdout)
	go c.Run(ctx)
	w := c.Writer(ctx, stream.Stdin)
	w.Write([]byte(input))
	w.Close()
	b, err := io.ReadAll(out)
	<-c.Done()
	st, ok := c.Status()
	if !ok {
		return string(b), 0, errors.Join(err, errors.New("no status: "+c.Err().Error()))
	}
	return string(b), st.ExitCode, err
}

// TestPeerForwarding: replica B, which holds no control channel of h-1,
// opens its session through replica A, which does, over mutual TLS; the
// holder's refusals come back as they are; a missing route is
// unavailable; a forwarded session is never forwarded again (a loop of
// stale routes ends at the holder).
func TestPeerForwarding(t *testing.T) {
	ca, err := pki.NewCA("test cloud", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	a, b := NewHub(), NewHub()
	a.DialTimeout, b.DialTimeout = time.Second, time.Second
	baseA, addrA := tlsReplica(t, a, ca)
	baseB, addrB := tlsReplica(t, b, ca)
	a.SetPeers(&Peers{Self: "A", Client: replicaClient(t, ca, "A")})
	pb := &Peers{Self: "B", Client: replicaClient(t, ca, "B")}
	b.SetPeers(pb)
	fakeAgent(t, baseA, "h-1", "h-1")
	waitConnected(t, a, "h-1")
	if hs := a.Hosts(); len(hs) != 1 || hs[0].HostID != "h-1" || hs[0].Since.IsZero() {
		t.Fatalf("A's hosts: %+v", hs)
	}
	pb.SetRoutes(map[string]Peer{"h-1": {ID: "A", Address: addrA}, "h-2": {ID: "A", Address: addrA}})
	a.peers.SetRoutes(map[string]Peer{"h-2": {ID: "B", Address: addrB}})

	// Through B: the session reaches h-1's agent on A.
	for i, in := range []string{"hello", strings.Repeat("x", 200_000)} {
		got, code, err := echo(t, baseB, "h-1", "s-b"+string(rune('0'+i)), in)
		if err != nil || got != in || code != 7 {
			t.Fatalf("through B: %d bytes, exit %d, %v", len(got), code, err)
		}
	}
	// Directly on A still works.
	if got, code, err := echo(t, baseA, "h-1", "s-a", "direct"); err != nil || got != "direct" || code != 7 {
		t.Fatalf("on A: %q %d %v", got, code, err)
	}
	for _, c := range []struct {
		host, want string
	}{
		{"h-9", "not connected to any server replica"},
		// B routes h-2 to A, A routes it back to B: A answers from its
		// own channels only.
		{"h-2", "not connected to this server replica"},
	} {
		_, err := b.Open(context.Background(), c.host, agentapi.SessionRequest{ID: "s-" + c.host, Kind: "exec"})
		var ce *cloud.Error
		if !errors.As(err, &ce) || ce.Code != cloud.Unavailable || !strings.Contains(ce.Message, c.want) {
			t.Errorf("%s: %v, want unavailable %q", c.host, err, c.want)
		}
	}
	// A peer that cannot be reached.
	pb.SetRoutes(map[string]Peer{"h-1": {ID: "C", Address: "127.0.0.1:1"}})
	if _, err := b.Open(context.Background(), "h-1", agentapi.SessionRequest{ID: "s-c", Kind: "exec"}); cloud.ErrorCode(err) != cloud.Unavailable ||
		!strings.Contains(err.Error(), "replica C") {
		t.Errorf("unreachable peer: %v", err)
	}
}

// TestPeerRouteRefusesAllButReplicas: only a replica's certificate of the
// cloud's CA opens the peer route: no certificate (with or without a
// tenant's bearer token), an agent's certificate and a server's are
// refused with 403, and another cloud's replica certificate at the
// handshake or as anonymous.
func TestPeerRouteRefusesAllButReplicas(t *testing.T) {
	ca, _ := pki.NewCA("test cloud", time.Now())
	other, _ := pki.NewCA("other cloud", time.Now())
	a := NewHub()
	a.DialTimeout = time.Second
	baseA, addrA := tlsReplica(t, a, ca)
	fakeAgent(t, baseA, "h-1", "h-1")
	waitConnected(t, a, "h-1")

	key, csr, _ := pki.NewClientKey("x")
	agentPEM, _ := ca.SignClient(csr, "h-1", time.Now())
	keyPEM, _ := pki.EncodeKey(key)
	agentCert, _ := tls.X509KeyPair(agentPEM, keyPEM)
	foreign, _ := other.ReplicaCert("B", time.Now())
	for _, c := range []struct {
		name   string
		hc     *http.Client
		header http.Header
		want   int // 0: refused at the handshake or 403
	}{
		{"no certificate", clientWith(ca, nil), nil, http.StatusForbidden},
		{"tenant token", clientWith(ca, nil), http.Header{"Authorization": {"Bearer gpc_tenanttoken"}}, http.StatusForbidden},
		{"agent certificate", clientWith(ca, []tls.Certificate{agentCert}), nil, http.StatusForbidden},
		{"another cloud's replica", clientWith(ca, []tls.Certificate{foreign}), nil, 0},
		{"replica", replicaClient(t, ca, "B"), nil, http.StatusSwitchingProtocols},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			ws, resp, err := websocket.Dial(ctx, "wss://"+addrA+PeerPath, &websocket.DialOptions{HTTPClient: c.hc,
				HTTPHeader: c.header, Subprotocols: []string{PeerSubprotocol}})
			switch {
			case c.want == 0:
				// Go's client sends no certificate that the server's CA
				// list does not name: then it is anonymous, and 403.
				if resp != nil && resp.StatusCode != http.StatusForbidden {
					t.Fatalf("answered %d, want a refusal", resp.StatusCode)
				}
			case resp == nil:
				t.Fatalf("no answer: %v", err)
			case resp.StatusCode != c.want:
				t.Fatalf("answered %d (%v), want %d", resp.StatusCode, err, c.want)
			}
			if ws != nil {
				ws.CloseNow()
			}
		})
	}
}

// TestRoutes: the pure choice of the peer that holds each host.
func TestRoutes(t *testing.T) {
	t1 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	t2 := t1.Add(time.Second)
	r := func(id, addr string, hosts ...cloud.ReplicaHost) *cloud.Replica {
		return &cloud.Replica{ID: id, Address: addr, Hosts: hosts}
	}
	h := func(id string, at time.Time) cloud.ReplicaHost { return cloud.ReplicaHost{HostID: id, Since: at} }
	for _, c := range []struct {
		name string
		in   []*cloud.Replica
		want map[string]Peer
	}{
		{"none", nil, map[string]Peer{}},
		{"self left out", []*cloud.Replica{r("A", "a:1", h("h-1", t1)), r("S", "s:1", h("h-2", t1))},
			map[string]Peer{"h-1": {"A", "a:1"}}},
		{"newer channel wins", []*cloud.Replica{r("A", "a:1", h("h-1", t2)), r("B", "b:1", h("h-1", t1))},
			map[string]Peer{"h-1": {"A", "a:1"}}},
		{"newer channel wins, either order", []*cloud.Replica{r("A", "a:1", h("h-1", t1)), r("B", "b:1", h("h-1", t2))},
			map[string]Peer{"h-1": {"B", "b:1"}}},
		{"tie: greater ID", []*cloud.Replica{r("B", "b:1", h("h-1", t1)), r("A", "a:1", h("h-1", t1))},
			map[string]Peer{"h-1": {"B", "b:1"}}},
		{"self's newer claim still left out", []*cloud.Replica{r("A", "a:1", h("h-1", t1)), r("S", "s:1", h("h-1", t2))},
			map[string]Peer{"h-1": {"A", "a:1"}}},
		{"no address", []*cloud.Replica{r("A", "", h("h-1", t1))}, map[string]Peer{}},
	} {
		if got := Routes(c.in, "S"); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
