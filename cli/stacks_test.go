package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/stack"
	"github.com/gpucloud/gpucloud/stackengine"
	"github.com/gpucloud/gpucloud/testkit"
)

// cliStack is an instance and a volume whose size is a parameter.
const cliStack = `description: An instance and its volume.
parameters:
  size: {type: integer, default: 10, min: 1, max: 100}
resources:
  data:
    type: volume
    properties: {name: data, size_gib: "${param.size}"}
  box:
    type: instance
    properties: {offering: l4.1x, command: [sleep, "600"]}
outputs:
  box_id: {value: "${box.id}"}
`

// writeTemplate saves a template in the test's directory and returns its
// path.
func writeTemplate(t *testing.T, src string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "stack.yaml")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestStackBlueprints(t *testing.T) {
	code, out, errOut := run(t, "stacks", "blueprints", "list")
	if code != 0 || !strings.HasPrefix(out, "NAME") {
		t.Fatalf("blueprints list: exit %d, %q, %q", code, out, errOut)
	}
	for _, b := range stack.Blueprints() {
		if !strings.Contains(out, b.Name) {
			t.Errorf("blueprints list lacks %s:\n%s", b.Name, out)
		}
		code, src, errOut := run(t, "stacks", "blueprints", "show", b.Name)
		if code != 0 {
			t.Fatalf("blueprints show %s: exit %d, %q", b.Name, code, errOut)
		}
		// What it prints is a template as it is, to save and edit.
		if _, err := stack.Parse([]byte(src)); err != nil {
			t.Errorf("blueprint %s as printed does not parse: %v", b.Name, err)
		}
	}
	if len(stack.Blueprints()) == 0 {
		t.Error("no blueprints")
	}
	code, _, errOut = run(t, "stacks", "blueprints", "show", "nope")
	if code != ExitUsage || !strings.Contains(errOut, "llm-finetune") {
		t.Errorf("unknown blueprint: exit %d, %q; want a usage error listing the names", code, errOut)
	}
}

