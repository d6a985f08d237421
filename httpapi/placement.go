package httpapi

import (
	"net/http"

	"github.com/gpucloud/gpucloud/api"
)

// createPlacementGroup handles POST /v1/placement-groups
// (service.PlacementGroups.Create): 201 with the group's Location, or 200
// with the group a retry under the same Idempotency-Key answers.
func (s *handlers) createPlacementGroup(w http.ResponseWriter, r *http.Request, p principal) error {
	var req api.CreatePlacementGroupRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	tenant, err := bodyOrQueryTenant(r, req.Tenant)
	if err != nil {
		return err
	}
	req.Tenant = tenant
	g, created, err := s.svc.Placement.Create(r.Context(), p.actor(), req, r.Header.Get("Idempotency-Key"))
	if err != nil {
		return err
	}
	writeCreated(w, created, "/v1/placement-groups/"+g.ID, g)
	return nil
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
	g, err := s.svc.Placement.Get(r.Context(), p.actor(), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, g)
	return nil
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
