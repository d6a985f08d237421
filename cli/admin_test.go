package cli

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/testkit"
)

func TestTenantsAndUsers(t *testing.T) {
	e := newCloudEnv(t)
	out := e.ok(e.admin, "tenants", "create", "acme")
	if !strings.Contains(out, "ID") || !strings.Contains(out, "acme") {
		t.Errorf("tenants create:\n%s", out)
	}
	out = e.ok(e.admin, "tenants", "list")
	if !strings.Contains(out, "operator") || !strings.Contains(out, "acme") {
		t.Errorf("tenants list:\n%s", out)
	}
	code, _, errOut := e.as(e.admin, "tenants", "create", "acme")
	oneLine(t, code, errOut, `a tenant named "acme" exists (conflict)`)

	// add-user takes the tenant's name, prints the secret once, and the
	// secret works.
	out = e.ok(e.admin, "tenants", "add-user", "acme", "--name", "alice")
	for _, s := range []string{"User:", "(alice, member)", "Secret:", "gpc_", "shown only this once", "gpucloud login --server " + e.url + " --token gpc_"} {
		if !strings.Contains(out, s) {
			t.Errorf("add-user lacks %q:\n%s", s, out)
		}
	}
	secret := out[strings.LastIndex(out, "--token ")+len("--token ") : len(out)-1]
	if out := e.ok(secret, "instances", "list"); strings.TrimSpace(out) != "no instances" {
		t.Errorf("the new user's token: %q", out)
	}
	code, _, errOut = e.as(e.admin, "tenants", "add-user", "acme", "--name", "root", "--role", "admin")
	oneLine(t, code, errOut, "(invalid_argument)")
	code, _, errOut = e.as(e.admin, "tenants", "add-user", "nosuch", "--name", "x")
	oneLine(t, code, errOut, "(not_found)")
	code, _, errOut = e.as(e.admin, "tenants", "add-user", "acme")
	if code != ExitUsage || !strings.Contains(errOut, "--name is required") {
		t.Errorf("add-user without --name: exit %d, %q", code, errOut)
	}
	code, _, errOut = e.as(secret, "tenants", "list")
	oneLine(t, code, errOut, "(permission_denied)")
}

func TestQuotas(t *testing.T) {
	e := newCloudEnv(t)
	acme, tok := e.member("acme", "alice")
	out := e.ok(e.admin, "quotas", "set", "acme", "--instances", "5", "--gpus", "H100=4")
	for _, s := range []string{"Quota of tenant " + acme, "RESOURCE", "instances", "5", "gpus H100-80GB-SXM"} {
		if !strings.Contains(out, s) {
			t.Errorf("quotas set lacks %q:\n%s", s, out)
		}
	}
	// Setting one limit keeps the others; 0 removes one.
	e.ok(e.admin, "quotas", "set", acme, "--gpus", "a100=2.5")
	var q api.QuotaStatus
	decodeJSON(t, e.ok(e.admin, "quotas", "get", "acme", "-o", "json"), &q)
	if q.Instances != 5 || q.GPUs["H100-80GB-SXM"] != 4 || q.GPUs["A100-80GB-SXM"] != 2.5 {
		t.Errorf("after merge: %+v", q)
	}
	e.ok(e.admin, "quotas", "set", "acme", "--gpus", "h100-80gb-sxm=0", "--instances", "0")
	q = api.QuotaStatus{}
	decodeJSON(t, e.ok(e.admin, "quotas", "get", "acme", "-o", "json"), &q)
	if q.Instances != 0 || len(q.GPUs) != 1 || q.GPUs["A100-80GB-SXM"] != 2.5 {
		t.Errorf("after removing: %+v", q)
	}
	e.ok(e.admin, "quotas", "set", "acme", "--reset", "--instances", "1")

	// The member reads its own quota and runs into it.
	e.ok(tok, "instances", "create", "--offering", "l4.1x")
	if out := e.ok(tok, "quotas", "get", acme); !regexp.MustCompile(`(?m)^instances +1 +1$`).MatchString(out) {
		t.Errorf("member quotas get:\n%s", out)
	}
	code, _, errOut := e.as(tok, "instances", "create", "--offering", "l4.1x")
	oneLine(t, code, errOut, "(quota_exceeded)")
	code, _, errOut = e.as(tok, "quotas", "set", acme, "--instances", "9")
	oneLine(t, code, errOut, "(permission_denied)")

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"quotas", "set", "acme"}, "nothing to set"},
		{[]string{"quotas", "set", "acme", "--gpus", "H100=lots"}, "--gpus H100=lots"},
		{[]string{"quotas", "set", "acme", "--gpus", "H100"}, `--gpus "H100": want KEY=VALUE`},
		{[]string{"quotas", "set", "acme", "--instances", "-1"}, "--instances -1"},
		{[]string{"quotas", "get"}, "one TENANT"},
	} {
		code, _, errOut := e.as(e.admin, tc.args...)
		if code != ExitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, %q; want %q", tc.args, code, errOut, tc.want)
		}
	}
}

