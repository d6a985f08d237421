package httpapi

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
)

// decodeMoneyBody is decodeBody for bodies with an amount: an amount that
// is not a decimal (money.Parse's error) names its field instead of
// reading as malformed JSON.
func decodeMoneyBody(w http.ResponseWriter, r *http.Request, v any, amountField string) error {
	err := decodeBody(w, r, v)
	var ce *cloud.Error
	if errors.As(err, &ce) && strings.HasPrefix(ce.Message, "malformed JSON: money: ") {
		return service.Field(amountField, "%s; send a decimal string such as \"12.50\" (at most 6 decimals)",
			strings.TrimPrefix(ce.Message, "malformed JSON: money: "))
	}
	return err
}

// listPrices handles GET /v1/prices: every version of the prices that
// match ?kind, ?offering and ?zone, or with ?at (RFC 3339) only the
// versions in force at that time.
func (s *handlers) listPrices(w http.ResponseWriter, r *http.Request, p principal) error {
	q := r.URL.Query()
	pq := service.PriceQuery{Kind: cloud.PriceKind(q.Get("kind")), Offering: q.Get("offering"), Zone: q.Get("zone")}
	if v := q.Get("at"); v != "" {
		var err error
		if pq.At, err = time.Parse(time.RFC3339, v); err != nil {
			return service.Field("at", "%s is not an RFC 3339 time such as 2026-12-01T00:00:00Z", service.Quote(v))
		}
	}
	ps, err := s.svc.Prices.List(r.Context(), p.actor(), pq)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.PriceList{Prices: ps})
	return nil
}

// setPrice handles POST /v1/prices (admin): a new version of a price, in
// force from effective_at (default now) until the next version
// (service.Prices.Set: a version never takes effect in the past). With an
// Idempotency-Key (one key space for every price), a retry answers the
// version the first call added, with 200 instead of 201; the same key with
// a request that differs in any field is a conflict naming the fields.
func (s *handlers) setPrice(w http.ResponseWriter, r *http.Request, p principal) error {
	var req api.SetPriceRequest
	if err := decodeMoneyBody(w, r, &req, "amount"); err != nil {
		return err
	}
	out, created, err := s.svc.Prices.Set(r.Context(), p.actor(), req,
		r.Header.Get("Idempotency-Key"))
	if err != nil {
		return err
	}
	writeCreated(w, created, "", out)
	return nil
}
