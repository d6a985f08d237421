package httpapi

import (
	"context"
	"net/http"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
)

// The operator's host routes. The rules are service.Hosts'; the handlers
// decode, call it, and answer.

// Event kinds of host actions (service.Hosts writes them).
const (
	EventHostCordoned   = service.EventHostCordoned
	EventHostUncordoned = service.EventHostUncordoned
)

// listHosts handles GET /v1/hosts (admin).
func (s *handlers) listHosts(w http.ResponseWriter, r *http.Request, p principal) error {
	hs, err := s.svc.Hosts.List(r.Context(), p.actor())
	if err != nil {
		return err
	}
	if hs == nil {
		hs = []*cloud.Host{}
	}
	writeJSON(w, http.StatusOK, api.HostList{Hosts: hs})
	return nil
}

// cordonHost handles POST /v1/hosts/{id}/cordon (admin): the host keeps
// what it runs and takes nothing new. An optional If-Match pins the
// version the operator saw.
func (s *handlers) cordonHost(w http.ResponseWriter, r *http.Request, p principal) error {
	return s.setHostState(w, r, p, s.svc.Hosts.Cordon)
}

// uncordonHost handles POST /v1/hosts/{id}/uncordon (admin): a cordoned
// host becomes schedulable again. An optional If-Match pins the version
// the operator saw.
func (s *handlers) uncordonHost(w http.ResponseWriter, r *http.Request, p principal) error {
	return s.setHostState(w, r, p, s.svc.Hosts.Uncordon)
}

// setHostState answers a host state change made by change, with the
// host's new version as its ETag.
func (s *handlers) setHostState(w http.ResponseWriter, r *http.Request, p principal,
	change func(ctx context.Context, a service.Actor, id string, ifMatch int64) (*cloud.Host, error)) error {
	want, err := ifMatch(r)
	if err != nil {
		return err
	}
	h, err := change(r.Context(), p.actor(), r.PathValue("id"), want)
	if err != nil {
		return err
	}
	w.Header().Set("ETag", api.ETag(h.Version))
	writeJSON(w, http.StatusOK, h)
	return nil
}

// drainHost handles POST /v1/hosts/{id}/drain (admin): the host is
// cordoned and every instance placed or running there is asked to stop.
// The answer lists the instances it asked to stop.
func (s *handlers) drainHost(w http.ResponseWriter, r *http.Request, p principal) error {
	id := r.PathValue("id")
	stopping, err := s.svc.Hosts.Drain(r.Context(), p.actor(), id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.DrainResult{Host: id, Stopping: stopping})
	return nil
}

// removeHost handles POST /v1/hosts/{id}/remove (admin): the host's agent
// credentials are revoked (service.Hosts.Remove), so that its ID may join
// again.
func (s *handlers) removeHost(w http.ResponseWriter, r *http.Request, p principal) error {
	id := r.PathValue("id")
	n, err := s.svc.Hosts.Remove(r.Context(), p.actor(), id)
	if err != nil {
		return err
	}
	// The host's credentials were revoked.
	s.tokens.dropHost(id)
	writeJSON(w, http.StatusOK, api.RemoveHostResult{Host: id, Revoked: n})
	return nil
}
