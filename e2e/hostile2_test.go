package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agent"
	"github.com/gpucloud/gpucloud/agent/gpu/sim"
	"github.com/gpucloud/gpucloud/agent/runtime/process"
	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/console"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/store/pgtest"
)

// TestHostileTenantRoundTwo replays the attacks of issue 21 that worked
// once, as tenant B against tenant A on one containerd host (and, for the
// last one, a host of plain processes beside it), through the real
// server, agents and containers. Each must now fail:
//
//   - (1) B's workload floods its metadata endpoint's completion lock:
//     its agent refuses most of it (429), and A's host stays schedulable
//     with A running;
//   - (3) B's workload runs as a host uid of its own, not A's, root or
//     nobody, so per-user kernel limits are not shared;
//   - (4) an image on the host's loopback or a private address is refused
//     at create, and the refusal reads the same for an open and a closed
//     port;
//   - (5) the console counts random session cookies as failed
//     authentications and B's member's pages against its request rate:
//     both end in 429;
//   - (6) a join token B got hold of cannot take over A's host by joining
//     under its name: refused, and the real agent keeps its credential;
//   - (9) a program path that exists on the host but not in the image
//     fails as a missing one does: nothing tells B what the host holds;
//   - (13) an image on a cloud whose only host for the offering runs
//     processes is refused at create time, never run on the host.
//
// On SQLite and PostgreSQL.
func TestHostileTenantRoundTwo(t *testing.T) {
	ch := startContainerHost(t)
	t.Run("sqlite", func(t *testing.T) { testHostileRoundTwo(t, ch, "sqlite://"+filepath.Join(t.TempDir(), "gpucloud.db")) })
	t.Run("postgres", func(t *testing.T) { testHostileRoundTwo(t, ch, pgtest.URL(t)) })
}

// lockFloodScript is B's workload: a metadata session token, then 300
// alternating PUTs and DELETEs of the completion lock, each answer's
// status counted; then its own uid, and it waits.
const lockFloodScript = `
tok=$(printf 'PUT /v1/token HTTP/1.0\r\nX-Metadata-Token-TTL-Seconds: 600\r\n\r\n' | timeout 5 nc 169.254.169.254 80 | tail -n 1)
ok=0; limited=0; other=0; i=0
while [ $i -lt 300 ]; do
  m=PUT; [ $((i % 2)) = 1 ] && m=DELETE
  s=$(printf '%s /v1/scale-in-lock HTTP/1.0\r\nX-Metadata-Token: %s\r\n\r\n' "$m" "$tok" | timeout 2 nc 169.254.169.254 80 | head -n 1 | cut -d' ' -f2)
  case "$s" in 2*) ok=$((ok+1));; 429) limited=$((limited+1));; *) other=$((other+1)); last="$s";; esac
  i=$((i+1))
done
echo "LOCKS ok=$ok limited=$limited other=$other (last $last)"
echo "UID $(id -u)"
exec sleep 600
`