func TestStacks(t *testing.T) {
	e := newCloudEnv(t)
	if _, err := service.BootstrapPrices(context.Background(), e.st, catalog.Default(), e.clock.Now()); err != nil {
		t.Fatal(err)
	}
	_, tok := e.member("acme", "alice")
	_, other := e.member("globex", "gary")
	file := writeTemplate(t, cliStack)

	// plan: the changes, the summary, the cost and the fit.
	var plan api.StackPlan
	decodeJSON(t, e.ok(tok, "stacks", "plan", file, "--param", "size=20", "-o", "json"), &plan)
	if plan.Summary[stack.ActionCreate] != 2 || plan.Cost.OnDemand <= 0 || plan.Params["size"] != float64(20) {
		t.Fatalf("plan = %+v", plan)
	}
	out := e.ok(tok, "stacks", "plan", file, "--param", "size=20", "--name", "train")
	for _, want := range []string{"ACTION", "create", "data", "box", "volume", "instance",
		"Plan: 2 to create, 0 to update, 0 to replace, 0 to delete.",
		"Cost: " + formatPrice(plan.Cost.OnDemand) + "/h on demand, " + formatPrice(plan.Cost.WithSpot) + "/h with spot",
		"Fit: "} {
		if !strings.Contains(out, want) {
			t.Errorf("plan lacks %q:\n%s", want, out)
		}
	}

	// Usage errors: a --param without '=', apply without --name, no file.
	for _, args := range [][]string{
		{"stacks", "plan", file, "--param", "size"},
		{"stacks", "apply", file, "--name", "train", "--param", "=3"},
		{"stacks", "apply", file},
		{"stacks", "plan"},
		{"stacks", "apply", file, "--name", "train", "--timeout", "1m"},
	} {
		code, _, errOut := e.as(tok, args...)
		if code != ExitUsage || errOut == "" {
			t.Errorf("%v: exit %d, %q; want a usage error", args, code, errOut)
		}
	}
	// The server's refusals are one line naming the problem.
	code, _, errOut := e.as(tok, "stacks", "plan", writeTemplate(t, "resources:\n  data: [\n"))
	oneLine(t, code, errOut, "line ", "(invalid_argument)")
	code, _, errOut = e.as(tok, "stacks", "apply", file, "--name", "train", "--param", "size=1000")
	oneLine(t, code, errOut, "(invalid_argument)")

	// apply: applying (no controller runs here).
	if out := e.ok(tok, "stacks", "apply", file, "--name", "train", "--param", "size=20"); out != "stack train: applying\n" {
		t.Errorf("apply printed %q", out)
	}
	// The same from stdin.
	stdin, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	oldStdin := os.Stdin
	os.Stdin = stdin
	out = e.ok(tok, "stacks", "apply", "-", "--name", "train", "--param", "size=20")
	os.Stdin = oldStdin
	stdin.Close()
	if out != "stack train: applying\n" {
		t.Errorf("apply from stdin printed %q", out)
	}

	if out := e.ok(tok, "stacks", "list"); !strings.Contains(out, "train") || !strings.Contains(out, "applying") {
		t.Errorf("list:\n%s", out)
	}
	out = e.ok(tok, "stacks", "show", "train")
	for _, want := range []string{"Name:", "train", "State:", "applying", "Resources:", "Outputs:", "Parameters:"} {
		if !strings.Contains(out, want) {
			t.Errorf("show lacks %q:\n%s", want, out)
		}
	}
	var v api.StackView
	decodeJSON(t, e.ok(tok, "stacks", "show", "train", "-o", "json"), &v)
	if v.Name != "train" || v.State != cloud.StackApplying || v.Template != cliStack {
		t.Errorf("show -o json = %+v", v)
	}
	if out := e.ok(tok, "stacks", "events", "train"); !strings.Contains(out, "apply") || !strings.Contains(out, "started") {
		t.Errorf("events:\n%s", out)
	}
	if out := e.ok(tok, "stacks", "drift", "train"); !strings.Contains(out, "in sync") {
		t.Errorf("drift:\n%s", out)
	}

	// Another tenant: not found, and its list is empty.
	for _, args := range [][]string{
		{"stacks", "show", "train"}, {"stacks", "drift", "train"}, {"stacks", "events", "train"}, {"stacks", "destroy", "train"},
	} {
		code, _, errOut := e.as(other, args...)
		oneLine(t, code, errOut, "(not_found)")
	}
	if out := e.ok(other, "stacks", "list"); !strings.Contains(out, "no stacks") {
		t.Errorf("globex lists:\n%s", out)
	}

	if out := e.ok(tok, "stacks", "destroy", "train"); out != "stack train: destroying\n" {
		t.Errorf("destroy printed %q", out)
	}
}

