package httpapi

import (
	"net/http"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/service"
)

func (s *handlers) stopInstance(w http.ResponseWriter, r *http.Request, p principal) error {
	return s.act(w, r, p, service.Stop)
}

func (s *handlers) startInstance(w http.ResponseWriter, r *http.Request, p principal) error {
	return s.act(w, r, p, service.Start)
}

func (s *handlers) terminateInstance(w http.ResponseWriter, r *http.Request, p principal) error {
	return s.act(w, r, p, service.Terminate)
}

// act applies a lifecycle action to the instance of the path (see
// service.Instances.Act); an optional If-Match pins the version the caller
// read.
func (s *handlers) act(w http.ResponseWriter, r *http.Request, p principal, a service.Action) error {
	want, err := ifMatch(r)
	if err != nil {
		return err
	}
	out, err := s.svc.Instances.Act(r.Context(), p.actor(), r.PathValue("id"), a, want)
	if err != nil {
		return err
	}
	w.Header().Set("ETag", api.ETag(out.Version))
	writeJSON(w, http.StatusOK, out)
	return nil
}
