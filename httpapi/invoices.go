package httpapi

import (
	"bytes"
	"mime"
	"net/http"
	"strings"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/billing"
	"github.com/gpucloud/gpucloud/service"
)

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
		return false, service.Field("format", "unknown format %s (want json or csv)", service.Quote(f))
	}
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		if mt, _, err := mime.ParseMediaType(strings.TrimSpace(part)); err == nil && mt == "text/csv" {
			return true, nil
		}
	}
	return false, nil
}

// listInvoices handles GET /v1/invoices: the invoices of ?month (default
// the current month, UTC), rated live as of now, so that the current
// month's is a running total (final is false until the month is over).
// Members get their tenant's; admins one tenant's with ?tenant, else every
// tenant's. ?format=csv, or Accept: text/csv, answers CSV.
func (s *handlers) listInvoices(w http.ResponseWriter, r *http.Request, p principal) error {
	period, err := s.svc.Billing.Month(r.URL.Query().Get("month"))
	if err != nil {
		return err
	}
	asCSV, err := wantsCSV(r)
	if err != nil {
		return err
	}
	invs, err := s.svc.Billing.Invoices(r.Context(), p.actor(), r.URL.Query().Get("tenant"), period)
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
	writeJSON(w, http.StatusOK, api.InvoiceList[*billing.Invoice]{Invoices: invs})
	return nil
}
