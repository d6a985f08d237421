package e2e

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/agent"
	"github.com/gpucloud/gpucloud/agent/gpu/sim"
	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/store/pgtest"
)

// TestHostileTenant puts tenant B's workloads in containers on the same
// host as tenant A's, and has them try the attacks of issue 9 from the
// inside. Each finding is a failure:
//   - a readable credential, token, key or database, or A's secret
//     environment value, anywhere B can read (its files, every
//     /proc/*/environ and cmdline it sees);
//   - A's working directory, log, volume, the agent's data directory or
//     the database existing at their host paths;
//   - seeing A's processes, or killing them (kill -9 -1 from B);
//   - A's instance, volume or tenant IDs, or the agent's data directory,
//     in B's /proc/self/mountinfo;
//   - reaching the server's port;
//   - a process that escaped with setsid surviving the stop of B's
//     instance.
//
// And through the API: a member revoking an admin's token is refused as
// if the token did not exist, and a member over its tenant's request rate
// gets 429 with Retry-After. On SQLite and PostgreSQL.
func TestHostileTenant(t *testing.T) {
	ch := startContainerHost(t)
	t.Run("sqlite", func(t *testing.T) { testHostileTenant(t, ch, "sqlite://"+filepath.Join(t.TempDir(), "gpucloud.db")) })
	t.Run("postgres", func(t *testing.T) { testHostileTenant(t, ch, pgtest.URL(t)) })
}

// hostileScript is B's workload. It builds its search patterns at run time
// (a secret's marker, the token prefix), so that its own command line and
// environment do not match them, and prints one line per finding. It reads
// regular files only (find -type f): the image's /bin is hundreds of links
// to one busybox, which grep -r would read once per link (20 s here).
// Every step that waits on the network is bounded by timeout.
const hostileScript = `
s="HOSTILE-"; s="${s}SECRET"; t="gp"; t="${t}c_"
probe() { : | timeout 2 nc -w 1 "$1" "$2" >/dev/null 2>&1; }
for d in /bin /etc /home /root /tmp /var /work /volumes /usr /opt /run /mnt /srv /data; do
  [ -d "$d" ] && find "$d" -type f -exec grep -ls -e "$s" -e "$t" {} + 2>/dev/null | sed 's/^/FOUND /'
done
for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do
  grep -qs -e "$s" -e "$t" "$f" && echo "FOUND $f"
done
IFS=:
for p in $HOSTPATHS; do [ -e "$p" ] && echo "EXISTS $p"; done
unset IFS
n=600; n="${n}601"
for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' < "$f" 2>/dev/null | grep -q "sleep $n" && echo "FOUND A's process $f"; done
for p in $SERVERPORTS; do probe 127.0.0.1 "$p" && echo "REACHED 127.0.0.1:$p"; done
gw=$(ip route 2>/dev/null | awk '/^default/ {print $3}')
if [ -n "$gw" ]; then for p in $SERVERPORTS; do probe "$gw" "$p" && echo "REACHED $gw:$p"; done; fi
probe "$VICTIM" 8080 && echo "REACHED A's instance at $VICTIM:8080"
probe "${HOSTPORT%:*}" "${HOSTPORT##*:}" && echo "REACHED the host at $HOSTPORT"
tok=$(printf 'PUT /v1/token HTTP/1.0\r\nX-Metadata-Token-TTL-Seconds: 60\r\n\r\n' | timeout 5 nc 169.254.169.254 80 | tail -n 1)
echo "NOTOKEN $(timeout 2 wget -q -O - "$GPUCLOUD_METADATA_URL/v1/instance" 2>&1 | head -c 80)"
echo "METADATA $(timeout 2 wget -q -O - --header "X-Metadata-Token: $tok" "$GPUCLOUD_METADATA_URL/v1/instance" | tr -d '\n')"
echo "MOUNTINFO $(tr '\n' '|' < /proc/self/mountinfo)"
echo scanned
kill -9 -1 2>/dev/null
sleep 600
`

