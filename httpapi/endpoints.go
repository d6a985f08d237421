package httpapi

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/gateway"
	"github.com/gpucloud/gpucloud/service"
)

// Serverless endpoints (docs/ENDPOINTS.md): the endpoint's routes call
// service.Endpoints; run, runsync and the HTTP mode's proxy go through
// this replica's gateway. {id} is an endpoint's ID or its name.

// maxRunSyncWait bounds runsync's wait (?wait=, seconds).
const (
	defaultRunSyncWait = 90 * time.Second
	maxRunSyncWait     = 300 * time.Second
)

func (s *handlers) createEndpoint(w http.ResponseWriter, r *http.Request, p principal) error {
	var req api.CreateEndpointRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	tenant, err := bodyOrQueryTenant(r, req.Tenant)
	if err != nil {
		return err
	}
	req.Tenant = tenant
	out, created, err := s.svc.Endpoints.Create(r.Context(), p.actor(), req, r.Header.Get("Idempotency-Key"))
	if err != nil {
		return err
	}
	w.Header().Set("ETag", api.ETag(out.Version))
	writeCreated(w, created, "/v1/endpoints/"+out.ID, out)
	return nil
}

func (s *handlers) listEndpoints(w http.ResponseWriter, r *http.Request, p principal) error {
	all := r.URL.Query().Get("all") == "true" || r.URL.Query().Get("all") == "1"
	es, err := s.svc.Endpoints.List(r.Context(), p.actor(), r.URL.Query().Get("tenant"), all)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.ListEndpointsResponse{Endpoints: es})
	return nil
}

func (s *handlers) getEndpoint(w http.ResponseWriter, r *http.Request, p principal) error {
	d, err := s.svc.Endpoints.Describe(r.Context(), p.actor(), r.PathValue("id"))
	if err != nil {
		return err
	}
	if s.gateway != nil {
		s.gateway.Describe(d)
	}
	w.Header().Set("ETag", api.ETag(d.Version))
	writeJSON(w, http.StatusOK, d)
	return nil
}

