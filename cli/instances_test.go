package cli

import (
	"context"
	"io"
	"reflect"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/gpucloud/gpucloud/cli/cliconfig"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/testkit"
)

func TestInstancesLifecycle(t *testing.T) {
	e := newCloudEnv(t)
	_, tok := e.member("acme", "alice")

	// Create, as a table row.
	out := e.ok(tok, "instances", "create", "--offering", "h100.1x", "--name", "train")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "ID ") || !strings.Contains(lines[0], "OFFERING") {
		t.Fatalf("create table:\n%s", out)
	}
	first := strings.Fields(lines[1])[0]
	if !strings.HasPrefix(first, "i-") || !strings.Contains(lines[1], "train") || !strings.Contains(lines[1], "pending") {
		t.Errorf("create row %q", lines[1])
	}

	// Create with everything, as JSON; the command follows "--".
	var in cloud.Instance
	decodeJSON(t, e.ok(tok, "instances", "create", "--offering", "H100.MIG.3G.40GB", "--zone", "a,b", "--label", "driver>=550",
		"--env", "A=1", "--env", "B=x=y", "--tag", "team=ml", "-o", "json", "--", "python", "train.py", "--epochs", "3"), &in)
	if in.Offering != "h100.mig.3g.40gb" || in.State != cloud.Pending || !reflect.DeepEqual(in.Zones, []string{"a", "b"}) ||
		!reflect.DeepEqual(in.Env, map[string]string{"A": "1", "B": "x=y"}) || in.Tags["team"] != "ml" ||
		!reflect.DeepEqual(in.Command, []string{"python", "train.py", "--epochs", "3"}) || len(in.Labels) != 1 {
		t.Errorf("created %+v", in)
	}

	// List: a table with both, filters, YAML with the API's field names.
	out = e.ok(tok, "instances", "list")
	if !strings.Contains(out, first) || !strings.Contains(out, in.ID) || strings.Contains(out, "TENANT") {
		t.Errorf("list:\n%s", out)
	}
	var listed []map[string]any
	if err := yaml.Unmarshal([]byte(e.ok(tok, "instances", "list", "--offering", "h100.1x", "-o", "yaml")), &listed); err != nil {
		t.Fatal(err)
	}
	if len(listed) != 1 || listed[0]["id"] != first || listed[0]["tenant_id"] == nil {
		t.Errorf("list -o yaml: %v", listed)
	}
	if out := e.ok(tok, "instances", "list", "--state", "running"); strings.TrimSpace(out) != "no instances" {
		t.Errorf("list --state running: %q", out)
	}

	// Describe shows the workload, the placement and the events.
	e.move(in.ID, cloud.Running, testkit.Via{Host: "h100-a"})
	e.update(in.ID, func(in *cloud.Instance) {
		in.Placement = &fleet.Placement{ID: in.ID, HostID: "h100-a", CPUMilli: 10000, MemoryMiB: 103 << 10,
			Devices: []fleet.Device{{GPU: 3, UUID: "GPU-h100-a-3", Kind: fleet.MIGSlice, MIGProfile: "3g.40gb",
				MIGProfileID: 9, MIGStart: 4, MIGSlots: 4, MIGSlices: 3}}}
	})
	out = e.ok(tok, "instances", "describe", in.ID)
	for _, s := range []string{"ID:", in.ID, "State:", "running", "Command:", "python train.py --epochs 3", "Env:", "A=1, B=x=y",
		"Host:", "h100-a", "Allocation:", "1 device, 10 vCPUs, 103 GiB", "Devices:", "GPU-h100-a-3", "MIG 3g.40gb on GPU 3 (profile 9, memory slots 4-7, 3 compute slices)", "has not reported the slice's MIG UUID yet",
		"Events:", "instance.created", "created with offering h100.mig.3g.40gb"} {
		if !strings.Contains(out, s) {
			t.Errorf("describe lacks %q:\n%s", s, out)
		}
	}
	// Once the agent reported it, the MIG slice's own UUID (the one in
	// CUDA_VISIBLE_DEVICES) leads, and the parent GPU's follows.
	e.update(in.ID, func(in *cloud.Instance) {
		in.Placement.Devices[0].VisibleUUID = "MIG-0b4c7a1e-1111-2222-3333-444455556666"
	})
	out = e.ok(tok, "instances", "describe", in.ID)
	if !strings.Contains(out, "3    MIG-0b4c7a1e-1111-2222-3333-444455556666") || !strings.Contains(out, "parent GPU-h100-a-3") {
		t.Errorf("describe with the visible UUID:\n%s", out)
	}
	var desc struct {
		cloud.Instance
		Events []*cloud.Event `json:"events"`
	}
	decodeJSON(t, e.ok(tok, "instances", "describe", in.ID, "-o", "json"), &desc)
	// Its events: created, and the moves to scheduled, starting, running.
	if desc.ID != in.ID || desc.Placement == nil || len(desc.Events) != 4 {
		t.Errorf("describe -o json: %+v", desc)
	}

	// Stop: a running instance goes to stopping, a pending one stops at once.
	out = e.ok(tok, "instances", "stop", in.ID, first)
	if !strings.Contains(out, "stopping") || !strings.Contains(out, "stopped") {
		t.Errorf("stop:\n%s", out)
	}
	// A stale --if-match is a conflict.
	code, _, errOut := e.as(tok, "instances", "start", first, "--if-match", "1")
	oneLine(t, code, errOut, "(conflict)")
	out = e.ok(tok, "instances", "start", first, "--if-match", `"2"`)
	if !strings.Contains(out, "pending") {
		t.Errorf("start:\n%s", out)
	}
	out = e.ok(tok, "instances", "events", first)
	for _, s := range []string{"TIME", "instance.created", "pending -> stopped", "stopped -> pending", "stop requested by"} {
		if !strings.Contains(out, s) {
			t.Errorf("events lack %q:\n%s", s, out)
		}
	}

	// Terminate several: one unknown ID fails the command but not the others.
	code, out, errOut = e.as(tok, "instances", "terminate", first, "i-0000000000000000")
	oneLine(t, code, errOut, "1 of 2 instances failed", "i-0000000000000000: instance", "(not_found)")
	if !strings.Contains(out, first) || !strings.Contains(out, "terminated") {
		t.Errorf("terminate output:\n%s", out)
	}
	// Terminating again changes nothing and succeeds.
	if out := e.ok(tok, "instances", "terminate", first, "-o", "json"); !strings.Contains(out, `"state": "terminated"`) {
		t.Errorf("terminate again: %s", out)
	}

	// Another tenant sees nothing of acme's.
	_, other := e.member("globex", "bob")
	code, _, errOut = e.as(other, "instances", "describe", first)
	oneLine(t, code, errOut, "(not_found)")
	// The admin sees both tenants, with a TENANT column.
	e.ok(other, "instances", "create", "--offering", "l4.1x")
	if out := e.ok(e.admin, "instances", "list"); !strings.Contains(out, "TENANT") {
		t.Errorf("admin list:\n%s", out)
	}
	if out := e.ok(e.admin, "instances", "list", "--tenant", "globex", "-o", "json"); strings.Count(out, `"id"`) != 1 {
		t.Errorf("admin list --tenant globex:\n%s", out)
	}
}