func TestTokens(t *testing.T) {
	e := newCloudEnv(t)
	_, tok := e.member("acme", "alice")
	out := e.ok(tok, "tokens", "create", "--name", "ci", "--expires-in", "30d")
	if !strings.Contains(out, "Secret:") || !strings.Contains(out, "shown only this once") {
		t.Errorf("tokens create:\n%s", out)
	}
	var ct api.CreatedToken
	decodeJSON(t, e.ok(tok, "tokens", "create", "--name", "laptop", "-o", "json"), &ct)
	if ct.Token.Name != "laptop" || ct.Token.ExpiresAt != nil || !strings.HasPrefix(ct.Secret, "gpc_") {
		t.Errorf("created %+v", ct)
	}
	e.ok(ct.Secret, "offerings")

	out = e.ok(tok, "tokens", "list")
	for _, s := range []string{"initial", "ci", "laptop", "active", "never", "member"} {
		if !strings.Contains(out, s) {
			t.Errorf("tokens list lacks %q:\n%s", s, out)
		}
	}
	if out := e.ok(tok, "tokens", "revoke", ct.Token.ID); !strings.Contains(out, "revoked") {
		t.Errorf("revoke:\n%s", out)
	}
	code, _, errOut := e.as(ct.Secret, "offerings")
	oneLine(t, code, errOut, "(unauthenticated)")
	code, _, errOut = e.as(tok, "tokens", "revoke", "tk-0000000000000000")
	oneLine(t, code, errOut, "(not_found)")
	code, _, errOut = e.as(tok, "tokens", "create", "--expires-in", "-5d")
	if code != ExitUsage || !strings.Contains(errOut, `--expires-in "-5d"`) {
		t.Errorf("bad --expires-in: exit %d, %q", code, errOut)
	}
	// Admins see every tenant's tokens, or one tenant's.
	if out := e.ok(e.admin, "tokens", "list", "--tenant", "acme", "-o", "json"); strings.Contains(out, "bootstrap") || !strings.Contains(out, `"ci"`) {
		t.Errorf("admin tokens list --tenant acme:\n%s", out)
	}
}

