package httpapi

import (
	"net/http"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
)

// createPlacementGroup handles POST /v1/placement-groups
// (service.PlacementGroups.Create): 201 with the group's Location, or 200
// with the group a retry under the same Idempotency-Key answers.
func (s *handlers) createPlacementGroup(w http.ResponseWriter, r *http.Request, p principal) error {
	var req api.CreatePlacementGroupRequest
	return answerCreate(w, r, p, &req, &req.Tenant, s.svc.Placement.Create,
		func(v *cloud.PlacementGroup) string { return "/v1/placement-groups/" + v.ID })
}

// listPlacementGroups handles GET /v1/placement-groups.
func (s *handlers) listPlacementGroups(w http.ResponseWriter, r *http.Request, p principal) error {
	gs, err := s.svc.Placement.List(r.Context(), p.actor(), r.URL.Query().Get("tenant"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.PlacementGroupList{PlacementGroups: gs})
	return nil
}

// getPlacementGroup handles GET /v1/placement-groups/{id}.
func (s *handlers) getPlacementGroup(w http.ResponseWriter, r *http.Request, p principal) error {
	return answerByID(w, r, p, s.svc.Placement.Get)
}

// deletePlacementGroup handles DELETE /v1/placement-groups/{id}: 204, or
// 409 while an instance that is not terminated is in it.
func (s *handlers) deletePlacementGroup(w http.ResponseWriter, r *http.Request, p principal) error {
	if err := s.svc.Placement.Delete(r.Context(), p.actor(), r.PathValue("id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
