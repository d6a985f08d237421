package httpapi

import (
	"net/http"
	"net/url"
	"strconv"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
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
	req.Tenant = tenant
	plan, err := s.svc.Stacks.Plan(r.Context(), p.actor(), req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, plan)
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
	req.Tenant = tenant
	st, err := s.svc.Stacks.Apply(r.Context(), p.actor(), r.PathValue("name"), req)
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
	writeJSON(w, http.StatusOK, v)
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
// oldest first, paged by ?after and ?limit. After a destroy the name finds
// the destroyed stack's (see service.Stacks.Events).
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
	writeJSON(w, http.StatusOK, api.StackDriftReport{Drift: ds, InSync: len(ds) == 0})
	return nil
}

// stackPath is a stack's URL path.
func stackPath(name string) string { return "/v1/stacks/" + url.PathEscape(name) }
