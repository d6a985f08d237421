package billing

import (
	"testing"

	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/money"
)

func TestListPrices(t *testing.T) {
	cat := catalog.Default()
	for _, c := range []struct {
		offering string
		want     string
	}{
		{"h100.1x", "2.49"},
		{"h100.8x", "19.92"},
		{"h100.metal", "19.92"},
		{"h100.mig.3g.40gb", "1.067143"},
		{"l40s.shared.0.25", "0.2475"},
		{"mi300x.1x", "1.99"},
		{"mi300x.8x", "15.92"},
		{"mi300x.metal", "15.92"},
		{"mi300x.dpx", "0.995"},
		{"mi300x.qpx", "0.4975"},
		{"mi300x.cpx", "0.24875"},
		{"mi300x.vf8", "0.24875"},
		{"mi325x.1x", "2.25"},
		{"mi325x.cpx", "0.28125"},
	} {
		got, err := ListPrice(cat, c.offering)
		if err != nil || got != money.MustParse(c.want) {
			t.Errorf("ListPrice(%s) = %s, %v; want %s", c.offering, got, err, c.want)
		}
	}
	ps, err := DefaultPrices(cat)
	if err != nil || len(ps) != len(cat.Offerings())+2 {
		t.Fatalf("DefaultPrices: %d prices, %v", len(ps), err)
	}
	for _, p := range ps {
		if p.Amount <= 0 {
			t.Errorf("%s %s: price %s", p.Kind, p.Offering, p.Amount)
		}
	}
	if _, err := ListPrice(cat, "nope.1x"); err == nil {
		t.Error("unknown offering priced")
	}
}

// TestListPricesNameCatalogModels: every key of the built-in GPU price
// list is a canonical model of the default catalog, so that no model
// silently falls back to the vCPU-based price.
func TestListPricesNameCatalogModels(t *testing.T) {
	cat := catalog.Default()
	for name, price := range listPerGPUHour {
		m, err := cat.Model(name)
		if err != nil || m.Name != name {
			t.Errorf("list price key %q is not a canonical catalog model (%v)", name, err)
		}
		if price <= 0 {
			t.Errorf("%s: price %s", name, price)
		}
	}
	// An A100 40GB offering in an operator catalog gets the A100 40GB price.
	for _, m := range []string{"A100-40GB-SXM", "A100-40GB-PCIE"} {
		if listPerGPUHour[m] != 1_290_000 {
			t.Errorf("%s: %s", m, listPerGPUHour[m])
		}
	}
}