func testHostileRoundTwo(t *testing.T, ch *containerHost, db string) {
	spec := sim.Spec{ID: "sim-shared", Zone: "zone-a", GPUs: sim.GPUSpec{Model: "H100", Count: 8}}
	procSpec := sim.Spec{ID: "sim-proc", Zone: "zone-a", GPUs: sim.GPUSpec{Model: "L40S", Count: 2}}
	// sim-shared runs containers; sim-proc, the only L40S host, runs
	// plain processes.
	runtimeOf := func(t *testing.T, h *sim.Host, dir string) hostRuntime {
		if h.Spec().ID == procSpec.ID {
			return processRuntime(dir)
		}
		return ch.runtimeOf(t, h, dir)
	}
	c := startClusterOn(t, db, nil, nil, runtimeOf, spec, procSpec)
	ctx := t.Context()
	_, alice, _ := c.member("acme", "alice")
	_, bob, bobToken := c.member("globex", "bob")

	a, err := alice.CreateInstance(ctx, api.CreateInstanceRequest{Name: "victim", Offering: "h100.1x",
		Command: []string{"/bin/sh", "-c", `echo "UID $(id -u)"; exec sleep 600`}}, "")
	if err != nil {
		t.Fatal(err)
	}
	aIn := c.waitState(alice, a.ID, cloud.Running)
	aUID := uidLine(t, c.waitLogs(alice, a.ID, "UID "))

	// (1) and (3): the lock flood, and B's uid.
	b, err := bob.CreateInstance(ctx, api.CreateInstanceRequest{Name: "flood", Offering: "h100.1x",
		Command: []string{"/bin/sh", "-c", lockFloodScript}}, "")
	if err != nil {
		t.Fatal(err)
	}
	bIn := c.waitState(bob, b.ID, cloud.Running)
	if bIn.HostID != aIn.HostID {
		t.Fatalf("B runs on %s, A on %s: the test needs them together", bIn.HostID, aIn.HostID)
	}
	var out string
	c.until("B's lock flood to end", func() (bool, string) {
		out = c.logs(bob, b.ID)
		return strings.Contains(out, "UID "), out
	})
	m := regexp.MustCompile(`LOCKS ok=(\d+) limited=(\d+) other=(\d+) \(last (\d*)\)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("B's flood printed no counts:\n%s", out)
	}
	ok, _ := strconv.Atoi(m[1])
	limited, _ := strconv.Atoi(m[2])
	t.Logf("B's 300 lock changes: %s accepted, %s refused with 429, %s otherwise (the last %q)", m[1], m[2], m[3], m[4])
	if limited < 200 || ok > 100 {
		t.Errorf("B's 300 lock changes: %d accepted, %d limited; want most refused (20 at once, then 1/s)", ok, limited)
	}
	host := c.hostSpecs()[aIn.HostID]
	if host == nil || host.State != fleet.Schedulable {
		t.Errorf("A's host after B's flood: %+v, want schedulable", host)
	}
	if got := c.get(alice, a.ID); got.State != cloud.Running {
		t.Errorf("A's instance is %s after B's flood (%s)", got.State, got.Reason)
	}
	bUID := uidLine(t, out)
	for _, u := range []int{0, 65534} {
		if aUID == u || bUID == u {
			t.Errorf("a workload runs as host uid %d (A %d, B %d)", u, aUID, bUID)
		}
	}
	if aUID == bUID {
		t.Errorf("A and B share host uid %d: per-user kernel limits are shared", aUID)
	}

	// (4) Registries on the server's own loopback port (open) and on a
	// closed one, and on a private address: refused at create, alike.
	port := c.srv.URL[strings.LastIndex(c.srv.URL, ":")+1:]
	var msgs []string
	for _, img := range []string{"127.0.0.1:" + port + "/x:1", "127.0.0.1:1/x:1", "10.1.2.3:5000/x:1", "[::1]:" + port + "/x:1"} {
		before := len(c.instances(bob, clientAll()))
		_, err := bob.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "h100.1x", Image: img, Command: []string{"true"}}, "")
		if cloud.ErrorCode(err) != cloud.Invalid {
			t.Errorf("image %s: %v, want invalid_argument", img, err)
			continue
		}
		if n := len(c.instances(bob, clientAll())); n != before {
			t.Errorf("image %s: the refusal made an instance (%d, was %d)", img, n, before)
		}
		msgs = append(msgs, err.Error())
	}
	if len(msgs) >= 2 {
		open := strings.ReplaceAll(msgs[0], port, "PORT")
		closed := strings.ReplaceAll(msgs[1], ":1/", ":PORT/")
		if open != closed {
			t.Errorf("an open and a closed port read differently:\n%s\n%s", msgs[0], msgs[1])
		}
	}

	// (6) A join token B got hold of, used to join under A's host's name.
	jt, err := c.admin.CreateJoinToken(ctx, api.CreateJoinTokenRequest{Name: "leaked", ExpiresAt: new(time.Now().Add(time.Hour)), MaxUses: 5})
	if err != nil {
		t.Fatal(err)
	}
	fake, err := sim.New(spec)
	if err != nil {
		t.Fatal(err)
	}
	if j, err := agent.Join(ctx, agentapi.NewClient(c.srv.URL, "", c.hc), jt.Secret, fake); err == nil {
		t.Errorf("a join under the existing host %s's name succeeded: %s", spec.ID, j.HostID)
	}
	// The real agent's credential still works: its assignments are there.
	if _, err := c.hosts[spec.ID].api.Assignments(ctx); err != nil {
		t.Errorf("the real agent after the take-over attempt: %v", err)
	}

	// (9) A program that exists on the host, not in the image, fails as
	// a missing one does.
	hostProgram, err := exec.LookPath("containerd")
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]string{}
	for _, prog := range []string{hostProgram, "/usr/bin/no-such-program-here"} {
		in, err := bob.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "h100.1x", Command: []string{prog}}, "")
		if err != nil {
			t.Fatal(err)
		}
		got := c.waitState(bob, in.ID, cloud.Failed)
		reasons[prog] = strings.ReplaceAll(strings.ReplaceAll(got.Reason, prog, "PROGRAM"), in.ID, "ID")
	}
	if r := reasons[hostProgram]; r != reasons["/usr/bin/no-such-program-here"] {
		t.Errorf("a host program and a missing one fail differently:\n%q\n%q", r, reasons["/usr/bin/no-such-program-here"])
	}

	// (13) An image where the only host that could run the offering runs
	// plain processes: refused at create, nothing made.
	before := len(c.instances(bob, clientAll()))
	_, err = bob.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "l40s.1x", Image: "docker.io/gpucloud/base:1", Command: []string{"id"}}, "")
	if cloud.ErrorCode(err) != cloud.Invalid || !strings.Contains(err.Error(), "image") {
		t.Errorf("an image on a process-only offering: %v, want invalid_argument naming the image", err)
	}
	if n := len(c.instances(bob, clientAll())); n != before {
		t.Errorf("the refused create made an instance (%d, was %d)", n, before)
	}

	if got := c.get(alice, a.ID); got.State != cloud.Running {
		t.Errorf("A's instance is %s at the end (%s)", got.State, got.Reason)
	}
	// (5) Last, since it spends B's member's request rate. The console: random session cookies from one address, then B's
	// member's own pages, each until 429.
	cookieFlood := consoleUntilLimited(t, c, 400, func() string { return randomSessionSecret(t) })
	if cookieFlood < 0 {
		t.Error("400 random session cookies were never answered 429")
	}
	sess := consoleLogin(t, c, bobToken)
	pages := consoleUntilLimited(t, c, 1200, func() string { return sess })
	if pages < 0 {
		t.Error("1,200 console pages of one member were never answered 429")
	}
	t.Logf("console: 429 after %d random cookies, after %d pages of one member", cookieFlood, pages)

}

// uidLine reads the uid from a workload's "UID n" line.
func uidLine(t *testing.T, out string) int {
	t.Helper()
	m := regexp.MustCompile(`UID (\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no UID line in %q", out)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// randomSessionSecret is a well-formed token that is nobody's.
func randomSessionSecret(t *testing.T) string {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return "gpc_tk-" + hex.EncodeToString(b[:8]) + "_" + hex.EncodeToString(b[8:])
}

// consoleLogin logs in to the console with an API token and returns the
// session cookie's value.
func consoleLogin(t *testing.T, c *cluster, token string) string {
	t.Helper()
	hc := *c.hc
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	req, err := http.NewRequestWithContext(t.Context(), "POST", c.srv.URL+"/login", strings.NewReader(url.Values{"token": {token}}.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", c.srv.URL)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for _, ck := range resp.Cookies() {
		if ck.Name == console.SessionCookie {
			return ck.Value
		}
	}
	t.Fatalf("console login: %s, no session cookie", resp.Status)
	return ""
}

// consoleUntilLimited GETs the console's instances page with the session
// cookie cookie() at most n times, and returns how many were answered
// before the first 429 with a Retry-After, or -1 if none was.
func consoleUntilLimited(t *testing.T, c *cluster, n int, cookie func() string) int {
	t.Helper()
	hc := *c.hc
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for i := range n {
		req, err := http.NewRequestWithContext(ctx, "GET", c.srv.URL+"/instances", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.AddCookie(&http.Cookie{Name: console.SessionCookie, Value: cookie()})
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("console request %d: %v", i, err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests {
			if resp.Header.Get("Retry-After") == "" {
				t.Errorf("console 429 without Retry-After")
			}
			return i
		}
	}
	return -1
}

// clientAll lists every instance of the caller.
func clientAll() client.ListInstancesOptions { return client.ListInstancesOptions{} }

// processRuntime is the process runtime of a host whose data directory is
// dir, as startClusterOn makes by default.
func processRuntime(dir string) hostRuntime {
	return &trackingRuntime{Runtime: process.New(filepath.Join(dir, "runtime"))}
}
