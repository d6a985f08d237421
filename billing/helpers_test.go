package billing

import (
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
)

var (
	dec = Month(2026, time.December)
	d0  = dec.Start
)

// ts is a time in December 2026.
func ts(d time.Duration) time.Time { return d0.Add(d) }

func day(n int) time.Duration { return time.Duration(n) * 24 * time.Hour }

func usd(s string) money.Micros { return money.MustParse(s) }

func computePrice(offering, zone, amount string, eff time.Time) *cloud.Price {
	return &cloud.Price{Kind: cloud.PriceCompute, Offering: offering, Zone: zone, Amount: usd(amount), EffectiveAt: eff}
}

// basePrices: h100.8x at $12/h everywhere, volumes $0.08/GiB-month and
// addresses $0.005/h, since before the period.
func basePrices() []*cloud.Price {
	epoch := time.Unix(0, 0).UTC()
	return []*cloud.Price{
		computePrice("h100.8x", "", "12", epoch),
		computePrice("h100.1x", "", "2", epoch),
		{Kind: cloud.PriceVolume, Amount: usd("0.08"), EffectiveAt: epoch},
		{Kind: cloud.PriceAddress, Amount: usd("0.005"), EffectiveAt: epoch},
	}
}

type ledger struct {
	next int64
	us   []*cloud.Usage
}

func (l *ledger) add(on bool, t time.Time, u cloud.Usage) {
	l.next++
	u.ID, u.Time, u.On = l.next, t, on
	if u.Quantity == 0 {
		u.Quantity = 1
	}
	l.us = append(l.us, &u)
}

// spans adds On at spans[0], Off at spans[1], On at spans[2], ...
func (l *ledger) spans(u cloud.Usage, spans ...time.Time) {
	for i, t := range spans {
		l.add(i%2 == 0, t, u)
	}
}

func (l *ledger) inst(tenant, id, offering, zone string, m cloud.Market, spans ...time.Time) {
	l.spans(cloud.Usage{TenantID: tenant, Kind: cloud.UsageCompute, ResourceID: id, Offering: offering, Zone: zone, Market: m}, spans...)
}

func (l *ledger) vol(tenant, id string, gib int64, spans ...time.Time) {
	l.spans(cloud.Usage{TenantID: tenant, Kind: cloud.UsageVolume, ResourceID: id, Quantity: gib}, spans...)
}

func (l *ledger) addr(tenant, id string, spans ...time.Time) {
	l.spans(cloud.Usage{TenantID: tenant, Kind: cloud.UsageAddress, ResourceID: id}, spans...)
}

func mustRate(t *testing.T, in Input) *Result {
	t.Helper()
	res, err := Rate(in)
	if err != nil {
		t.Fatalf("Rate: %v", err)
	}
	for _, inv := range res.Invoices {
		checkInvoice(t, inv)
	}
	return res
}

// checkInvoice checks the invariants every invoice keeps: each amount is
// its quantity at its unit price rounded once, and the lines sum to the
// total exactly.
func checkInvoice(t *testing.T, inv *Invoice) {
	t.Helper()
	var sum money.Micros
	for _, l := range inv.Lines {
		den := int64(money.SecondsPerHour)
		switch l.Unit {
		case UnitGiBSecond:
			den = money.SecondsPerMonth
		case UnitEach:
			den = 1
		}
		want, err := money.MulDiv(l.UnitPrice, l.Quantity, den)
		if err != nil || want != l.Amount {
			t.Errorf("%s: line %+v: amount %s, want %s (%v)", inv.TenantID, l, l.Amount, want, err)
		}
		if l.Quantity <= 0 || l.Description == "" {
			t.Errorf("%s: line %+v", inv.TenantID, l)
		}
		sum += l.Amount
	}
	if sum != inv.Total {
		t.Errorf("%s: lines sum to %s, total %s", inv.TenantID, sum, inv.Total)
	}
	if inv.Currency != "USD" {
		t.Errorf("currency %q", inv.Currency)
	}
}

func invoiceOf(res *Result, tenant string) *Invoice {
	for _, inv := range res.Invoices {
		if inv.TenantID == tenant {
			return inv
		}
	}
	return nil
}

func linesOf(inv *Invoice, cat Category) []Line {
	var out []Line
	if inv == nil {
		return nil
	}
	for _, l := range inv.Lines {
		if l.Category == cat {
			out = append(out, l)
		}
	}
	return out
}