func TestHosts(t *testing.T) {
	e := newCloudEnv(t)
	if out := e.ok(e.admin, "hosts", "list"); !strings.Contains(out, "no hosts") {
		t.Errorf("no hosts: %q", out)
	}
	ctx := context.Background()
	err := e.st.Tx(ctx, func(tx cloud.Tx) error {
		for _, h := range []*fleet.Host{fleet.MockNVLinkHost("h100-a", "H100-80GB-SXM", 8), fleet.MockHost("l40s-a", "L40S", 2)} {
			if err := tx.PutHost(ctx, &cloud.Host{ID: h.ID, State: fleet.Schedulable, Spec: *h, LastHeartbeat: time.Now()}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	out := e.ok(e.admin, "hosts", "list")
	for _, s := range []string{"HEARTBEAT", "h100-a", "8x H100-80GB-SXM", "2x L40S", "schedulable", "zone-a", "256", "2048 GiB", "s ago"} {
		if !strings.Contains(out, s) {
			t.Errorf("hosts list lacks %q:\n%s", s, out)
		}
	}
	if out := e.ok(e.admin, "hosts", "cordon", "h100-a", "l40s-a"); strings.Count(out, "cordoned") != 2 {
		t.Errorf("cordon:\n%s", out)
	}
	var h cloud.Host
	decodeJSON(t, e.ok(e.admin, "hosts", "uncordon", "h100-a", "-o", "json"), &h)
	if h.State != fleet.Schedulable || len(h.Spec.GPUs) != 8 {
		t.Errorf("uncordon: %+v", h)
	}
	code, _, errOut := e.as(e.admin, "hosts", "cordon", "nope")
	oneLine(t, code, errOut, "(not_found)")
}

func TestVolumes(t *testing.T) {
	e := newCloudEnv(t)
	_, tok := e.member("acme", "alice")
	var v cloud.Volume
	decodeJSON(t, e.ok(tok, "volumes", "create", "--name", "data", "--size-gib", "100", "--zone", "a", "-o", "json"), &v)
	if v.Name != "data" || v.SizeGiB != 100 || v.Zone != "a" {
		t.Errorf("created %+v", v)
	}
	var in cloud.Instance
	decodeJSON(t, e.ok(tok, "instances", "create", "--offering", "l4.1x", "-o", "json"), &in)
	out := e.ok(tok, "volumes", "attach", v.ID, "--instance", in.ID)
	if !strings.Contains(out, in.ID) || !strings.Contains(out, "100 GiB") {
		t.Errorf("attach:\n%s", out)
	}
	var vs []map[string]any
	if err := yaml.Unmarshal([]byte(e.ok(tok, "volumes", "list", "-o", "yaml")), &vs); err != nil || len(vs) != 1 || vs[0]["instance_id"] != in.ID {
		t.Errorf("list -o yaml: %v %v", vs, err)
	}
	if out := e.ok(tok, "volumes", "detach", v.ID); strings.Contains(out, in.ID) {
		t.Errorf("detach:\n%s", out)
	}
	code, _, errOut := e.as(tok, "volumes", "attach", "v-0000000000000000", "--instance", in.ID)
	oneLine(t, code, errOut, "(not_found)")
	// Its events, by name, as a table and as JSON; another tenant's
	// member gets not_found.
	out = e.ok(tok, "volumes", "events", "data")
	for _, want := range []string{"volume.created", "volume.attached", "volume.detached", v.ID + " attached", " u-"} {
		if !strings.Contains(out, want) {
			t.Errorf("volumes events: no %q in\n%s", want, out)
		}
	}
	var evs []cloud.Event
	decodeJSON(t, e.ok(tok, "volumes", "events", v.ID, "-o", "json"), &evs)
	if len(evs) != 3 || evs[0].Kind != "volume.created" || evs[2].Kind != "volume.detached" {
		t.Errorf("volumes events -o json: %+v", evs)
	}
	_, bob := e.member("globex", "bob")
	code, _, errOut = e.as(bob, "volumes", "events", v.ID)
	oneLine(t, code, errOut, "(not_found)")
	for _, args := range [][]string{
		{"volumes", "create", "--name", "x"},
		{"volumes", "create", "--size-gib", "5"},
		{"volumes", "attach", v.ID},
		{"volumes", "detach"},
		{"volumes", "events"},
	} {
		if code, _, errOut := e.as(tok, args...); code != ExitUsage {
			t.Errorf("%v: exit %d, %q", args, code, errOut)
		}
	}
}

// appendLog adds output to an instance's log in the store, as the server
// does with what the agent sends, keeping the newest keep bytes.
func (e *cloudEnv) appendLog(id, data string, keep int64) {
	ctx := context.Background()
	err := e.st.Tx(ctx, func(tx cloud.Tx) error {
		_, err := tx.AppendLog(ctx, id, []byte(data), keep)
		return err
	})
	if err != nil {
		e.t.Error(err)
	}
}

func TestInstanceLogs(t *testing.T) {
	e := newCloudEnv(t)
	_, tok := e.member("acme", "alice")
	var in cloud.Instance
	decodeJSON(t, e.ok(tok, "instances", "create", "--offering", "l4.1x", "-o", "json"), &in)
	e.move(in.ID, cloud.Running, testkit.Via{})
	if out := e.ok(tok, "instances", "logs", in.ID); out != "" {
		t.Errorf("logs of a silent instance: %q", out)
	}

	// The server keeps the newest 16 bytes here; the rest is noted as dropped.
	e.appendLog(in.ID, "xxepoch 1\nepoch 2\n", 16)
	code, out, errOut := e.as(tok, "instances", "logs", in.ID)
	if code != 0 || out != "epoch 1\nepoch 2\n" || errOut != "[gpucloud: 2 bytes of earlier output were dropped by the server]\n" {
		t.Fatalf("logs: exit %d, stdout %q, stderr %q", code, out, errOut)
	}

	// --follow prints new output until the instance stops: the output
	// grows while the CLI follows (it has asked for the logs since each
	// step).
	cli := e.start(tok, "instances", "logs", in.ID, "--follow")
	logs := "GET /v1/instances/" + in.ID + "/logs"
	e.askedAgain(logs)
	e.appendLog(in.ID, "epoch 3\n", 1<<20)
	e.askedAgain(logs)
	e.appendLog(in.ID, "done\n", 1<<20)
	e.move(in.ID, cloud.Stopped, testkit.Via{})
	code, out, errOut = cli()
	if code != 0 || !strings.HasSuffix(out, "epoch 1\nepoch 2\nepoch 3\ndone\n") {
		t.Fatalf("logs --follow: exit %d, stdout %q, stderr %q", code, out, errOut)
	}

	code, _, errOut = e.as(tok, "instances", "logs", "i-0000000000000000")
	oneLine(t, code, errOut, "(not_found)")

	// On a terminal the workload's escape sequences are shown, not sent;
	// --raw, a pipe or a file get the bytes. (Invalid UTF-8 reaches the
	// CLI as U+FFFD: the API's JSON carries text.)
	hostile := "\x1b]0;owned\x07\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2A\x1b[2K\a\u009b1m\r\x7fok ✓\tdone\n"
	e.appendLog(in.ID, hostile, 1<<20)
	terminal := false
	oldTW := terminalWidth
	terminalWidth = func(io.Writer) (int, bool) { return 80, terminal }
	t.Cleanup(func() { terminalWidth = oldTW })
	for _, tc := range []struct {
		name     string
		terminal bool
		args     []string
		want     string
	}{
		{"terminal", true, nil, `\x1b]0;owned\x07\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2A\x1b[2K\x07\u009b1m\r\x7fok ✓` + "\tdone\n"},
		{"terminal, --raw", true, []string{"--raw"}, hostile},
		{"terminal, --follow", true, []string{"--follow"}, `\x1b]0;owned\x07\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2A\x1b[2K\x07\u009b1m\r\x7fok ✓` + "\tdone\n"},
		{"pipe", false, nil, hostile},
	} {
		terminal = tc.terminal
		code, out, errOut := e.as(tok, append([]string{"instances", "logs", in.ID}, tc.args...)...)
		if code != 0 || !strings.HasSuffix(out, tc.want) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want it to end %q", tc.name, code, out, errOut, tc.want)
		}
	}

	// A server without the route says so.
	old := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprintf(w, `{"code":"not_found","message":"no such route: GET %s"}`, r.URL.Path)
	}))
	defer old.Close()
	code, _, errOut = run(t, "--server", old.URL, "--token", tok, "instances", "logs", in.ID)
	oneLine(t, code, errOut, "does not serve instance logs")
}

