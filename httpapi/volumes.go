package httpapi

import (
	"net/http"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
)

// createVolume handles POST /v1/volumes (service.Volumes.Create): 201 with
// the new volume's Location, or 200 with the volume a retry under the same
// Idempotency-Key answers.
func (s *handlers) createVolume(w http.ResponseWriter, r *http.Request, p principal) error {
	var req api.CreateVolumeRequest
	return answerCreate(w, r, p, &req, &req.Tenant, s.svc.Volumes.Create,
		func(v *cloud.Volume) string { return "/v1/volumes/" + v.ID })
}

// listVolumes handles GET /v1/volumes: the tenant's volumes; admins every
// tenant's, or one tenant's with ?tenant.
func (s *handlers) listVolumes(w http.ResponseWriter, r *http.Request, p principal) error {
	vs, err := s.svc.Volumes.List(r.Context(), p.actor(), r.URL.Query().Get("tenant"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.VolumeList{Volumes: vs})
	return nil
}

// getVolume handles GET /v1/volumes/{id}.
func (s *handlers) getVolume(w http.ResponseWriter, r *http.Request, p principal) error {
	return answerByID(w, r, p, s.svc.Volumes.Get)
}

// attachVolume handles POST /v1/volumes/{id}/attach
// (service.Volumes.Attach).
func (s *handlers) attachVolume(w http.ResponseWriter, r *http.Request, p principal) error {
	var req api.AttachVolumeRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	v, err := s.svc.Volumes.Attach(r.Context(), p.actor(), r.PathValue("id"), req.InstanceID)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, v)
	return nil
}

// detachVolume handles POST /v1/volumes/{id}/detach
// (service.Volumes.Detach).
func (s *handlers) detachVolume(w http.ResponseWriter, r *http.Request, p principal) error {
	return answerByID(w, r, p, s.svc.Volumes.Detach)
}

// deleteVolume handles DELETE /v1/volumes/{id} (service.Volumes.Delete).
func (s *handlers) deleteVolume(w http.ResponseWriter, r *http.Request, p principal) error {
	return answerByID(w, r, p, s.svc.Volumes.Delete)
}
