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