func TestInstancesIdempotencyKey(t *testing.T) {
	e := newCloudEnv(t)
	_, tok := e.member("acme", "alice")
	var a, b, c cloud.Instance
	decodeJSON(t, e.ok(tok, "instances", "create", "--offering", "l4.1x", "--idempotency-key", "job-42", "-o", "json"), &a)
	decodeJSON(t, e.ok(tok, "instances", "create", "--offering", "l4.1x", "--idempotency-key", "job-42", "-o", "json"), &b)
	decodeJSON(t, e.ok(tok, "instances", "create", "--offering", "l4.1x", "-o", "json"), &c)
	if a.ID != b.ID {
		t.Errorf("same key, two instances: %s %s", a.ID, b.ID)
	}
	if c.ID == a.ID {
		t.Error("the default key deduplicated a new command")
	}
	if u1, u2 := newUUID(), newUUID(); u1 == u2 || len(u1) != 36 || u1[14] != '4' {
		t.Errorf("uuids %s %s", u1, u2)
	}
}

// flip plays the scheduler and the agent while the CLI waits: it waits
// for the pending instance the CLI created, gives it a scheduler reason,
// waits until the CLI has asked for it since (so that it has seen the
// reason), and moves it to state with reason (the default reason when
// empty).
func (e *cloudEnv) flip(state cloud.State, reason string) {
	e.t.Helper()
	ctx := context.Background()
	var id string
	testkit.Eventually(e.t, 0, "a pending instance", func() bool {
		var ins []*cloud.Instance
		err := e.st.Tx(ctx, func(tx cloud.Tx) (err error) {
			ins, err = tx.ListInstances(ctx, cloud.InstanceFilter{States: []cloud.State{cloud.Pending}})
			return err
		})
		if err != nil || len(ins) == 0 {
			return false
		}
		id = ins[0].ID
		return true
	})
	e.update(id, func(in *cloud.Instance) { in.Reason = "0/8 hosts available: 8 no free GPU" })
	e.askedAgain("GET /v1/instances/" + id)
	e.move(id, state, testkit.Via{Reason: reason})
}

