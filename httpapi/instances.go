package httpapi

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
)

// createInstance handles POST /v1/instances. With an Idempotency-Key, a
// retry returns the instance the first call created, with 200 instead of
// 201; the same key with a request that differs in any field is a
// conflict naming the fields.
func (s *handlers) createInstance(w http.ResponseWriter, r *http.Request, p principal) error {
	var req api.CreateInstanceRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	tenant, err := bodyOrQueryTenant(r, req.Tenant)
	if err != nil {
		return err
	}
	req.Tenant = tenant
	out, created, err := s.svc.Instances.Create(r.Context(), p.actor(), req, r.Header.Get("Idempotency-Key"))
	if err != nil {
		return err
	}
	w.Header().Set("ETag", api.ETag(out.Version))
	writeCreated(w, created, "/v1/instances/"+out.ID, out)
	return nil
}

// parseStates parses ?state=running,pending.
func parseStates(s string) ([]cloud.State, error) {
	if s == "" {
		return nil, nil
	}
	var out []cloud.State
	for _, part := range strings.Split(s, ",") {
		st := cloud.State(strings.TrimSpace(part))
		if !slices.Contains(service.LiveStates, st) && st != cloud.Terminated {
			return nil, service.Field("state", "unknown state %s (known: pending, scheduled, starting, running, stopping, stopped, failed, lost, terminated)", service.Quote(string(st)))
		}
		out = append(out, st)
	}
	return out, nil
}

// listInstances handles GET /v1/instances. Members list their tenant's;
// admins every tenant's, or one tenant's with ?tenant. ?name selects one
// name (within what the caller may see). Pages are in ID
// order; next is the ?after of the following page.
func (s *handlers) listInstances(w http.ResponseWriter, r *http.Request, p principal) error {
	q := r.URL.Query()
	states, err := parseStates(q.Get("state"))
	if err != nil {
		return err
	}
	limit, err := queryLimit(r)
	if err != nil {
		return err
	}
	ins, next, err := s.svc.Instances.List(r.Context(), p.actor(), service.InstanceQuery{Tenant: q.Get("tenant"),
		States: states, Host: q.Get("host"), Offering: q.Get("offering"), Market: cloud.Market(q.Get("market")),
		Name: q.Get("name"), Limit: limit, After: q.Get("after")})
	if err != nil {
		return err
	}
	out := api.InstanceList{Instances: []*cloud.Instance{}, Next: next}
	out.Instances = append(out.Instances, ins...)
	writeJSON(w, http.StatusOK, out)
	return nil
}

// getInstance handles GET /v1/instances/{id}; the ETag is the version.
func (s *handlers) getInstance(w http.ResponseWriter, r *http.Request, p principal) error {
	in, err := s.svc.Instances.Get(r.Context(), p.actor(), r.PathValue("id"))
	if err != nil {
		return err
	}
	w.Header().Set("ETag", api.ETag(in.Version))
	writeJSON(w, http.StatusOK, in)
	return nil
}

// eventList renders a page of events.
func eventList(evs []*cloud.Event, next int64) api.EventList {
	out := api.EventList{Events: []*cloud.Event{}}
	out.Events = append(out.Events, evs...)
	if next != 0 {
		out.Next = strconv.FormatInt(next, 10)
	}
	return out
}

// eventsFunc reads one page of a resource's events.
type eventsFunc func(ctx context.Context, a service.Actor, id string, after int64, limit int) ([]*cloud.Event, int64, error)

// resourceEvents handles GET /v1/{collection}/{id}/events: one page of
// the events of the resource the path names, as events reads them
// (service's Instances.Events, Volumes.Events, Groups.Events), oldest
// first, paged by ?after and ?limit.
func resourceEvents(events func(s *handlers) eventsFunc) handlerFunc {
	return func(s *handlers, w http.ResponseWriter, r *http.Request, p principal) error {
		limit, err := queryLimit(r)
		if err != nil {
			return err
		}
		after, err := queryAfterInt(r)
		if err != nil {
			return err
		}
		evs, next, err := events(s)(r.Context(), p.actor(), r.PathValue("id"), after, limit)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, eventList(evs, next))
		return nil
	}
}

// listEvents handles GET /v1/events (admin), filtered by ?host, ?tenant
// and ?instance.
func (s *handlers) listEvents(w http.ResponseWriter, r *http.Request, p principal) error {
	limit, err := queryLimit(r)
	if err != nil {
		return err
	}
	after, err := queryAfterInt(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	evs, next, err := s.svc.Instances.EventLog(r.Context(), p.actor(), cloud.EventFilter{TenantID: q.Get("tenant"),
		InstanceID: q.Get("instance"), HostID: q.Get("host"), AfterID: after, Limit: limit})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, eventList(evs, next))
	return nil
}
