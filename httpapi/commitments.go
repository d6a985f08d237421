package httpapi

import (
	"net/http"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
)

// createCommitment handles POST /v1/commitments: a reservation or a
// retainer whose fees are fixed now from the on-demand price in force
// (service.Commitments.Create). With an Idempotency-Key, a retry answers
// the commitment the first call made, with 200; the same key with a
// request that differs in any field is a conflict naming the fields.
func (s *handlers) createCommitment(w http.ResponseWriter, r *http.Request, p principal) error {
	var req api.CreateCommitmentRequest
	return answerCreate(w, r, p, &req, &req.Tenant, s.svc.Commitments.Create,
		func(v *cloud.Commitment) string { return "/v1/commitments/" + v.ID })
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
	return answerByID(w, r, p, s.svc.Commitments.Get)
}