func testHostileTenant(t *testing.T, ch *containerHost, db string) {
	spec := sim.Spec{ID: "sim-shared", Zone: "zone-a", GPUs: sim.GPUSpec{Model: "H100", Count: 8}}
	// Volumes as filesystems of their size, as gpucloud agent --runtime
	// containerd keeps them.
	c := startClusterOn(t, db, nil, func(cfg *agent.Config) { cfg.VolumeImages = true }, ch.runtimeOf, spec)
	ctx := t.Context()
	h := c.hosts[spec.ID]
	aliceTenant, alice, aliceToken := c.member("acme", "alice")
	bobTenant, bob, _ := c.member("globex", "bob")

	// A: a secret in its environment and in its volume, a line in its log.
	vol, err := alice.CreateVolume(ctx, api.CreateVolumeRequest{Name: "ckpt", SizeGiB: 10, Zone: "zone-a"}, "")
	if err != nil {
		t.Fatal(err)
	}
	a, err := alice.CreateInstance(ctx, api.CreateInstanceRequest{Name: "victim", Offering: "h100.1x",
		Env:     map[string]string{"HF_TOKEN": "HOSTILE-SECRET-hf-0123456789", "API_TOKEN": aliceToken},
		Volumes: []string{vol.ID},
		Command: []string{"/bin/sh", "-c", `echo "HOSTILE-SECRET-in-the-volume" > $GPUCLOUD_VOLUMES/secret; echo victim > /work/who; httpd -p 8080 -h /work; echo victim-up; exec sleep 600601`}}, "")
	if err != nil {
		t.Fatal(err)
	}
	aIn := c.waitState(alice, a.ID, cloud.Running)
	c.waitLogs(alice, a.ID, "victim-up\n")

	// The host paths of what B must not reach: A's working directory and
	// log, its volume, the agent's data directory (credential, client key,
	// CA), and the database.
	var hostPaths []string
	for _, pat := range []string{"*" + a.ID + "*", "runtime/*/" + a.ID + "*", "volumes/*", "credential", "client.key", "client.crt"} {
		m, _ := filepath.Glob(filepath.Join(h.dir, pat))
		hostPaths = append(hostPaths, m...)
	}
	hostPaths = append(hostPaths, h.dir)
	if strings.HasPrefix(db, "sqlite://") {
		hostPaths = append(hostPaths, strings.TrimPrefix(db, "sqlite://"))
	}
	for _, p := range hostPaths {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("host path %s of the test does not exist: %v", p, err)
		}
	}
	port := c.srv.URL[strings.LastIndex(c.srv.URL, ":")+1:]
	aAddr, aGateway := ch.addrOf(t, a.ID)
	// A port of the host itself, on an address B's packets can be routed
	// to (A's bridge): the host's services are not the workloads'.
	hostLn, err := net.Listen("tcp", net.JoinHostPort(aGateway, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer hostLn.Close()
	go func() {
		for {
			conn, err := hostLn.Accept()
			if err != nil {
				return
			}
			conn.Close()
		}
	}()

	// A colleague of A's, on the same host, reaches A's port: the probe
	// works, so B's failure to below is the network's doing.
	peer, err := alice.CreateInstance(ctx, api.CreateInstanceRequest{Name: "colleague", Offering: "h100.1x",
		Env:     map[string]string{"A": aAddr},
		Command: []string{"/bin/sh", "-c", `if : | timeout 4 nc -w 3 $A 8080 >/dev/null 2>&1; then echo "peer: open"; else echo "peer: closed"; fi; exec sleep 600`}}, "")
	if err != nil {
		t.Fatal(err)
	}
	c.waitState(alice, peer.ID, cloud.Running)
	if out := c.waitLogs(alice, peer.ID, "peer: "); !strings.Contains(out, "peer: open") {
		t.Fatalf("a same-tenant instance cannot reach A at %s: %q", aAddr, out)
	}

	b, err := bob.CreateInstance(ctx, api.CreateInstanceRequest{Name: "attacker", Offering: "h100.1x",
		Env: map[string]string{"HOSTPATHS": strings.Join(hostPaths, ":"), "SERVERPORTS": port, "VICTIM": aAddr,
			"HOSTPORT": hostLn.Addr().String()},
		Command: []string{"/bin/sh", "-c", hostileScript}}, "")
	if err != nil {
		t.Fatal(err)
	}
	bIn := c.waitState(bob, b.ID, cloud.Running)
	if bIn.HostID != aIn.HostID {
		t.Fatalf("B runs on %s, A on %s: the test needs them together", bIn.HostID, aIn.HostID)
	}
	var out string
	c.until("B's scan to finish", func() (bool, string) {
		out = c.logs(bob, b.ID)
		return strings.Contains(out, "scanned\n"), out
	})
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, "FOUND "), strings.HasPrefix(line, "EXISTS "), strings.HasPrefix(line, "REACHED "):
			t.Errorf("tenant B's workload: %s", line)
		}
	}
	// Its mountinfo shows containerd's snapshot directories and tini's path
	// (docs/RUNTIME.md), but nothing of A: not A's instances, volume or
	// tenant.
	mounts := ""
	for _, line := range strings.Split(out, "\n") {
		if m, ok := strings.CutPrefix(line, "MOUNTINFO "); ok {
			mounts = m
		}
	}
	if !strings.Contains(mounts, " /proc ") {
		t.Errorf("B read no mountinfo: %q", mounts)
	}
	// Nor the agent's data directory: B's work directory, volumes and
	// resolv.conf are filesystems or files of their own.
	if strings.Contains(mounts, h.dir) {
		t.Errorf("B's /proc/self/mountinfo names the agent's data directory %s: %s", h.dir, mounts)
	}
	for what, id := range map[string]string{"A's instance": a.ID, "A's colleague": peer.ID, "A's volume": vol.ID, "A's tenant": aliceTenant.ID} {
		if strings.Contains(mounts, id) {
			t.Errorf("B's /proc/self/mountinfo names %s %s: %s", what, id, mounts)
		}
	}
	// Its metadata is its own, and only with a session token.
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, "METADATA "):
			if !strings.Contains(line, b.ID) || strings.Contains(line, a.ID) {
				t.Errorf("B's metadata document: %s", line)
			}
		case strings.HasPrefix(line, "NOTOKEN "):
			if strings.Contains(line, b.ID) {
				t.Errorf("B's metadata answered without a token: %s", line)
			}
		}
	}
	if !strings.Contains(out, "METADATA ") {
		t.Errorf("B read no metadata:\n%s", out)
	}
	// kill -9 -1 from B reached none of A's processes.
	if got := c.get(alice, a.ID); got.State != cloud.Running {
		t.Errorf("A's instance is %s after B's kill -9 -1", got.State)
	}

	// setsid: a process B detaches does not survive B's stop.
	escape, err := bob.CreateInstance(ctx, api.CreateInstanceRequest{Name: "escape", Offering: "h100.1x",
		Command: []string{"/bin/sh", "-c", "setsid sh -c 'exec sleep 777777' & echo detached; exec sleep 600"}}, "")
	if err != nil {
		t.Fatal(err)
	}
	c.waitState(bob, escape.ID, cloud.Running)
	c.waitLogs(bob, escape.ID, "detached\n")
	c.until("the detached sleep to run", func() (bool, string) {
		n := processesWith("sleep 777777")
		return n == 1, fmt.Sprintf("%d processes", n)
	})
	if _, err := bob.StopInstance(ctx, escape.ID, 0); err != nil {
		t.Fatal(err)
	}
	c.waitState(bob, escape.ID, cloud.Stopped)
	if n := processesWith("sleep 777777"); n != 0 {
		t.Errorf("%d processes B detached with setsid survive the stop of its instance", n)
	}

	// Through the API: B's member cannot revoke an admin token (it does not
	// exist for them), and over its tenant's rate it gets 429.
	adminToks, err := c.admin.Tokens(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range adminToks {
		if tk.Role == cloud.RoleAdmin {
			if _, err := bob.RevokeToken(ctx, tk.ID); cloud.ErrorCode(err) != cloud.NotFound {
				t.Errorf("B's member revokes admin token %s: %v", tk.ID, err)
			}
		}
	}
	if _, err := c.admin.SetQuota(ctx, bobTenant.ID, api.QuotaSpec{Instances: 64, GPUsPerModel: 16, RequestsPerSecond: 1, Burst: 3}); err != nil {
		t.Fatal(err)
	}
	limited := false
	for i := 0; i < 20 && !limited; i++ {
		_, err := bob.ListInstances(ctx, client.ListInstancesOptions{})
		limited = cloud.ErrorCode(err) == cloud.RateLimited
	}
	if !limited {
		t.Error("20 quick requests at 1 per second with a burst of 3 were never limited")
	}
	if got := c.get(alice, a.ID); got.State != cloud.Running {
		t.Errorf("A's instance is %s at the end", got.State)
	}
}

// processesWith counts the host's processes whose command line is s.
func processesWith(s string) int {
	n := 0
	ds, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, d := range ds {
		b, err := os.ReadFile(d)
		if err == nil && strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " ")) == s {
			n++
		}
	}
	return n
}

// addrOf is an instance's address on its host's instance network, and
// an address of the host's side: its tenant bridge's, or on a private
// network the fabric's gateway.
func (ch *containerHost) addrOf(t *testing.T, id string) (addr, gateway string) {
	t.Helper()
	ch.mu.Lock()
	defer ch.mu.Unlock()
	for _, n := range ch.nets {
		if info, ok := n.Instance(id); ok {
			return info.Addr.String(), info.Gateway.String()
		}
	}
	// On a private network: the overlay's address, and the fabric's
	// gateway, an address of this machine's own namespace that the
	// host's traffic is routed to.
	for i, ov := range ch.ovs {
		if a, ok := ov.Address(id); ok {
			return a.String(), ch.fabs[i].Gateway().String()
		}
	}
	t.Fatalf("instance %s has no address on any network", id)
	return "", ""
}
