package console

import (
	"context"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/stack"
)

// --- stacks ----------------------------------------------------------------

const (
	// stackEventsShown is how many of a stack's events its page shows:
	// the last ones.
	stackEventsShown = 50
	// stackEventsFirstRead is the first page of events the stack page
	// reads; a longer history is searched for its tail (lastStackEvents).
	stackEventsFirstRead = 200
)

// stackTenant is the tenant a request names for a stack: a stack is named,
// not identified, in its tenant, so an admin's links carry ?tenant= (and
// forms a tenant field); a member's is always their own.
func stackTenant(r *http.Request, s *session) string {
	if !s.admin() {
		return ""
	}
	return strings.TrimSpace(r.FormValue("tenant"))
}

// stackURL is a stack's page.
func stackURL(name, tenant string) string {
	u := "/stacks/" + url.PathEscape(name)
	if tenant != "" {
		u += "?tenant=" + url.QueryEscape(tenant)
	}
	return u
}

func (c *Console) stacksPage(w http.ResponseWriter, r *http.Request, s *session) error {
	return c.renderStacks(w, r, s, http.StatusOK, map[string]any{"Form": map[string]string{"tenant": stackTenant(r, s)}})
}

// renderStacks renders the stacks list with the plan form, and data (the
// form's values, a plan or its error) on top.
func (c *Console) renderStacks(w http.ResponseWriter, r *http.Request, s *session, status int, data map[string]any) error {
	tenant := ""
	if s.admin() {
		tenant = r.URL.Query().Get("tenant")
	}
	sts, err := c.svc.Stacks.List(r.Context(), s.actor, tenant)
	if err != nil {
		return err
	}
	data["Title"], data["Section"], data["Stacks"], data["TenantFilter"] = "Stacks", "stacks", sts, tenant
	c.render(w, r, status, "stacks", s, data)
	return nil
}

func (c *Console) stackPage(w http.ResponseWriter, r *http.Request, s *session) error {
	ctx := r.Context()
	tenant, name := stackTenant(r, s), r.PathValue("name")
	v, err := c.svc.Stacks.Get(ctx, s.actor, tenant, name)
	if err != nil {
		return err
	}
	data := map[string]any{"Title": "Stack " + v.Name, "Section": "stacks", "V": v, "TenantParam": tenant,
		"CanDestroy": v.State != cloud.StackDestroying && v.State != cloud.StackDestroyed}
	if r.URL.Query().Get("drift") != "" {
		// Before the events: the check is an event of its own.
		d, err := c.svc.Stacks.Drift(ctx, s.actor, tenant, name)
		if err != nil {
			return err
		}
		data["Drift"], data["DriftChecked"] = d, true
	}
	evs, err := c.lastStackEvents(ctx, s, tenant, name, stackEventsShown)
	if err != nil {
		return err
	}
	data["Events"], data["EventsCut"] = evs, len(evs) == stackEventsShown
	c.render(w, r, http.StatusOK, "stack", s, data)
	return nil
}

// lastStackEvents answers the stack's last n events, oldest first. The
// service pages events forward from an event ID; when the first page is
// not the whole history, the tail is found by searching the ID after
// which exactly n events remain (galloping, then bisecting), so that a
// long history costs a few dozen reads of n events, not a read of it all.
func (c *Console) lastStackEvents(ctx context.Context, s *session, tenant, name string, n int) ([]*cloud.StackEvent, error) {
	evs, err := c.svc.Stacks.Events(ctx, s.actor, tenant, name, 0, stackEventsFirstRead)
	if err != nil {
		return nil, err
	}
	if len(evs) < stackEventsFirstRead {
		return evs[max(0, len(evs)-n):], nil
	}
	full := func(after int64) (bool, error) {
		page, err := c.svc.Stacks.Events(ctx, s.actor, tenant, name, after, n)
		return len(page) == n, err
	}
	// At least n events follow lo; fewer follow hi.
	lo, hi := evs[len(evs)-1-n].ID, evs[len(evs)-1].ID
	for step := int64(stackEventsFirstRead); ; step *= 2 {
		ok, err := full(hi)
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		if hi > math.MaxInt64-step {
			return nil, cloud.Errorf(cloud.Internal, "stack %s: event IDs out of range", name)
		}
		lo, hi = hi, hi+step
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		ok, err := full(mid)
		if err != nil {
			return nil, err
		}
		if ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	return c.svc.Stacks.Events(ctx, s.actor, tenant, name, lo, n)
}

func (c *Console) destroyStack(w http.ResponseWriter, r *http.Request, s *session) error {
	tenant, name := stackTenant(r, s), r.PathValue("name")
	if _, err := c.svc.Stacks.Destroy(r.Context(), s.actor, tenant, name); err != nil {
		return err
	}
	http.Redirect(w, r, stackURL(name, tenant), http.StatusSeeOther)
	return nil
}

// planLine is one action's count in a plan's summary.
type planLine struct {
	N    int
	What string
}

// planActions is the order a plan's summary is told in, and how.
var planActions = []struct {
	action stack.Action
	what   string
}{
	{stack.ActionCreate, "to create"}, {stack.ActionUpdate, "to update in place"}, {stack.ActionReplace, "to replace"},
	{stack.ActionStart, "to start"}, {stack.ActionDelete, "to delete"}, {stack.ActionRetain, "to retain (left alive)"},
	{stack.ActionNone, "unchanged"},
}

// planStack runs the plan form: what applying the template would change,
// cost per hour and place. It writes nothing; applying stays with the
// CLI and the API. A template or parameter error is shown over the form,
// which keeps what was typed.
func (c *Console) planStack(w http.ResponseWriter, r *http.Request, s *session) error {
	form := map[string]string{"name": strings.TrimSpace(r.PostFormValue("name")), "template": r.PostFormValue("template"),
		"params": r.PostFormValue("params"), "tenant": stackTenant(r, s)}
	data := map[string]any{"Form": form}
	fail := func(err error) error {
		if cloud.ErrorCode(err) != cloud.Invalid {
			return err
		}
		data["PlanError"] = strings.TrimPrefix(err.Error(), string(cloud.Invalid)+": ")
		return c.renderStacks(w, r, s, http.StatusBadRequest, data)
	}
	params, err := stackParams(form["params"])
	if err != nil {
		return fail(err)
	}
	p, err := c.svc.Stacks.Plan(r.Context(), s.actor, api.StackRequest{Tenant: form["tenant"], Name: form["name"],
		Template: form["template"], Parameters: params})
	if err != nil {
		return fail(err)
	}
	var summary []planLine
	for _, a := range planActions {
		if n := p.Summary[a.action]; n > 0 {
			summary = append(summary, planLine{n, a.what})
		}
	}
	data["Plan"], data["Summary"] = p, summary
	return c.renderStacks(w, r, s, http.StatusOK, data)
}

// stackParams parses the plan form's parameters: one KEY=VALUE a line, as
// `gpucloud stacks plan --param` takes them.
func stackParams(text string) (map[string]string, error) {
	out := map[string]string{}
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, &cloud.Error{Code: cloud.Invalid, Message: "parameters: line " + strconv.Itoa(i+1) + ": want KEY=VALUE, got " + strconv.Quote(line),
				Details: map[string]any{"field": "parameters"}}
		}
		if _, dup := out[k]; dup {
			return nil, &cloud.Error{Code: cloud.Invalid, Message: "parameters: " + k + " is given twice", Details: map[string]any{"field": "parameters"}}
		}
		out[k] = v
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}
