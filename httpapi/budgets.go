package httpapi

import (
	"net/http"

	"github.com/gpucloud/gpucloud/api"
)

// putBudget handles PUT /v1/budget: sets the monthly budget of the
// caller's tenant (admins: ?tenant's, else their own) through
// service.Billing.PutBudget. Budgets alert when spending crosses a
// threshold; they never stop anything.
func (s *handlers) putBudget(w http.ResponseWriter, r *http.Request, p principal) error {
	var spec api.BudgetSpec
	if err := decodeMoneyBody(w, r, &spec, "amount"); err != nil {
		return err
	}
	st, err := s.svc.Billing.PutBudget(r.Context(), p.actor(), r.URL.Query().Get("tenant"), spec)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}

// getBudget handles GET /v1/budget: the budget of the caller's tenant
// (admins: ?tenant's, else their own), null when none is set, with the
// spending of the current month rated live and this month's alerts.
func (s *handlers) getBudget(w http.ResponseWriter, r *http.Request, p principal) error {
	st, err := s.svc.Billing.Budget(r.Context(), p.actor(), r.URL.Query().Get("tenant"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}
