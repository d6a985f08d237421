package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/stack"
)

// smallStack is an instance and a volume whose size is a parameter.
const smallStack = `description: An instance and its volume.
parameters:
  size:
    type: integer
    default: 10
    min: 1
    max: 100
resources:
  data:
    type: volume
    properties:
      name: data
      size_gib: ${param.size}
  box:
    type: instance
    properties:
      offering: l4.1x
      command: [sleep, "600"]
outputs:
  box_id:
    value: ${box.id}
`

// TestStacks covers the stack routes: plan, apply, read, list, events,
// drift and destroy; refusals that write nothing; and another tenant,
// which sees none of acme's stack and whose apply of the same name makes
// a stack of its own.
func TestStacks(t *testing.T) {
	e := newEnv(t)
	e.withPrices()
	ctx := context.Background()

	plan, err := e.acme.PlanStack(ctx, api.StackRequest{Name: "train", Template: smallStack})
	if err != nil {
		t.Fatalf("plan: %v", err)
	}
	if plan.Exists || plan.Summary[stack.ActionCreate] != 2 || len(plan.Changes) != 2 {
		t.Errorf("plan = %+v, want 2 creates of a new stack", plan)
	}
	for _, c := range plan.Changes {
		if c.Action != stack.ActionCreate || (c.Address != "data" && c.Address != "box") {
			t.Errorf("change %+v", c)
		}
	}
	if plan.Cost.OnDemand <= 0 || len(plan.Cost.Lines) != 2 {
		t.Errorf("cost = %+v, want the instance and the volume priced", plan.Cost)
	}
	if plan.Params["size"] != float64(10) {
		t.Errorf("parameters = %v, want size 10 (the default)", plan.Params)
	}

	// Refusals: a syntax error names its line; bad parameters, an unknown
	// parameter and a bad name are invalid. None writes anything.
	before := e.counts()
	_, err = e.acme.PlanStack(ctx, api.StackRequest{Template: "resources:\n  data: [\n"})
	if ce := wantCode(t, err, cloud.Invalid); !strings.Contains(ce.Message, "line ") {
		t.Errorf("syntax error %q does not name the line", ce.Message)
	}
	for _, req := range []api.ApplyStackRequest{
		{Template: smallStack, Parameters: map[string]string{"size": "x"}},
		{Template: smallStack, Parameters: map[string]string{"size": "1000"}},
		{Template: smallStack, Parameters: map[string]string{"nope": "1"}},
		{Template: "resources:\n  data: [\n"},
		{Template: ""},
	} {
		_, err := e.acme.ApplyStack(ctx, "train", req)
		wantCode(t, err, cloud.Invalid)
	}
	_, err = e.acme.ApplyStack(ctx, "Not A Name", api.ApplyStackRequest{Template: smallStack})
	wantCode(t, err, cloud.Invalid)
	e.unchanged(before, "refused plans and applies")
	if sts, err := e.acme.Stacks(ctx, ""); err != nil || len(sts) != 0 {
		t.Fatalf("after refusals acme lists %v, %v", sts, err)
	}

	// Apply: 202, applying, with the stack's Location.
	body, _ := json.Marshal(api.ApplyStackRequest{Template: smallStack, Parameters: map[string]string{"size": "20"}})
	status, h, b := e.raw("PUT", "/v1/stacks/train", e.acmeToken, strings.NewReader(string(body)),
		map[string]string{"Content-Type": "application/json"})
	var st cloud.Stack
	if err := json.Unmarshal(b, &st); status != http.StatusAccepted || err != nil {
		t.Fatalf("apply = %d %s", status, b)
	}
	if st.State != cloud.StackApplying || st.Name != "train" || st.TenantID != e.acmeID || h.Get("Location") != "/v1/stacks/train" {
		t.Errorf("apply = %+v, Location %q", st, h.Get("Location"))
	}
	v, err := e.acme.GetStack(ctx, "", "train")
	if err != nil || v.ID != st.ID || v.State != cloud.StackApplying || v.Template != smallStack {
		t.Fatalf("get = %+v, %v", v, err)
	}
	if sts, err := e.acme.Stacks(ctx, ""); err != nil || len(sts) != 1 || sts[0].ID != st.ID {
		t.Errorf("acme lists %v, %v", sts, err)
	}
	evs, err := e.acme.StackEvents(ctx, "", "train", 0, 0)
	if err != nil || len(evs.Events) == 0 || evs.Events[0].Action != "apply" || evs.Next != "" {
		t.Errorf("events = %+v, %v", evs, err)
	}
	if page, err := e.acme.StackEvents(ctx, "", "train", 0, 1); err != nil || len(page.Events) != 1 || page.Next == "" {
		t.Errorf("a full page = %+v, %v; want a next", page, err)
	}
	// Nothing is applied yet (no controller runs here): in sync.
	if d, err := e.acme.StackDrift(ctx, "", "train"); err != nil || !d.InSync || d.Drift == nil || len(d.Drift) != 0 {
		t.Errorf("drift = %+v, %v", d, err)
	}
	if p, err := e.acme.PlanStack(ctx, api.StackRequest{Name: "train", Template: smallStack}); err != nil || !p.Exists {
		t.Errorf("plan of the existing stack = %+v, %v", p, err)
	}

	// Globex sees none of it and changes nothing of it.
	_, err = e.globex.GetStack(ctx, "", "train")
	wantCode(t, err, cloud.NotFound)
	_, err = e.globex.DestroyStack(ctx, "", "train")
	wantCode(t, err, cloud.NotFound)
	_, err = e.globex.StackEvents(ctx, "", "train", 0, 0)
	wantCode(t, err, cloud.NotFound)
	_, err = e.globex.StackDrift(ctx, "", "train")
	wantCode(t, err, cloud.NotFound)
	if sts, err := e.globex.Stacks(ctx, ""); err != nil || len(sts) != 0 {
		t.Errorf("globex lists %v, %v", sts, err)
	}
	// Naming acme's tenant does not help a member.
	_, err = e.globex.GetStack(ctx, e.acmeID, "train")
	if code := cloud.ErrorCode(err); code != cloud.NotFound && code != cloud.PermissionDenied {
		t.Errorf("globex naming acme's tenant: %v", err)
	}
	// An apply of the same name is globex's own stack.
	other, err := e.globex.ApplyStack(ctx, "train", api.ApplyStackRequest{Template: smallStack})
	if err != nil || other.ID == st.ID || other.TenantID != e.globexID {
		t.Fatalf("globex's apply = %+v, %v", other, err)
	}
	if again, err := e.acme.GetStack(ctx, "", "train"); err != nil || again.ID != v.ID || again.Version != v.Version ||
		again.State != v.State || !again.UpdatedAt.Equal(v.UpdatedAt) || again.Template != v.Template {
		t.Errorf("acme's stack after globex's apply = %+v, %v; was %+v", again, err, v)
	}

	// Admins see both, and one tenant's with ?tenant.
	if sts, err := e.admin.Stacks(ctx, ""); err != nil || len(sts) != 2 {
		t.Errorf("admin lists %v, %v", sts, err)
	}
	if got, err := e.admin.GetStack(ctx, e.globexID, "train"); err != nil || got.ID != other.ID {
		t.Errorf("admin reads globex's = %+v, %v", got, err)
	}

	// Destroy: 202, destroying.
	status, _, b = e.raw("DELETE", "/v1/stacks/train", e.acmeToken, nil, nil)
	if err := json.Unmarshal(b, &st); status != http.StatusAccepted || err != nil || st.State != cloud.StackDestroying {
		t.Fatalf("destroy = %d %s", status, b)
	}
	if got, err := e.globex.GetStack(ctx, "", "train"); err != nil || got.State != cloud.StackApplying {
		t.Errorf("globex's stack after acme's destroy = %+v, %v", got, err)
	}
	_, err = e.acme.ApplyStack(ctx, "train", api.ApplyStackRequest{Template: smallStack})
	wantCode(t, err, cloud.Conflict)
}

// TestStackBodyLimit checks that a plan takes a template at its size limit,
// which is over the ordinary body limit once JSON escapes it, and refuses
// a body over the stack routes' own limit with 413.
func TestStackBodyLimit(t *testing.T) {
	e := newEnv(t)
	// A comment of '<', which Go's encoder escapes to six bytes each.
	pad := "#" + strings.Repeat("<", stack.MaxTemplateBytes-len(smallStack)-2) + "\n"
	big := smallStack + pad
	if len(big) != stack.MaxTemplateBytes {
		t.Fatalf("template of %d bytes", len(big))
	}
	if p, err := e.acme.PlanStack(context.Background(), api.StackRequest{Template: big}); err != nil || len(p.Changes) != 2 {
		t.Fatalf("plan of a %d-byte template: %+v, %v", len(big), p, err)
	}
	over := `{"template":"` + strings.Repeat(" ", maxStackBodyBytes) + `"}`
	status, _, b := e.raw("POST", "/v1/stacks/plan", e.acmeToken, strings.NewReader(over), map[string]string{"Content-Type": "application/json"})
	if status != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), "invalid_argument") {
		t.Errorf("an oversized body = %d %.200s", status, b)
	}
}
