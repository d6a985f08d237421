package httpapi

import (
	"net/http"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
)

// allocateAddress handles POST /v1/addresses (service.Addresses.Allocate):
// 201 with the new address's Location, or 200 with the address a retry
// under the same Idempotency-Key answers.
func (s *handlers) allocateAddress(w http.ResponseWriter, r *http.Request, p principal) error {
	var req api.AllocateAddressRequest
	return answerCreate(w, r, p, &req, &req.Tenant, s.svc.Addresses.Allocate,
		func(v *cloud.Address) string { return "/v1/addresses/" + v.ID })
}

// bodyOrQueryTenant is the tenant a create asks for, in its body or as
// ?tenant; the two must agree when both are given.
func bodyOrQueryTenant(r *http.Request, body string) (string, error) {
	if q := r.URL.Query().Get("tenant"); q != "" {
		if body != "" && body != q {
			return "", service.Field("tenant", "the body says %s and ?tenant says %s", service.Quote(body), service.Quote(q))
		}
		return q, nil
	}
	return body, nil
}

// listAddresses handles GET /v1/addresses: the tenant's unreleased
// addresses (admins: every tenant's, or ?tenant's); ?released=true adds the
// released ones.
func (s *handlers) listAddresses(w http.ResponseWriter, r *http.Request, p principal) error {
	q := r.URL.Query()
	released := false
	switch q.Get("released") {
	case "", "false":
	case "true":
		released = true
	default:
		return service.Field("released", "want true or false, got %s", service.Quote(q.Get("released")))
	}
	as, err := s.svc.Addresses.List(r.Context(), p.actor(), q.Get("tenant"), released)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.AddressList{Addresses: as})
	return nil
}

// getAddress handles GET /v1/addresses/{id} (service.Addresses.Get): the
// address, released or not; another tenant's answers like a missing one.
func (s *handlers) getAddress(w http.ResponseWriter, r *http.Request, p principal) error {
	return answerByID(w, r, p, s.svc.Addresses.Get)
}

// associateAddress handles POST /v1/addresses/{id}/associate
// (service.Addresses.Associate).
func (s *handlers) associateAddress(w http.ResponseWriter, r *http.Request, p principal) error {
	var req api.AssociateAddressRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	a, err := s.svc.Addresses.Associate(r.Context(), p.actor(), r.PathValue("id"), req.InstanceID)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, a)
	return nil
}

// disassociateAddress handles POST /v1/addresses/{id}/disassociate
// (service.Addresses.Disassociate).
func (s *handlers) disassociateAddress(w http.ResponseWriter, r *http.Request, p principal) error {
	return answerByID(w, r, p, s.svc.Addresses.Disassociate)
}

// releaseAddress handles DELETE /v1/addresses/{id}
// (service.Addresses.Release).
func (s *handlers) releaseAddress(w http.ResponseWriter, r *http.Request, p principal) error {
	return answerByID(w, r, p, s.svc.Addresses.Release)
}
