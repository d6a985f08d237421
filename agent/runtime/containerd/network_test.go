package containerd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agent/metadata"
	"github.com/gpucloud/gpucloud/agent/network"
	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/testkit"
)

// handlerSaying answers every request with word and the path.
func handlerSaying(word string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s", word, r.URL.Path)
	})
}

// TestMetadataEndpoint checks that the workload reaches its metadata
// endpoint at the link-local URL, served inside its own network
// namespace, and nothing of the host's network; and that a metadata URL
// on the host is refused.
func TestMetadataEndpoint(t *testing.T) {
	rt := newRuntime(t)
	id := newID(t)
	st, out := run(t, rt, runtime.Spec{InstanceID: id, Metadata: handlerSaying("meta"),
		Command: sh(`echo "$GPUCLOUD_METADATA_URL"; wget -q -O - "$GPUCLOUD_METADATA_URL/v1/instance"; echo; timeout 2 wget -q -O - http://127.0.0.1:1/ 2>&1 | head -1`)})
	if want := rt.MetadataURL() + "\nmeta /v1/instance\n"; st.ExitCode != 0 || !strings.HasPrefix(out, want) || rt.MetadataURL() != "http://169.254.169.254" {
		t.Fatalf("exit %d, output %q, want %q first", st.ExitCode, out, want)
	}
	err := rt.Start(t.Context(), runtime.Spec{InstanceID: newID(t), MetadataURL: "http://127.0.0.1:4242", Command: sh("true")})
	if !errors.Is(err, runtime.ErrInvalid) {
		t.Fatalf("a metadata URL on the host: %v, want ErrInvalid", err)
	}
}

// TestMetadataAfterRestart checks that a new runtime (an agent restart)
// serves the metadata of a container it adopted when the agent starts the
// instance again, at the same URL.
func TestMetadataAfterRestart(t *testing.T) {
	old := newRuntime(t)
	id := newID(t)
	spec := runtime.Spec{InstanceID: id, Grace: grace, Metadata: handlerSaying("one"),
		Command: sh(`i=0; while [ $i -lt 600 ]; do timeout 2 wget -q -O - "$GPUCLOUD_METADATA_URL/x"; echo; sleep 0.1; i=$((i+1)); done`)}
	if err := old.Start(t.Context(), spec); err != nil {
		t.Fatal(err)
	}
	waitLog(t, old, id, "one /x")
	// The old agent's process goes, and its metadata server with it.
	old.mu.Lock()
	for _, in := range old.insts {
		if in.meta != nil {
			in.meta.Close()
		}
	}
	old.insts = map[string]*inst{}
	old.mu.Unlock()
	_ = old.Close()
	rt := newRuntime(t)
	spec.Metadata = handlerSaying("two")
	if err := rt.Start(t.Context(), spec); err != nil {
		t.Fatal(err)
	}
	waitLog(t, rt, id, "two /x")
	if err := rt.Stop(t.Context(), id); err != nil {
		t.Fatal(err)
	}
}

// needNetwork skips or fails a test that needs the instance network's
// tools, as need does.
func needNetwork(t *testing.T) {
	t.Helper()
	need(t)
	for _, tool := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			if _, err := os.Stat("/usr/sbin/" + tool); err != nil {
				if os.Getenv("CI") != "" {
					t.Fatalf("the instance network tests must run in CI: %s is missing", tool)
				}
				t.Skipf("skipping the instance network tests: %s is missing (iproute2, nftables)", tool)
			}
		}
	}
}

// testNetwork is an instance network with names and a subnet of its own,
// destroyed when the test ends, and its configuration.
func testNetwork(t *testing.T) (*network.Network, network.Config) {
	t.Helper()
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	suffix := hex.EncodeToString(b)[:5]
	routes, err := exec.Command("ip", "-4", "route", "show", "table", "all").Output()
	if err != nil {
		t.Fatal(err)
	}
	var subnet netip.Prefix
	for i := range 50 { // this package's range, 10.190-239: see agent/network's freeSubnet
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(190 + (int(b[2])+i)%50), 0, 0}), 16)
		if !strings.Contains(string(routes), strings.TrimSuffix(p.Addr().String(), "0.0")) {
			subnet = p
			break
		}
	}
	cfg := network.Config{Subnet: subnet, Table: "gcrt" + suffix, IfPrefix: "r" + suffix}
	n, err := network.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := n.Destroy(ctx); err != nil {
			t.Error(err)
		}
	})
	return n, cfg
}