// TestStackWait plays the stack controller (stackengine.Engine.Step) and the
// scheduler while apply --wait and destroy --wait follow: apply prints
// each step and returns once the stack is active and its instance runs;
// destroy returns once the stack is gone and lists what it retained.
func TestStackWait(t *testing.T) {
	e := newCloudEnv(t)
	ctx := context.Background()
	_, tok := e.member("acme", "alice")
	svc := service.New(e.st, catalog.Default(), service.Options{Now: e.clock.Now})
	// The instance is in a placement group, which the destroy deletes
	// last, once the instance is gone.
	tmpl := strings.Replace(cliStack, "    type: volume\n", "    type: volume\n    deletion_policy: retain\n", 1)
	tmpl = strings.Replace(tmpl, "properties: {offering: l4.1x,", "properties: {offering: l4.1x, placement_group: \"${pg.id}\",", 1)
	tmpl = strings.Replace(tmpl, "resources:\n", "resources:\n  pg:\n    type: placement_group\n    properties: {name: train, strategy: cluster}\n", 1)
	file := writeTemplate(t, tmpl)
	// stackState is the state of the stack train that is not destroyed,
	// or destroyed when there is none.
	stackState := func() (cloud.StackState, string) {
		state, reason := cloud.StackDestroyed, ""
		err := e.st.Tx(ctx, func(tx cloud.Tx) error {
			sts, err := tx.ListStacks(ctx, "", false)
			if len(sts) > 0 {
				state, reason = sts[0].State, sts[0].Reason
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return state, reason
	}
	step := func(want cloud.StackState) {
		t.Helper()
		testkit.EventuallySays(t, 0, "the stack to be "+string(want), func() (bool, string) {
			if _, err := stackengine.New(svc).Step(ctx); err != nil {
				t.Fatalf("step: %v", err)
			}
			state, reason := stackState()
			return state == want, string(state) + " " + reason
		})
	}

	wait := e.start(tok, "stacks", "apply", file, "--name", "train", "--wait")
	step(cloud.StackActive)
	var box *cloud.Instance
	err := e.st.Tx(ctx, func(tx cloud.Tx) error {
		ins, err := tx.ListInstances(ctx, cloud.InstanceFilter{})
		if len(ins) == 1 {
			box = ins[0]
		}
		return err
	})
	if err != nil || box == nil {
		t.Fatalf("the stack's instance: %+v, %v", box, err)
	}
	e.askedAgain("GET /v1/stacks/train")
	e.move(box.ID, cloud.Running, testkit.Via{})
	code, out, errOut := wait()
	if code != 0 || out != "stack train: active\n" {
		t.Fatalf("apply --wait: exit %d, %q, %q", code, out, errOut)
	}
	// Each step in columns: the address, what happened, the ID.
	col := func(addr, what, id string) string { return fmt.Sprintf("  %-5s  %-18s  %s", addr, what, id) }
	var pgID string
	for _, line := range strings.Split(errOut, "\n") {
		if f := strings.Fields(line); len(f) >= 4 && f[1] == "pg" {
			pgID = f[3]
		}
	}
	for _, want := range []string{col("stack", "apply started", ""), col("box", "created", box.ID), col("data", "created", "v-"),
		col("pg", "created", pgID), col("stack", "apply succeeded", "")} {
		if !strings.Contains(errOut, want) {
			t.Errorf("apply --wait's steps lack %q:\n%s", want, errOut)
		}
	}
	if strings.Contains(errOut, "not in the stack yet") || pgID == "" {
		t.Errorf("apply --wait's steps:\n%s", errOut)
	}

	// drift: 0 in sync; 2 once the instance is stopped outside the stack,
	// with the table or the document, and nothing on stderr; 1 with an
	// error when it fails.
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"stacks", "drift", "train"}, ExitOK, "in sync"},
		{[]string{"stacks", "drift", "train", "-o", "json"}, ExitOK, `"in_sync": true`},
		{nil, 0, ""}, // the instance stops here
		{[]string{"stacks", "drift", "train"}, ExitDrift, "box"},
		{[]string{"stacks", "drift", "train", "-o", "json"}, ExitDrift, `"in_sync": false`},
		{[]string{"stacks", "drift", "nope"}, ExitError, ""},
	} {
		if c.args == nil {
			e.move(box.ID, cloud.Stopped, testkit.Via{})
			continue
		}
		code, out, errOut := e.as(tok, c.args...)
		if code != c.code || !strings.Contains(out, c.want) || (errOut != "") != (c.code == ExitError) {
			t.Errorf("%v: exit %d, %q, %q; want exit %d saying %q", c.args, code, out, errOut, c.code, c.want)
		}
	}

	wait = e.start(tok, "stacks", "destroy", "train", "--wait")
	e.askedAgain("DELETE /v1/stacks/train")
	e.askedAgain("GET /v1/stacks/train/events")
	testkit.Eventually(t, 0, "the instance to be terminating", func() bool {
		if _, err := stackengine.New(svc).Step(ctx); err != nil {
			t.Fatalf("step: %v", err)
		}
		var in *cloud.Instance
		_ = e.st.Tx(ctx, func(tx cloud.Tx) (err error) { in, err = tx.GetInstance(ctx, box.ID); return err })
		return in != nil && (in.State == cloud.Terminating || in.State == cloud.Terminated)
	})
	e.move(box.ID, cloud.Terminated, testkit.Via{})
	step(cloud.StackDestroyed)
	code, out, errOut = wait()
	if code != 0 || !strings.Contains(out, "stack train: destroyed") || !strings.Contains(out, "Retained") || !strings.Contains(out, "data") {
		t.Fatalf("destroy --wait: exit %d, %q, %q", code, out, errOut)
	}
	if strings.Contains(out, "box") {
		t.Errorf("destroy --wait says the instance is retained:\n%s", out)
	}
	if !strings.Contains(errOut, col("stack", "destroy started", "")) || strings.Contains(errOut, "apply") {
		t.Errorf("destroy --wait's steps are not the destroy's:\n%s", errOut)
	}
	// Every deletion is in the stream, the placement group's last (it
	// waits for its member), then the destroy's end.
	for _, want := range []string{col("data", "retained", "v-"), col("box", "deleted", box.ID), col("pg", "deleted", pgID),
		col("stack", "destroy succeeded", "")} {
		if !strings.Contains(errOut, want) {
			t.Errorf("destroy --wait's steps lack %q:\n%s", want, errOut)
		}
	}
	// The destroyed stack's events stay readable by its name, by its
	// tenant only.
	out = e.ok(tok, "stacks", "events", "train")
	for _, want := range []string{"destroy", "succeeded", "box", "delete"} {
		if !strings.Contains(out, want) {
			t.Errorf("events after the destroy lack %q:\n%s", want, out)
		}
	}
	_, other := e.member("globex", "gary")
	code, _, errOut = e.as(other, "stacks", "events", "train")
	oneLine(t, code, errOut, "(not_found)")

	// A failed apply (over the instance quota) exits 1 with the stack's
	// reason.
	e.ok(e.admin, "quotas", "set", "acme", "--instances", "1")
	e.ok(tok, "instances", "create", "--offering", "l4.1x")
	wait = e.start(tok, "stacks", "apply", file, "--name", "train", "--wait")
	step(cloud.StackFailed)
	code, out, errOut = wait()
	_, reason := stackState()
	if code != ExitError || out != "stack train: failed: "+reason+"\n" || !strings.Contains(errOut, "error: stack train failed: "+reason) {
		t.Errorf("a failed apply --wait: exit %d, %q, %q", code, out, errOut)
	}
}