func TestInstancesCreateWait(t *testing.T) {
	e := newCloudEnv(t)
	_, tok := e.member("acme", "alice")
	terminal := false
	old := terminalWidth
	terminalWidth = func(io.Writer) (int, bool) { return 100, terminal }
	t.Cleanup(func() { terminalWidth = old })

	// Not a terminal: quiet, and the instance printed once running.
	cli := e.start(tok, "instances", "create", "--offering", "l4.1x", "--wait", "--timeout", "5s")
	e.flip(cloud.Running, "")
	code, out, errOut := cli()
	if code != 0 || errOut != "" || !strings.Contains(out, "running") {
		t.Fatalf("create --wait: exit %d, stdout %q, stderr %q", code, out, errOut)
	}

	// A terminal gets one progress line, redrawn in place and cleared.
	terminal = true
	cli = e.start(tok, "instances", "create", "--offering", "l4.1x", "--wait", "-o", "json")
	e.flip(cloud.Running, "")
	code, out, errOut = cli()
	if code != 0 || !strings.Contains(out, `"state": "running"`) {
		t.Fatalf("create --wait on a terminal: exit %d, stderr %q", code, errOut)
	}
	if !strings.Contains(errOut, ": pending (0/8 hosts available: 8 no free GPU)\x1b[K") || strings.Contains(errOut, "\n") ||
		!strings.HasSuffix(errOut, "\r\x1b[K") {
		t.Errorf("progress %q", errOut)
	}
	terminal = false

	// A failure ends the wait with the reason.
	cli = e.start(tok, "instances", "create", "--offering", "l4.1x", "--wait")
	e.flip(cloud.Failed, "exit status 3")
	code, _, errOut = cli()
	oneLine(t, code, errOut, "failed: exit status 3")

	// So does the timeout, and the instance keeps going.
	code, _, errOut = e.as(tok, "instances", "create", "--offering", "l4.1x", "--wait", "--timeout", "30ms")
	oneLine(t, code, errOut, "gave up after 30ms", "is still pending", "gpucloud instances describe i-")
}

func TestInstancesStopWait(t *testing.T) {
	e := newCloudEnv(t)
	_, tok := e.member("acme", "alice")
	var in cloud.Instance
	decodeJSON(t, e.ok(tok, "instances", "create", "--offering", "l4.1x", "-o", "json"), &in)
	e.move(in.ID, cloud.Running, testkit.Via{})
	cli := e.start(tok, "instances", "stop", in.ID, "--wait")
	// The server moves it to stopping; once the CLI has seen that, the
	// agent reports it stopped.
	testkit.Eventually(t, 0, "the server to stop "+in.ID, func() bool {
		got, err := e.Admin.GetInstance(context.Background(), in.ID)
		return err == nil && got.State == cloud.Stopping
	})
	e.askedAgain("GET /v1/instances/" + in.ID)
	e.move(in.ID, cloud.Stopped, testkit.Via{})
	code, out, errOut := cli()
	if code != 0 || !strings.Contains(out, "stopped") {
		t.Errorf("stop --wait: exit %d, stderr %q:\n%s", code, errOut, out)
	}
	// Waiting for a terminated instance to run fails at once.
	e.ok(tok, "instances", "terminate", in.ID)
	code, _, errOut = e.as(tok, "instances", "start", in.ID, "--wait")
	oneLine(t, code, errOut, "(conflict)")
}