// TestHostDescribe: a host's detail view shows its RDMA adapters and
// underlay; another tenant's member cannot see it, and an unknown host
// is not_found.
func TestHostDescribe(t *testing.T) {
	e := newCloudEnv(t)
	ctx := context.Background()
	ib := fleet.MockNVLinkHost("h100-a", "H100-80GB-SXM", 8)
	ib.Labels["interconnect"] = "infiniband"
	ib.Underlay, ib.MTU = "10.9.0.2", 9000
	ib.DirectAddr, ib.DirectFingerprint = "10.9.0.2:7443", "sha256:"+strings.Repeat("ab", 32)
	ib.HCAs = []fleet.HCA{
		{Name: "mlx5_0", LinkLayer: "InfiniBand", NetDev: "ib0", Devices: []string{"/dev/infiniband/uverbs0", "/dev/infiniband/rdma_cm"}},
		{Name: "mlx5_bond_0", LinkLayer: "Ethernet", Devices: []string{"/dev/infiniband/uverbs1"}},
	}
	plain := fleet.MockHost("l40s-a", "L40S", 2)
	err := e.st.Tx(ctx, func(tx cloud.Tx) error {
		for _, h := range []*fleet.Host{ib, plain} {
			if err := tx.PutHost(ctx, &cloud.Host{ID: h.ID, State: fleet.Schedulable, Spec: *h, LastHeartbeat: time.Now()}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		host      string
		want      []string
		wantLines []string // lines of the adapters' table, spaces collapsed
		not       []string
	}{
		{host: "h100-a",
			want: []string{"ID:", "h100-a", "schedulable", "interconnect=infiniband", "Underlay:", "10.9.0.2, MTU 9000", "Direct:", "10.9.0.2:7443 (certificate sha256:abab",
				"8x H100-80GB-SXM", "RDMA adapters:", "NAME", "LINK LAYER", "NETDEV", "DEVICES"},
			wantLines: []string{
				"mlx5_0 InfiniBand ib0 /dev/infiniband/uverbs0, /dev/infiniband/rdma_cm",
				"mlx5_bond_0 Ethernet (RoCE) - /dev/infiniband/uverbs1",
			}},
		{host: "l40s-a", want: []string{"l40s-a", "2x L40S", "RDMA adapters: none"}, not: []string{"Underlay:", "Direct:"}},
	}
	for _, tt := range tests {
		out := e.ok(e.admin, "hosts", "describe", tt.host)
		for _, s := range tt.want {
			if !strings.Contains(out, s) {
				t.Errorf("hosts describe %s lacks %q:\n%s", tt.host, s, out)
			}
		}
		for _, s := range tt.not {
			if strings.Contains(out, s) {
				t.Errorf("hosts describe %s shows %q:\n%s", tt.host, s, out)
			}
		}
		lines := map[string]bool{}
		for _, l := range strings.Split(out, "\n") {
			lines[strings.Join(strings.Fields(l), " ")] = true
		}
		for _, l := range tt.wantLines {
			if !lines[l] {
				t.Errorf("hosts describe %s lacks the line %q:\n%s", tt.host, l, out)
			}
		}
	}
	var h cloud.Host
	decodeJSON(t, e.ok(e.admin, "hosts", "describe", "h100-a", "-o", "json"), &h)
	if h.ID != "h100-a" || len(h.Spec.HCAs) != 2 || h.Spec.HCAs[1].LinkLayer != "Ethernet" || h.Spec.Underlay != "10.9.0.2" {
		t.Errorf("describe -o json: %+v", h)
	}
	code, _, errOut := e.as(e.admin, "hosts", "describe", "nope")
	oneLine(t, code, errOut, "(not_found)")
	_, tok := e.member("acme", "alice")
	code, _, errOut = e.as(tok, "hosts", "describe", "h100-a")
	oneLine(t, code, errOut, "(permission_denied)")
	if code, _, _ := e.as(e.admin, "hosts", "describe"); code != ExitUsage {
		t.Errorf("describe without an ID: exit %d", code)
	}
}