// TestStackEventLine renders a stream's events: aligned columns, a step
// that succeeded as what it did, and no reason that only restates it.
func TestStackEventLine(t *testing.T) {
	at := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	ev := func(addr, action, outcome, id, msg string) *cloud.StackEvent {
		return &cloud.StackEvent{Time: at, Address: addr, Action: action, Outcome: outcome, Resource: id, Message: msg}
	}
	const ts = "2026-12-01T08:00:00Z  "
	w := &eventWidths{address: len("workers[0]")}
	for _, c := range []struct {
		ev   *cloud.StackEvent
		want string
	}{
		{ev("", "apply", "started", "", "apply requested by u-1"),
			ts + "stack       apply started                             apply requested by u-1"},
		{ev("pg", "create", "succeeded", "pg-0123456789abcdef", "not in the stack yet"),
			ts + "pg          created             pg-0123456789abcdef"},
		{ev("workers[0]", "replace", "succeeded", "i-0123456789abcdef", "instance is gone"),
			ts + "workers[0]  replaced            i-0123456789abcdef    instance is gone"},
		{ev("head", "create", "failed", "", "over quota\nsee quotas"),
			ts + "head        create failed                             over quota see quotas"},
		{ev("data", "retain", "succeeded", "v-0123456789abcdef", "left alive (deletion_policy retain)"),
			ts + "data        retained            v-0123456789abcdef    left alive (deletion_policy retain)"},
		{ev("pg", "delete", "succeeded", "pg-0123456789abcdef", "destroying the stack"),
			ts + "pg          deleted             pg-0123456789abcdef"},
		{ev("", "rollback", "succeeded", "", "apply failed; rolled back"),
			ts + "stack       rollback succeeded                        apply failed; rolled back"},
		// A wider ID widens its column from its line on.
		{ev("ip", "delete", "succeeded", "eip-0123456789abcdef0", ""),
			ts + "ip          deleted             eip-0123456789abcdef0"},
		{ev("", "destroy", "succeeded", "", "every resource is gone"),
			ts + "stack       destroy succeeded                          every resource is gone"},
	} {
		if got := stackEventLine(c.ev, w); got != c.want {
			t.Errorf("%s %s %s:\n got %q\nwant %q", c.ev.Address, c.ev.Action, c.ev.Outcome, got, c.want)
		}
	}
}
