package billing

import (
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
)

func TestNewCommitmentFees(t *testing.T) {
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name    string
		spec    CommitmentSpec
		price   string
		bp      int64
		upfront string
		hourly  string
		usage   string
	}{
		// 1 year no upfront at 25%: $12 -> $9 per unit-hour.
		{"1y no upfront", CommitmentSpec{Plan: "reservation", Quantity: 2, Term: OneYear, Payment: cloud.PaymentNoUpfront}, "12", 2500, "0", "9", "0"},
		// 1 year all upfront at 35%: $7.80 × 2 × 8,760 h.
		{"1y all upfront", CommitmentSpec{Plan: "reservation", Quantity: 2, Term: OneYear, Payment: cloud.PaymentAllUpfront}, "12", 3500, "136656", "0", "0"},
		// 1 year partial at 30%: $8.40 × 8,760 h = $73,584, half upfront.
		{"1y partial", CommitmentSpec{Plan: "reservation", Quantity: 1, Term: OneYear, Payment: cloud.PaymentPartialUpfront}, "12", 3000, "36792", "4.20", "0"},
		{"3y no upfront", CommitmentSpec{Plan: "reservation", Quantity: 1, Term: ThreeYears, Payment: cloud.PaymentNoUpfront}, "12", 4500, "0", "6.60", "0"},
		{"3y partial", CommitmentSpec{Plan: "reservation", Quantity: 1, Term: ThreeYears, Payment: cloud.PaymentPartialUpfront}, "10", 5000, "65700", "2.50", "0"},
		{"3y all upfront", CommitmentSpec{Plan: "reservation", Quantity: 1, Term: ThreeYears, Payment: cloud.PaymentAllUpfront}, "10", 5500, "118260", "0", "0"},
		// Two years: the 1-year row.
		{"2y", CommitmentSpec{Plan: "reservation", Quantity: 1, Term: 2 * OneYear, Payment: cloud.PaymentNoUpfront}, "10", 2500, "0", "7.50", "0"},
		// Short terms for tests use the 1-year row; odd amounts round once:
		// (2.490001 - 0.8715) × 3 × 1.5 h = 7.2832545.
		{"90 minutes", CommitmentSpec{Plan: "reservation", Quantity: 3, Term: 90 * time.Minute, Payment: cloud.PaymentAllUpfront}, "2.490001", 3500, "7.283255", "0", "0"},
		{"partial rounding", CommitmentSpec{Plan: "reservation", Quantity: 1, Term: time.Hour, Payment: cloud.PaymentPartialUpfront}, "0.000003", 3000, "0.000001", "0.000001", "0"},
		{"explicit discount", CommitmentSpec{Plan: "reservation", Quantity: 1, Term: OneYear, Payment: cloud.PaymentNoUpfront, DiscountBP: 1250}, "8", 1250, "0", "7", "0"},
		// Retainer: 10% of on demand per unit-hour, covered hours 30% off.
		{"retainer", CommitmentSpec{Plan: "retainer", Quantity: 4, Term: OneYear}, "12", 3000, "0", "1.20", "8.40"},
		{"retainer discount", CommitmentSpec{Plan: "retainer", Quantity: 1, Term: OneYear, DiscountBP: 2500}, "12", 2500, "0", "1.20", "9"},
	} {
		t.Run(c.name, func(t *testing.T) {
			spec := c.spec
			spec.TenantID, spec.Offering, spec.Zone = "acme", "h100.8x", "z1"
			got, err := NewCommitment(spec, usd(c.price), now)
			if err != nil {
				t.Fatal(err)
			}
			if got.DiscountBP != c.bp || got.UpfrontFee != usd(c.upfront) || got.HourlyFee != usd(c.hourly) || got.UsageRate != usd(c.usage) {
				t.Errorf("got discount %d, upfront %s, hourly %s, usage %s; want %d, %s, %s, %s",
					got.DiscountBP, got.UpfrontFee, got.HourlyFee, got.UsageRate, c.bp, c.upfront, c.hourly, c.usage)
			}
			if !got.Start.Equal(now) || !got.End.Equal(now.Add(spec.Term)) || got.TenantID != "acme" || got.Zone != "z1" ||
				got.Quantity != spec.Quantity || string(got.Plan) != spec.Plan || got.Payment != spec.Payment {
				t.Errorf("commitment %+v", got)
			}
			// Over the whole term a reservation costs its effective price
			// for every unit-hour (to rounding of the hourly half).
			if got.Plan == cloud.PlanReservation {
				hours := int64(spec.Term / time.Hour)
				eff := usd(c.price) - money.BasisPoints(usd(c.price), c.bp)
				total := got.UpfrontFee + got.HourlyFee*money.Micros(int64(spec.Quantity)*hours)
				want, _ := money.MulDiv(eff, int64(spec.Quantity)*int64(spec.Term/time.Second), 3600)
				if d := total - want; d < -money.Micros(spec.Quantity)*money.Micros(hours) || d > money.Micros(spec.Quantity)*money.Micros(hours) {
					t.Errorf("term costs %s, want about %s", total, want)
				}
			}
		})
	}
	start := now.Add(24 * time.Hour)
	c, err := NewCommitment(CommitmentSpec{TenantID: "acme", Plan: "retainer", Offering: "h100", Quantity: 1, Term: time.Hour, Start: start}, usd("1"), now)
	if err != nil || !c.Start.Equal(start) || !c.CreatedAt.Equal(now) {
		t.Errorf("explicit start: %+v, %v", c, err)
	}
}