// TestInstanceNetwork runs two tenants' containers on the instance
// network, each with its metadata behind session tokens: a tenant's
// instances reach each other, not another tenant's, nor the host; each
// reads its own metadata only, with a token; nothing of an instance's
// network is left after it stops.
func TestInstanceNetwork(t *testing.T) {
	needNetwork(t)
	nw, _ := testNetwork(t)
	rt := newRuntime(t, func(c *Config) { c.Network = nw })
	md := metadata.New()
	defer md.Close()
	// A port of the host, on all its addresses.
	hostLn, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hostLn.Close()
	go func() {
		for {
			c, err := hostLn.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, "HTTP/1.0 200 OK\r\n\r\nthe host\n")
			c.Close()
		}
	}()
	hostPort := strconv.Itoa(hostLn.Addr().(*net.TCPAddr).Port)
	hostAddr := ""
	if ifs, err := net.Interfaces(); err == nil {
		for _, i := range ifs {
			as, _ := i.Addrs()
			for _, a := range as {
				if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() && !p.Addr().IsLoopback() && hostAddr == "" {
					hostAddr = p.Addr().String()
				}
			}
		}
	}

	ids := map[string]string{"a1": newID(t), "a2": newID(t), "b1": newID(t)}
	tenants := map[string]string{"a1": "ten-a", "a2": "ten-a", "b1": "ten-b"}
	for name, id := range ids {
		md.Set(id, metadata.Document{Offering: "cpu.small", Tags: map[string]string{"name": name}})
	}
	// a1 serves a file on port 8080.
	if err := rt.Start(t.Context(), runtime.Spec{InstanceID: ids["a1"], TenantID: tenants["a1"], Grace: grace,
		Metadata: md.Handler(ids["a1"]), Command: sh(`echo a1 > /work/who && exec httpd -f -p 8080 -h /work`)}); err != nil {
		t.Fatal(err)
	}
	a1, ok := nw.Instance(ids["a1"])
	if !ok {
		t.Fatal("a1 has no network")
	}
	a1URL := "http://" + net.JoinHostPort(a1.Addr.String(), "8080") + "/who"
	testkit.EventuallySays(t, 20*time.Second, "a1's server to answer the host", func() (bool, string) {
		resp, err := http.Get(a1URL)
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b) == "a1\n", string(b)
	})
	// A token of a1's, which b1 tries at its own endpoint.
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPut, metadata.TokenPath, nil)
	req.Header.Set(metadata.TokenTTLHeader, "600")
	md.Handler(ids["a1"]).ServeHTTP(rec, req)
	a1Token := rec.Body.String()

	script := `
URL="$GPUCLOUD_METADATA_URL"
echo "no token: $(timeout 2 wget -q -O - "$URL/v1/instance" 2>&1)"
TOKEN=$(printf 'PUT /v1/token HTTP/1.0\r\nX-Metadata-Token-TTL-Seconds: 60\r\n\r\n' | nc 169.254.169.254 80 | tail -n 1)
echo "doc: $(timeout 2 wget -q -O - --header "X-Metadata-Token: $TOKEN" "$URL/v1/instance")"
echo "a1's token: $(timeout 2 wget -q -O - --header "X-Metadata-Token: $A1TOKEN" "$URL/v1/instance" 2>&1)"
echo "a1: $(timeout 2 wget -q -O - "$A1URL" 2>/dev/null || echo unreachable)"
GW=$(ip route | awk '/^default/ {print $3}')
echo "gw=$GW"
echo "gateway: $(timeout 2 wget -q -O - "http://$GW:$HOSTPORT/" 2>/dev/null || echo unreachable)"
echo "host: $(timeout 2 wget -q -O - "http://$HOSTADDR:$HOSTPORT/" 2>/dev/null || echo unreachable)"
echo end`
	outs := map[string]string{}
	for _, name := range []string{"a2", "b1"} {
		if err := rt.Start(t.Context(), runtime.Spec{InstanceID: ids[name], TenantID: tenants[name], Metadata: md.Handler(ids[name]),
			Env:     map[string]string{"A1URL": a1URL, "A1TOKEN": a1Token, "HOSTPORT": hostPort, "HOSTADDR": hostAddr},
			Command: sh(script)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"a2", "b1"} {
		st := wait(t, rt, ids[name])
		outs[name] = logs(t, rt, ids[name])
		if st.ExitCode != 0 {
			t.Errorf("%s exited %d: %q", name, st.ExitCode, outs[name])
		}
	}
	gw := regexp.MustCompile(`(?m)^gw=\d+\.\d+\.\d+\.1$`)
	for name, out := range outs {
		if !gw.MatchString(out) || hostAddr == "" {
			t.Errorf("%s found no gateway, or the test no host address (%q):\n%s", name, hostAddr, out)
		}
	}
	for name, want := range map[string][]string{
		"a2": {"no token: wget: server returned error: HTTP/1.1 401 Unauthorized", `"id":"` + ids["a2"] + `"`, `"tags":{"name":"a2"}`, "a1's token: wget: server returned error: HTTP/1.1 401 Unauthorized", "a1: a1", "gateway: unreachable", "host: unreachable", "end"},
		"b1": {"no token: wget: server returned error: HTTP/1.1 401 Unauthorized", `"id":"` + ids["b1"] + `"`, `"tags":{"name":"b1"}`, "a1's token: wget: server returned error: HTTP/1.1 401 Unauthorized", "a1: unreachable", "gateway: unreachable", "host: unreachable", "end"},
	} {
		for _, w := range want {
			if !strings.Contains(outs[name], w) {
				t.Errorf("%s's output lacks %q:\n%s", name, w, outs[name])
			}
		}
	}
	// The instances that exited have no network left; a1's goes with
	// its stop.
	if got := nw.Instances(); !slices.Equal(got, []string{ids["a1"]}) {
		t.Fatalf("networks after a2 and b1 exited: %v", got)
	}
	if err := rt.Stop(t.Context(), ids["a1"]); err != nil {
		t.Fatal(err)
	}
	if got := nw.Instances(); len(got) != 0 {
		t.Fatalf("networks after a1 stopped: %v", got)
	}
	for _, l := range []string{a1.Veth, a1.Bridge} {
		if _, err := os.Stat("/sys/class/net/" + l); err == nil {
			t.Fatalf("%s is left after its instance stopped", l)
		}
	}
}

// TestNetworkAfterRestart checks that a new runtime (an agent restart)
// keeps the network of the container it adopts, drops one whose container
// is gone, and serves the metadata of the adopted container again.
func TestNetworkAfterRestart(t *testing.T) {
	needNetwork(t)
	nw, cfg := testNetwork(t)
	old := newRuntime(t, func(c *Config) { c.Network = nw })
	id, ghost := newID(t), newID(t)
	spec := runtime.Spec{InstanceID: id, TenantID: "ten-a", Grace: grace, Metadata: handlerSaying("one"),
		Command: sh(`i=0; while [ $i -lt 600 ]; do timeout 2 wget -q -O - "$GPUCLOUD_METADATA_URL/x"; echo; sleep 0.1; i=$((i+1)); done`)}
	if err := old.Start(t.Context(), spec); err != nil {
		t.Fatal(err)
	}
	waitLog(t, old, id, "one /x")
	before, _ := nw.Instance(id)
	// A network whose container went while no agent ran.
	if _, err := nw.Setup(t.Context(), ghost, "ten-b", nil); err != nil {
		t.Fatal(err)
	}
	old.mu.Lock()
	for _, in := range old.insts {
		if in.meta != nil {
			in.meta.Close()
		}
	}
	old.insts = map[string]*inst{}
	old.mu.Unlock()
	_ = old.Close()

	nw2, err := network.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	rt := newRuntime(t, func(c *Config) { c.Network = nw2 })
	if got := nw2.Instances(); !slices.Equal(got, []string{id}) {
		t.Fatalf("networks after the restart: %v, want %s's only", got, id)
	}
	if after, _ := nw2.Instance(id); after != before {
		t.Fatalf("the adopted instance's network changed: %+v, was %+v", after, before)
	}
	if _, err := os.Stat(nw2.NetnsPath(ghost)); err == nil {
		t.Fatal("the gone container's namespace is left")
	}
	spec.Metadata = handlerSaying("two")
	if err := rt.Start(t.Context(), spec); err != nil {
		t.Fatal(err)
	}
	waitLog(t, rt, id, "two /x")
	if err := rt.Stop(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if got := nw2.Instances(); len(got) != 0 {
		t.Fatalf("networks after the stop: %v", got)
	}
}

// TestMetadataConnLimit checks that the metadata endpoint closes the
// connections a workload opens beyond MaxMetadataConns, and takes new ones
// once some are closed.
func TestMetadataConnLimit(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lim := &limitListener{Listener: ln, slots: make(chan struct{}, MaxMetadataConns)}
	defer lim.Close()
	accepted := make(chan net.Conn, 2*MaxMetadataConns)
	go func() {
		for {
			c, err := lim.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	var held []net.Conn
	for range MaxMetadataConns {
		dial()
		held = append(held, <-accepted)
	}
	// One more is closed by the endpoint: the client reads EOF.
	extra := dial()
	_ = extra.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := extra.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("a connection beyond the limit: read %v, want EOF", err)
	}
	select {
	case c := <-accepted:
		t.Fatalf("accepted %v beyond the limit", c.RemoteAddr())
	default:
	}
	held[0].Close()
	held[0].Close() // a second close frees nothing more
	dial()
	select {
	case c := <-accepted:
		c.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("no connection taken after one closed")
	}
	if n := len(lim.slots); n != MaxMetadataConns-1 {
		t.Fatalf("%d slots held, want %d", n, MaxMetadataConns-1)
	}
}
