package httpapi

import (
	"context"
	"encoding/csv"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/billing"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
)

// runFor runs an l4.1x instance of acme at $1.00 an hour for d, from the
// env's clock on, and returns it.
func (e *env) runFor(d time.Duration) *cloud.Instance {
	e.t.Helper()
	e.addPrice("l4.1x", "", "1.00", e.clock.Now())
	in := e.mustCreate(e.acme, "l4.1x")
	e.move(in.ID, cloud.Running, "zone-a")
	e.clock.Advance(d)
	return in
}

func TestInvoices(t *testing.T) { onBothStores(t, testInvoices) }

func testInvoices(t *testing.T, e *env) {
	e.withPrices()
	ctx := context.Background()
	in := e.runFor(2 * time.Hour)

	invs, err := e.acme.Invoices(ctx, client.InvoicesOptions{})
	if err != nil || len(invs) != 1 {
		t.Fatalf("acme invoices = %v, %v", invs, err)
	}
	inv := invs[0]
	if inv.TenantID != e.acmeID || inv.Month != "2025-03" || inv.Final || len(inv.Lines) != 1 || inv.Total != money.MustParse("2") ||
		!inv.AsOf.Equal(e.clock.Now()) {
		t.Fatalf("invoice = %+v", inv)
	}
	l := inv.Lines[0]
	if l.Category != billing.CategoryCompute || l.Offering != "l4.1x" || l.Zone != "zone-a" || l.Quantity != 7200 ||
		l.Unit != billing.UnitSecond || l.UnitPrice != money.MustParse("1") || l.Amount != money.MustParse("2") {
		t.Errorf("line = %+v", l)
	}
	// Amounts travel as decimal strings.
	code, _, body := e.raw("GET", "/v1/invoices?month=2025-03", e.acmeToken, nil, nil)
	if code != http.StatusOK || !strings.Contains(string(body), `"total":"2.00"`) || !strings.Contains(string(body), `"quantity":7200`) {
		t.Errorf("invoice JSON: %d %s", code, body)
	}

	// CSV, by ?format or by Accept.
	for _, h := range []struct {
		q      string
		header map[string]string
	}{{"?format=csv", nil}, {"", map[string]string{"Accept": "text/csv"}}} {
		code, hdr, body := e.raw("GET", "/v1/invoices"+h.q, e.acmeToken, nil, h.header)
		if code != http.StatusOK || !strings.HasPrefix(hdr.Get("Content-Type"), "text/csv") {
			t.Fatalf("CSV%s: %d %s %s", h.q, code, hdr.Get("Content-Type"), body)
		}
		rows, err := csv.NewReader(strings.NewReader(string(body))).ReadAll()
		if err != nil || len(rows) != 3 {
			t.Fatalf("CSV rows = %v, %v", rows, err)
		}
		if rows[0][0] != "tenant_id" || rows[1][2] != "compute" || rows[1][4] != "l4.1x" || rows[1][8] != "7200" ||
			rows[1][11] != "2.00" || rows[2][2] != "total" || rows[2][11] != "2.00" {
			t.Errorf("CSV = %v", rows)
		}
	}
	csvBody, err := e.acme.InvoicesCSV(ctx, client.InvoicesOptions{Month: "2025-03"})
	if err != nil || !strings.Contains(string(csvBody), e.acmeID+",2025-03,compute") {
		t.Errorf("InvoicesCSV = %s, %v", csvBody, err)
	}

	// Admins: every tenant with charges, or one tenant (even without).
	if all, err := e.admin.Invoices(ctx, client.InvoicesOptions{}); err != nil || len(all) != 1 || all[0].TenantID != e.acmeID {
		t.Errorf("admin invoices = %v, %v", all, err)
	}
	if g, err := e.admin.Invoices(ctx, client.InvoicesOptions{Tenant: e.globexID}); err != nil || len(g) != 1 || g[0].Total != 0 || len(g[0].Lines) != 0 {
		t.Errorf("admin, globex's invoice = %+v, %v", g, err)
	}
	if g, err := e.globex.Invoices(ctx, client.InvoicesOptions{}); err != nil || len(g) != 1 || g[0].TenantID != e.globexID || g[0].Total != 0 {
		t.Errorf("globex invoice = %+v, %v", g, err)
	}
	_, err = e.globex.Invoices(ctx, client.InvoicesOptions{Tenant: e.acmeID})
	wantCode(t, err, cloud.NotFound)
	_, err = e.globex.InvoicesCSV(ctx, client.InvoicesOptions{Tenant: e.acmeID})
	wantCode(t, err, cloud.NotFound)

	// A past month is final; a stopped instance stops accruing.
	if feb, err := e.acme.Invoices(ctx, client.InvoicesOptions{Month: "2025-02"}); err != nil || len(feb) != 1 || !feb[0].Final || feb[0].Total != 0 {
		t.Errorf("February = %+v, %v", feb, err)
	}
	e.move(in.ID, cloud.Stopped, "")
	e.clock.Advance(time.Hour)
	if invs, err := e.acme.Invoices(ctx, client.InvoicesOptions{}); err != nil || invs[0].Total != money.MustParse("2") {
		t.Errorf("after stop = %+v, %v", invs, err)
	}

	before := e.billingCounts()
	for _, q := range []string{"?month=2025-13", "?month=March", "?format=xml"} {
		code, _, body := e.raw("GET", "/v1/invoices"+q, e.acmeToken, nil, nil)
		if eb := decodeErr(t, body); code != http.StatusBadRequest || eb.Code != cloud.Invalid {
			t.Errorf("GET /v1/invoices%s = %d %s", q, code, body)
		}
	}
	e.billingUnchanged(before, "bad invoice queries")
}

func TestInvoiceWithoutPrice(t *testing.T) { onBothStores(t, testInvoiceWithoutPrice) }

func testInvoiceWithoutPrice(t *testing.T, e *env) {
	ctx := context.Background()
	in := e.mustCreate(e.acme, "l4.1x")
	e.move(in.ID, cloud.Running, "zone-a")
	e.clock.Advance(time.Hour)
	_, err := e.acme.Invoices(ctx, client.InvoicesOptions{})
	if ce := wantCode(t, err, cloud.Conflict); !strings.Contains(ce.Message, "l4.1x") || !strings.Contains(ce.Message, "POST /v1/prices") {
		t.Errorf("no price: %v", ce)
	}
}
