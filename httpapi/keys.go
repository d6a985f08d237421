package httpapi

import (
	"net/http"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
)

// importKey handles POST /v1/keys (service.Keys.Import): 201 with the
// key's Location, or 200 with the key a retry under the same
// Idempotency-Key answers.
func (s *handlers) importKey(w http.ResponseWriter, r *http.Request, p principal) error {
	var req api.ImportKeyRequest
	return answerCreate(w, r, p, &req, &req.Tenant, s.svc.Keys.Import,
		func(v *cloud.Key) string { return "/v1/keys/" + v.ID })
}

// listKeys handles GET /v1/keys.
func (s *handlers) listKeys(w http.ResponseWriter, r *http.Request, p principal) error {
	ks, err := s.svc.Keys.List(r.Context(), p.actor(), r.URL.Query().Get("tenant"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.KeyList{Keys: ks})
	return nil
}

// getKey handles GET /v1/keys/{id}.
func (s *handlers) getKey(w http.ResponseWriter, r *http.Request, p principal) error {
	return answerByID(w, r, p, s.svc.Keys.Get)
}

// deleteKey handles DELETE /v1/keys/{id}: 204.
func (s *handlers) deleteKey(w http.ResponseWriter, r *http.Request, p principal) error {
	if err := s.svc.Keys.Delete(r.Context(), p.actor(), r.PathValue("id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
