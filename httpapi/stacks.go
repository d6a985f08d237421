package httpapi

import (
	"net/http"
	"net/url"
	"strconv"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/stack"
)

// maxStackBodyBytes caps the body of a plan or an apply, which carries a
// template of up to stack.MaxTemplateBytes: JSON escapes a byte as six at
// worst (Go's encoder writes "<" as "\u003c"), and the rest of the body
// has the ordinary limit.
const maxStackBodyBytes = 6*stack.MaxTemplateBytes + maxBodyBytes

// planStack handles POST /v1/stacks/plan (service.Stacks.Plan): what an
// apply of the template would change, cost and place; it writes nothing.
func (s *handlers) planStack(w http.ResponseWriter, r *http.Request, p principal) error {
	var req api.StackRequest
	if err := decodeBodyLimit(w, r, &req, maxStackBodyBytes); err != nil {
		return err
	}
	tenant, err := bodyOrQueryTenant(r, req.Tenant)
	if err != nil {
		return err
	}
	plan, err := s.svc.Stacks.Plan(r.Context(), p.actor(), service.StackRequest{Tenant: tenant, Name: req.Name,
		Template: req.Template, Parameters: req.Parameters})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, stackPlanOf(plan))
	return nil
}

// applyStack handles PUT /v1/stacks/{name} (service.Stacks.Apply): the
// template becomes the stack's wanted state, the stack is created when the
// tenant has none of that name, and the answer is 202 with the stack,
// applying; the stack controller carries the apply out.
func (s *handlers) applyStack(w http.ResponseWriter, r *http.Request, p principal) error {
	var req api.ApplyStackRequest
	if err := decodeBodyLimit(w, r, &req, maxStackBodyBytes); err != nil {
		return err
	}
	tenant, err := bodyOrQueryTenant(r, req.Tenant)
	if err != nil {
		return err
	}
	st, err := s.svc.Stacks.Apply(r.Context(), p.actor(), service.StackRequest{Tenant: tenant, Name: r.PathValue("name"),
		Template: req.Template, Parameters: req.Parameters, KeepOnFailure: req.KeepOnFailure})
	if err != nil {
		return err
	}
	w.Header().Set("Location", stackPath(st.Name))
	writeJSON(w, http.StatusAccepted, st)
	return nil
}

// listStacks handles GET /v1/stacks: the tenant's stacks that are not
// destroyed (admins: every tenant's, or ?tenant's).
func (s *handlers) listStacks(w http.ResponseWriter, r *http.Request, p principal) error {
	sts, err := s.svc.Stacks.List(r.Context(), p.actor(), r.URL.Query().Get("tenant"))
	if err != nil {
		return err
	}
	// A list leaves each stack's template out (up to 1 MiB each): GET
	// /v1/stacks/{name} has it.
	out := api.StackList{Stacks: make([]*cloud.Stack, 0, len(sts))}
	for _, st := range sts {
		c := *st
		c.Template = ""
		out.Stacks = append(out.Stacks, &c)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// getStack handles GET /v1/stacks/{name}: the stack with its resources'
// live status, its outputs and parameters.
func (s *handlers) getStack(w http.ResponseWriter, r *http.Request, p principal) error {
	v, err := s.svc.Stacks.Get(r.Context(), p.actor(), r.URL.Query().Get("tenant"), r.PathValue("name"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, stackViewOf(v))
	return nil
}

// destroyStack handles DELETE /v1/stacks/{name} (service.Stacks.Destroy):
// 202 with the stack, destroying; the stack controller deletes its
// resources, keeping the retained ones.
func (s *handlers) destroyStack(w http.ResponseWriter, r *http.Request, p principal) error {
	st, err := s.svc.Stacks.Destroy(r.Context(), p.actor(), r.URL.Query().Get("tenant"), r.PathValue("name"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusAccepted, st)
	return nil
}

// stackEvents handles GET /v1/stacks/{name}/events: the stack's events,
// oldest first, paged by ?after and ?limit.
func (s *handlers) stackEvents(w http.ResponseWriter, r *http.Request, p principal) error {
	limit, err := queryLimit(r)
	if err != nil {
		return err
	}
	after, err := queryAfterInt(r)
	if err != nil {
		return err
	}
	evs, err := s.svc.Stacks.Events(r.Context(), p.actor(), r.URL.Query().Get("tenant"), r.PathValue("name"), after, limit)
	if err != nil {
		return err
	}
	out := api.StackEventList{Events: []*cloud.StackEvent{}}
	out.Events = append(out.Events, evs...)
	if len(evs) == limit {
		out.Next = strconv.FormatInt(evs[len(evs)-1].ID, 10)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// stackDrift handles GET /v1/stacks/{name}/drift: each difference between
// the stack's last applied state and its live resources.
func (s *handlers) stackDrift(w http.ResponseWriter, r *http.Request, p principal) error {
	ds, err := s.svc.Stacks.Drift(r.Context(), p.actor(), r.URL.Query().Get("tenant"), r.PathValue("name"))
	if err != nil {
		return err
	}
	out := api.StackDriftReport{Drift: make([]api.StackDrift, len(ds)), InSync: len(ds) == 0}
	for i, d := range ds {
		out.Drift[i] = api.StackDrift{Address: d.Address, Type: d.Type, ID: d.ID, Drift: d.Drift, Diffs: d.Diffs}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// stackPath is a stack's URL path.
func stackPath(name string) string { return "/v1/stacks/" + url.PathEscape(name) }

// stackPlanOf is a plan on the wire.
func stackPlanOf(p *service.StackPlan) api.StackPlan {
	out := api.StackPlan{Name: p.Name, Exists: p.Exists, Changes: p.Changes, Summary: p.Summary,
		Cost: api.StackCost{OnDemand: p.Cost.OnDemand, WithSpot: p.Cost.WithSpot,
			Lines: make([]api.StackCostLine, len(p.Cost.Lines)), Assumptions: p.Cost.Assumptions},
		Outputs: p.Outputs, Params: p.Params}
	if out.Changes == nil {
		out.Changes = []*stack.Change{}
	}
	if out.Summary == nil {
		out.Summary = map[stack.Action]int{}
	}
	for i, l := range p.Cost.Lines {
		out.Cost.Lines[i] = api.StackCostLine(l)
	}
	if p.Fit != nil {
		fit := &api.StackFit{Known: p.Fit.Known, Fits: p.Fit.Fits}
		for _, l := range p.Fit.Lines {
			fit.Lines = append(fit.Lines, api.StackFitLine(l))
		}
		out.Fit = fit
	}
	return out
}

// stackViewOf is a stack's view on the wire.
func stackViewOf(v *service.StackView) api.StackView {
	out := api.StackView{Resources: make([]api.StackResource, len(v.Resources)), Outputs: v.Outputs, Params: v.Params}
	if v.Stack != nil {
		out.Stack = *v.Stack
	}
	for i, r := range v.Resources {
		out.Resources[i] = api.StackResource(r)
	}
	return out
}
