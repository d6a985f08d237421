package httpapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/gpucloud/gpucloud/billing"
	"github.com/gpucloud/gpucloud/cloud"
)

// InvoiceList answers GET /v1/invoices.
type InvoiceList struct {
	Invoices []*billing.Invoice `json:"invoices"`
}

// queryMonth parses ?month (YYYY-MM); the current month in UTC when absent.
func queryMonth(r *http.Request, now time.Time) (billing.Period, error) {
	v := r.URL.Query().Get("month")
	if v == "" {
		now = now.UTC()
		return billing.Month(now.Year(), now.Month()), nil
	}
	period, err := billing.ParseMonth(v)
	if err != nil {
		return billing.Period{}, field("month", "%s", strings.TrimPrefix(err.Error(), "billing: "))
	}
	return period, nil
}

// wantsCSV reports whether a request asks for CSV: ?format=csv, or no
// ?format and an Accept header that names text/csv.
func wantsCSV(r *http.Request) (bool, error) {
	switch f := r.URL.Query().Get("format"); f {
	case "csv":
		return true, nil
	case "json":
		return false, nil
	case "":
	default:
		return false, field("format", "unknown format %s (want json or csv)", quote(f))
	}
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		if mt, _, err := mime.ParseMediaType(strings.TrimSpace(part)); err == nil && mt == "text/csv" {
			return true, nil
		}
	}
	return false, nil
}

// rate rates a period for one tenant, or every tenant when tenant is
// empty, as of asOf, and returns the invoices of that tenant (or all).
func rate(ctx context.Context, tx cloud.Tx, tenant string, period billing.Period, asOf time.Time) ([]*billing.Invoice, error) {
	in, err := billing.Load(ctx, tx, tenant, period, asOf)
	if err != nil {
		return nil, err
	}
	res, err := billing.Rate(in)
	if err != nil {
		var missing *billing.MissingPriceError
		if errors.As(err, &missing) {
			// Usage accrued where the price book has a gap: the
			// operator's to fix, and the caller should hear what it is.
			return nil, &cloud.Error{Code: cloud.Conflict,
				Message: "cannot rate " + period.Name() + ": " + strings.TrimPrefix(err.Error(), "billing: ") + "; an admin sets prices with POST /v1/prices",
				Details: map[string]any{"month": period.Name()}}
		}
		return nil, fmt.Errorf("rate %s: %w", period.Name(), err)
	}
	out := []*billing.Invoice{}
	for _, inv := range res.Invoices {
		if inv != nil && (tenant == "" || inv.TenantID == tenant) {
			out = append(out, inv)
		}
	}
	return out, nil
}

// listInvoices handles GET /v1/invoices: the invoices of ?month (default
// the current month, UTC), rated live as of now, so that the current
// month's is a running total (final is false until the month is over).
// Members get their tenant's; admins one tenant's with ?tenant, else every
// tenant's. ?format=csv, or Accept: text/csv, answers CSV.
func (s *api) listInvoices(w http.ResponseWriter, r *http.Request, p principal) error {
	now := s.now()
	period, err := queryMonth(r, now)
	if err != nil {
		return err
	}
	asCSV, err := wantsCSV(r)
	if err != nil {
		return err
	}
	var invs []*billing.Invoice
	err = s.tx(r.Context(), func(tx cloud.Tx) error {
		tenant, err := s.scope(r.Context(), tx, p, r.URL.Query().Get("tenant"), "")
		if err != nil {
			return err
		}
		invs, err = rate(r.Context(), tx, tenant, period, now)
		return err
	})
	if err != nil {
		return err
	}
	if asCSV {
		var buf bytes.Buffer
		if err := billing.WriteCSV(&buf, invs); err != nil {
			return err
		}
		w.Header().Set("Content-Type", "text/csv; charset=utf-8")
		w.Header().Set("Content-Disposition", `attachment; filename="invoices-`+period.Name()+`.csv"`)
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(buf.Bytes())
		return nil
	}
	writeJSON(w, http.StatusOK, InvoiceList{Invoices: invs})
	return nil
}