func TestNewCommitmentValidation(t *testing.T) {
	ok := CommitmentSpec{TenantID: "acme", Plan: "reservation", Offering: "h100.8x", Quantity: 1, Term: OneYear, Payment: cloud.PaymentNoUpfront}
	if _, err := NewCommitment(ok, usd("12"), time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		mod  func(*CommitmentSpec)
		want string
	}{
		{func(s *CommitmentSpec) { s.TenantID = "" }, "tenant"},
		{func(s *CommitmentSpec) { s.Offering = "" }, "offering"},
		{func(s *CommitmentSpec) { s.Quantity = 0 }, "quantity 0"},
		{func(s *CommitmentSpec) { s.Quantity = 10_001 }, "quantity 10001"},
		{func(s *CommitmentSpec) { s.Term = 59 * time.Minute }, "term"},
		{func(s *CommitmentSpec) { s.Term = ThreeYears + time.Hour }, "term"},
		{func(s *CommitmentSpec) { s.Term = time.Hour + time.Millisecond }, "whole seconds"},
		{func(s *CommitmentSpec) { s.Plan = "lease" }, "unknown plan"},
		{func(s *CommitmentSpec) { s.Plan = "" }, "unknown plan"},
		{func(s *CommitmentSpec) { s.Payment = "" }, "payment"},
		{func(s *CommitmentSpec) { s.Payment = "monthly" }, "payment"},
		{func(s *CommitmentSpec) { s.DiscountBP = 9001 }, "discount"},
		{func(s *CommitmentSpec) { s.DiscountBP = -1 }, "discount"},
		{func(s *CommitmentSpec) { s.Plan = "retainer" }, "no payment option"},
	} {
		s := ok
		c.mod(&s)
		if _, err := NewCommitment(s, usd("12"), time.Now()); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err = %v, want %q", s, err, c.want)
		}
	}
	if _, err := NewCommitment(ok, -1, time.Now()); err == nil {
		t.Error("negative price accepted")
	}
	for _, q := range []int{1, 10_000} {
		s := ok
		s.Quantity = q
		if _, err := NewCommitment(s, usd("12"), time.Now()); err != nil {
			t.Errorf("quantity %d: %v", q, err)
		}
	}
	for _, term := range []time.Duration{time.Hour, ThreeYears} {
		s := ok
		s.Term = term
		if _, err := NewCommitment(s, usd("12"), time.Now()); err != nil {
			t.Errorf("term %s: %v", term, err)
		}
	}
}