func (s *handlers) updateEndpoint(w http.ResponseWriter, r *http.Request, p principal) error {
	want, err := ifMatch(r)
	if err != nil {
		return err
	}
	var req api.UpdateEndpointRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	out, err := s.svc.Endpoints.Update(r.Context(), p.actor(), r.PathValue("id"), req, want)
	if err != nil {
		return err
	}
	w.Header().Set("ETag", api.ETag(out.Version))
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *handlers) deleteEndpoint(w http.ResponseWriter, r *http.Request, p principal) error {
	out, err := s.svc.Endpoints.Delete(r.Context(), p.actor(), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// runJob handles POST /v1/endpoints/{id}/run: the job is queued and
// answered at once (202).
func (s *handlers) runJob(w http.ResponseWriter, r *http.Request, p principal) error {
	j, created, err := s.submit(w, r, p)
	if err != nil {
		return err
	}
	status := http.StatusAccepted
	if !created {
		status = http.StatusOK
	}
	w.Header().Set("Location", "/v1/endpoints/"+r.PathValue("id")+"/status/"+j.ID)
	writeJSON(w, status, j)
	return nil
}

func (s *handlers) submit(w http.ResponseWriter, r *http.Request, p principal) (*cloud.Job, bool, error) {
	var req api.RunJobRequest
	if err := decodeBodyLimit(w, r, &req, service.MaxJobInput+4096); err != nil {
		return nil, false, err
	}
	j, created, err := s.svc.Endpoints.Submit(r.Context(), p.actor(), r.PathValue("id"), req.Input, r.Header.Get("Idempotency-Key"))
	if err == nil && s.gateway != nil {
		s.gateway.Wake(j.EndpointID)
	}
	return j, created, err
}

// runJobSync handles POST /v1/endpoints/{id}/runsync: the job is queued,
// and the answer waits for it up to ?wait= seconds (90 by default, 300
// at most): 200 with the job finished, or 202 with it still queued or
// running (poll its status).
func (s *handlers) runJobSync(w http.ResponseWriter, r *http.Request, p principal) error {
	wait := defaultRunSyncWait
	if v := r.URL.Query().Get("wait"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || time.Duration(n)*time.Second > maxRunSyncWait {
			return service.Field("wait", "want whole seconds from 0 to %d; got %s", int(maxRunSyncWait.Seconds()), service.Quote(v))
		}
		wait = time.Duration(n) * time.Second
	}
	j, _, err := s.submit(w, r, p)
	if err != nil {
		return err
	}
	clearDeadlines(w)
	if s.gateway != nil && !j.State.Finished() {
		ref := r.PathValue("id")
		got, err := s.gateway.WaitJob(r.Context(), j.ID, wait, func(ctx context.Context) (*cloud.Job, error) {
			return s.svc.Endpoints.Job(ctx, p.actor(), ref, j.ID)
		})
		if err != nil {
			return err
		}
		j = got
	}
	status := http.StatusOK
	if !j.State.Finished() {
		status = http.StatusAccepted
	}
	writeJSON(w, status, j)
	return nil
}

func (s *handlers) jobStatus(w http.ResponseWriter, r *http.Request, p principal) error {
	j, err := s.svc.Endpoints.Job(r.Context(), p.actor(), r.PathValue("id"), r.PathValue("job"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, j)
	return nil
}

func (s *handlers) cancelJob(w http.ResponseWriter, r *http.Request, p principal) error {
	j, err := s.svc.Endpoints.Cancel(r.Context(), p.actor(), r.PathValue("id"), r.PathValue("job"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, j)
	return nil
}

// endpointHTTPPath is the HTTP mode's route, under every method the
// published ports take.
const endpointHTTPPath = "/v1/endpoints/{id}/http/{path...}"

// endpointHTTP proxies a request to an HTTP-mode endpoint's worker
// (gateway.Serve): the tenant's credentials never reach the worker.
func (s *handlers) endpointHTTP(w http.ResponseWriter, r *http.Request, p principal) error {
	ref := r.PathValue("id")
	// The gateway's table first: a routed request reads no row.
	var e *cloud.Endpoint
	ok := false
	if s.gateway != nil {
		e, ok = s.gateway.Endpoint(p.actor(), ref)
		// An endpoint key's other endpoint is looked up by the service,
		// which answers it not_found.
		ok = ok && p.calls(e)
	}
	if !ok {
		var err error
		if e, err = s.svc.Endpoints.Get(r.Context(), p.actor(), ref); err != nil {
			return err
		}
	}
	if e.State != cloud.EndpointActive {
		return &cloud.Error{Code: cloud.Conflict, Message: "endpoint " + e.Name + " is " + string(e.State) + "; it takes no requests",
			Details: map[string]any{"state": e.State}}
	}
	if e.Spec.Mode != cloud.EndpointHTTP {
		return &cloud.Error{Code: cloud.Conflict, Message: "endpoint " + e.Name + " is in queue mode: submit jobs with POST /v1/endpoints/" + ref + "/run or /runsync",
			Details: map[string]any{"mode": e.Spec.Mode}}
	}
	if s.gateway == nil {
		return &cloud.Error{Code: cloud.Unavailable, Message: "this server runs no endpoint gateway"}
	}
	clearDeadlines(w)
	err := s.gateway.Serve(w, r, e, "/"+r.PathValue("path"), gateway.Prefix(ref), func(h http.Header) {
		h.Del("Authorization")
		stripCookies(h)
	})
	var busy *gateway.BusyError
	if errors.As(err, &busy) {
		w.Header().Set("Retry-After", strconv.Itoa(busy.RetryAfter))
		return &statusError{status: http.StatusServiceUnavailable, err: &cloud.Error{Code: cloud.Unavailable, Message: busy.Error(),
			Details: map[string]any{"retry_after_seconds": busy.RetryAfter}}}
	}
	return err
}

// Endpoint keys (docs/ENDPOINTS.md, "Endpoint keys").

func (s *handlers) createEndpointKey(w http.ResponseWriter, r *http.Request, p principal) error {
	var req api.CreateEndpointKeyRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	ref := r.PathValue("id")
	out, created, err := s.svc.Endpoints.CreateKey(r.Context(), p.actor(), ref, req, r.Header.Get("Idempotency-Key"))
	if err != nil {
		return err
	}
	writeCreated(w, created, "/v1/endpoints/"+out.Key.EndpointID+"/keys/"+out.Key.ID, out)
	return nil
}

func (s *handlers) listEndpointKeys(w http.ResponseWriter, r *http.Request, p principal) error {
	all := r.URL.Query().Get("all") == "true" || r.URL.Query().Get("all") == "1"
	ks, err := s.svc.Endpoints.Keys(r.Context(), p.actor(), r.PathValue("id"), all)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.ListEndpointKeysResponse{Keys: ks})
	return nil
}

// revokeEndpointKey revokes a key: this server forgets the keys it
// trusted at once; another replica within its key cache time (a second).
func (s *handlers) revokeEndpointKey(w http.ResponseWriter, r *http.Request, p principal) error {
	k, err := s.svc.Endpoints.RevokeKey(r.Context(), p.actor(), r.PathValue("id"), r.PathValue("key"))
	if err != nil {
		return err
	}
	s.keys.clear()
	writeJSON(w, http.StatusOK, k)
	return nil
}
