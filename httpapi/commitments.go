package httpapi

import (
	"net/http"

	"github.com/gpucloud/gpucloud/api"
)

// createCommitment handles POST /v1/commitments: a reservation or a
// retainer whose fees are fixed now from the on-demand price in force
// (service.Commitments.Create). With an Idempotency-Key, a retry answers
// the commitment the first call made, with 200; the same key with a
// request that differs in any field is a conflict naming the fields.
func (s *handlers) createCommitment(w http.ResponseWriter, r *http.Request, p principal) error {
	var req api.CreateCommitmentRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	tenant, err := bodyOrQueryTenant(r, req.Tenant)
	if err != nil {
		return err
	}
	req.Tenant = tenant
	out, created, err := s.svc.Commitments.Create(r.Context(), p.actor(), req, r.Header.Get("Idempotency-Key"))
	if err != nil {
		return err
	}
	writeCreated(w, created, "/v1/commitments/"+out.ID, out)
	return nil
}

// listCommitments handles GET /v1/commitments: the tenant's (admins:
// every tenant's, or ?tenant's).
func (s *handlers) listCommitments(w http.ResponseWriter, r *http.Request, p principal) error {
	cs, err := s.svc.Commitments.List(r.Context(), p.actor(), r.URL.Query().Get("tenant"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.CommitmentList{Commitments: cs})
	return nil
}

// getCommitment handles GET /v1/commitments/{id}; another tenant's answers
// like a missing one.
func (s *handlers) getCommitment(w http.ResponseWriter, r *http.Request, p principal) error {
	c, err := s.svc.Commitments.Get(r.Context(), p.actor(), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, c)
	return nil
}
