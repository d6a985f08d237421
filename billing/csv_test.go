package billing

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
)

func TestWriteCSVAndJSON(t *testing.T) {
	var l ledger
	l.inst("acme", "i-1", "h100.8x", "us-east-1a", od, ts(0), ts(90*time.Minute))
	l.vol("acme", "v-1", 100, ts(0))
	l.inst("beta", "i-2", "h100.1x", "", od, ts(0), ts(10*time.Second))
	// A worker of endpoint echo: a line of its own under the endpoint.
	l.spans(cloud.Usage{TenantID: "acme", Kind: cloud.UsageCompute, ResourceID: "i-3", Offering: "h100.8x", Zone: "us-east-1a",
		Market: od, EndpointID: "ep-1"}, ts(time.Hour), ts(90*time.Minute))
	res := mustRate(t, Input{Period: dec, AsOf: ts(2 * time.Hour), Prices: NewPriceBook(basePrices(), nil), Usage: l.us,
		Endpoints: map[string]string{"ep-1": "echo"}})
	var buf bytes.Buffer
	if err := WriteCSV(&buf, res.Invoices); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&buf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{
		{"tenant_id", "month", "category", "model", "offering", "zone", "commitment_id", "description", "quantity", "unit", "unit_price", "amount", "endpoint_id", "endpoint"},
		{"acme", "2026-12", "compute", "on_demand", "h100.8x", "us-east-1a", "", "h100.8x on demand, us-east-1a", "5400", "second", "12.00", "18.00", "", ""},
		{"acme", "2026-12", "compute", "on_demand", "h100.8x", "us-east-1a", "", "endpoint echo: h100.8x on demand, us-east-1a", "1800", "second", "12.00", "6.00", "ep-1", "echo"},
		{"acme", "2026-12", "volume", "", "", "", "", "volumes (GiB-month)", "720000", "GiB-second", "0.08", "0.021918", "", ""},
		{"acme", "2026-12", "total", "", "", "", "", "total USD", "", "", "", "24.021918", "", ""},
		{"beta", "2026-12", "compute", "on_demand", "h100.1x", "", "", "h100.1x on demand", "10", "second", "2.00", "0.005556", "", ""},
		{"beta", "2026-12", "minimum", "on_demand", "h100.1x", "", "", "minimum 60 s per start, h100.1x on demand", "50", "second", "2.00", "0.027778", "", ""},
		{"beta", "2026-12", "total", "", "", "", "", "total USD", "", "", "", "0.033334", "", ""},
	}
	if len(rows) != len(want) {
		t.Fatalf("rows %q", rows)
	}
	for i := range want {
		if strings.Join(rows[i], ",") != strings.Join(want[i], ",") {
			t.Errorf("row %d: %q\n want %q", i, rows[i], want[i])
		}
	}
	b, err := json.Marshal(res.Invoices[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`"tenant_id":"acme"`, `"month":"2026-12"`, `"final":false`, `"currency":"USD"`, `"total":"24.021918"`, `"endpoint_id":"ep-1"`, `"endpoint":"echo"`,
		`"unit_price":"12.00"`, `"as_of":"2026-12-01T02:00:00Z"`, `"category":"compute"`} {
		if !strings.Contains(string(b), s) {
			t.Errorf("JSON %s lacks %s", b, s)
		}
	}
}