func TestInstancesBadInput(t *testing.T) {
	e := newCloudEnv(t)
	_, tok := e.member("acme", "alice")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"instances", "create"}, "--offering is required"},
		{[]string{"instances", "create", "--offering", "l4.1x", "--env", "FOO"}, `--env "FOO": want KEY=VALUE`},
		{[]string{"instances", "create", "--offering", "l4.1x", "--env", "=x"}, `--env "=x": want KEY=VALUE`},
		{[]string{"instances", "create", "--offering", "l4.1x", "--tag", "a=1", "--tag", "a=2"}, "--tag a is given twice"},
		{[]string{"instances", "create", "--offering", "l4.1x", "python"}, `unexpected argument "python": put the workload's command after "--"`},
		{[]string{"instances", "create", "--offering", "l4.1x", "--timeout", "1m"}, "--timeout only applies with --wait"},
		{[]string{"instances", "create", "--offering", "l4.1x", "-o", "xml"}, `--output "xml"`},
		{[]string{"instances", "list", "--state", "runing"}, `--state "runing": want one of pending, scheduled`},
		{[]string{"instances", "describe"}, "takes one instance ID"},
		{[]string{"instances", "stop"}, "takes one or more instance IDs"},
		{[]string{"instances", "stop", "i-1", "i-2", "--if-match", "3"}, "--if-match applies to one instance"},
		{[]string{"instances", "stop", "i-1", "--if-match", "v3"}, `--if-match "v3"`},
		{[]string{"instances", "create", "--offering", "l4.1x", "--wait", "--timeout", "soon"}, "--timeout"},
	} {
		code, out, errOut := e.as(tok, tc.args...)
		if code != ExitUsage || !strings.HasPrefix(errOut, "error: ") || !strings.Contains(errOut, tc.want) ||
			!strings.Contains(errOut, "--help' for usage.") || out != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want usage error with %q", tc.args, code, out, errOut, tc.want)
		}
	}

	// Errors from the server: one line with the code.
	code, _, errOut := e.as(tok, "instances", "create", "--offering", "h100.nope")
	oneLine(t, code, errOut, `unknown offering "h100.nope"`, "(invalid_argument)")
	code, _, errOut = e.as(tok, "instances", "create", "--offering", "l4.1x", "--env", "1X=a")
	oneLine(t, code, errOut, "is not a variable name", "(invalid_argument)")
	code, _, errOut = e.as("gpc_tk-0000000000000000_nope", "instances", "list")
	oneLine(t, code, errOut, "invalid, revoked or expired token (unauthenticated)", "the token came from --token")
	code, _, errOut = e.as(tok, "instances", "describe", "i-0000000000000000")
	oneLine(t, code, errOut, `"i-0000000000000000"`, "(not_found)")
	code, _, errOut = e.as(tok, "hosts", "list")
	oneLine(t, code, errOut, "for admins only (permission_denied)")
}

func TestInstanceCompletion(t *testing.T) {
	e := newCloudEnv(t)
	_, tok := e.member("acme", "alice")
	var in cloud.Instance
	decodeJSON(t, e.ok(tok, "instances", "create", "--offering", "l4.1x", "--name", "web", "-o", "json"), &in)
	t.Setenv(cliconfig.EnvServer, e.url)
	t.Setenv(cliconfig.EnvToken, tok)
	code, out, _ := run(t, "__complete", "instances", "stop", "")
	if code != 0 || !strings.Contains(out, in.ID+"\tweb l4.1x pending") {
		t.Errorf("complete instance IDs: exit %d\n%s", code, out)
	}
	code, out, _ = run(t, "__complete", "instances", "create", "--offering", "h100.mig")
	if code != 0 || !strings.Contains(out, "h100.mig.3g.40gb") {
		t.Errorf("complete offerings: exit %d\n%s", code, out)
	}
}

func TestShellJoin(t *testing.T) {
	got := shellJoin([]string{"python", "-c", "print('hi')", "", "a=b", "x y"})
	want := `python -c 'print('\''hi'\'')' '' a=b 'x y'`
	if got != want {
		t.Errorf("shellJoin = %s, want %s", got, want)
	}
}

// TestInstancesCreateCount: --count creates that many instances, each with
// its own idempotency key derived from the given one, so the same command
// run twice creates nothing more.
func TestInstancesCreateCount(t *testing.T) {
	e := newCloudEnv(t)
	_, tok := e.member("acme", "alice")
	for run := 0; run < 2; run++ {
		code, out, errOut := e.as(tok, "instances", "create", "--offering", "l4.1x", "--count", "3", "--name", "w", "--idempotency-key", "batch")
		if code != 0 || strings.Count(out, "l4.1x") != 3 {
			t.Fatalf("run %d: exit %d, stdout %q, stderr %q", run, code, out, errOut)
		}
	}
	code, out, _ := e.as(tok, "instances", "list", "-o", "json")
	if code != 0 || strings.Count(out, `"offering": "l4.1x"`) != 3 || !strings.Contains(out, `"name": "w-2"`) {
		t.Fatalf("list after two runs: %s", out)
	}
	if code, _, errOut := e.as(tok, "instances", "create", "--offering", "l4.1x", "--count", "0"); code != ExitUsage {
		t.Fatalf("--count 0: exit %d, %q", code, errOut)
	}
}
