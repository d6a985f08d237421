package billing

import (
	"fmt"
	"sort"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
)

// This file turns the rater's accrued quantities into invoice lines.

func (r *rater) invoice(tenant string) (*Invoice, error) {
	inv := &Invoice{TenantID: tenant, Month: r.p.Name(), Start: r.p.Start, End: r.p.End, AsOf: r.asOf,
		Final: !r.asOf.Before(r.p.End), Currency: Currency, Lines: make([]Line, 0, len(r.acc))}
	ranks := make([]uint8, 0, len(r.acc))
	for k, q := range r.acc {
		if q == 0 {
			continue
		}
		l, err := r.line(k, q)
		if err != nil {
			return nil, fmt.Errorf("billing: tenant %s: %w", tenant, err)
		}
		inv.Lines = append(inv.Lines, l)
		ranks = append(ranks, k.cat)
	}
	sort.Sort(byLine{inv.Lines, ranks})
	for _, l := range inv.Lines {
		sum := inv.Total + l.Amount
		if (l.Amount > 0 && sum < inv.Total) || (l.Amount < 0 && sum > inv.Total) {
			return nil, fmt.Errorf("billing: tenant %s: total overflows", tenant)
		}
		inv.Total = sum
	}
	return inv, nil
}

type byLine struct {
	l []Line
	r []uint8
}

func (b byLine) Len() int { return len(b.l) }
func (b byLine) Swap(i, j int) {
	b.l[i], b.l[j] = b.l[j], b.l[i]
	b.r[i], b.r[j] = b.r[j], b.r[i]
}
func (b byLine) Less(i, j int) bool {
	x, y := &b.l[i], &b.l[j]
	switch {
	case b.r[i] != b.r[j]:
		return b.r[i] < b.r[j]
	case x.Endpoint != y.Endpoint:
		return x.Endpoint < y.Endpoint
	case x.EndpointID != y.EndpointID:
		return x.EndpointID < y.EndpointID
	case x.Offering != y.Offering:
		return x.Offering < y.Offering
	case x.Zone != y.Zone:
		return x.Zone < y.Zone
	case x.Model != y.Model:
		return x.Model < y.Model
	case x.CommitmentID != y.CommitmentID:
		return x.CommitmentID < y.CommitmentID
	case x.UnitPrice != y.UnitPrice:
		return x.UnitPrice < y.UnitPrice
	}
	return x.Description < y.Description
}

func planModel(p cloud.Plan) string {
	if p == cloud.PlanRetainer {
		return ModelRetainer
	}
	return ModelReserved
}

func commitmentName(c *cloud.Commitment) string {
	if c.Plan == cloud.PlanRetainer {
		return "retainer " + c.ID
	}
	return "reservation " + c.ID
}

func (r *rater) line(k lkey, q int64) (Line, error) {
	l := Line{Category: categories[k.cat], Quantity: q, UnitPrice: k.price, Unit: UnitSecond}
	den := int64(money.SecondsPerHour)
	var c *cloud.Commitment
	if k.commit >= 0 {
		c = r.commits[k.commit]
		l.CommitmentID = c.ID
	}
	switch k.cat {
	case catCompute, catMinimum:
		s := r.scheds[k.sched]
		l.Offering, l.Zone = s.offering, s.zone
		var what string
		switch {
		case c != nil:
			l.Model = planModel(c.Plan)
			what = fmt.Sprintf("%s (%s) coverage", commitmentName(c), s.offering)
		case s.kind == schedSpot:
			l.Model = ModelSpot
			what = "spot " + s.offering + "/" + s.zone
		default:
			l.Model = ModelOnDemand
			what = s.offering + " on demand"
			if s.zone != "" {
				what += ", " + s.zone
			}
		}
		if k.cat == catMinimum {
			what = fmt.Sprintf("minimum %d s per start, %s", MinimumSeconds, what)
		}
		if k.ep > 0 {
			l.EndpointID = r.eps[k.ep]
			l.Endpoint = r.epNames[l.EndpointID]
			if l.Endpoint == "" {
				l.Endpoint = l.EndpointID
			}
			what = "endpoint " + l.Endpoint + ": " + what
		}
		l.Description = what
	case catFee, catUpfront:
		l.Model = planModel(c.Plan)
		l.Offering, l.Zone = c.Offering, c.Zone
		what := fmt.Sprintf("%d x %s", c.Quantity, c.Offering)
		if c.Zone != "" {
			what += ", " + c.Zone
		}
		if k.cat == catFee {
			l.Unit = UnitUnitSecond
			l.Description = fmt.Sprintf("%s (%s) hourly fee", commitmentName(c), what)
		} else {
			l.Unit, den = UnitEach, 1
			l.Description = fmt.Sprintf("%s (%s) upfront fee", commitmentName(c), what)
		}
	case catVolume:
		l.Unit, den = UnitGiBSecond, money.SecondsPerMonth
		l.Description = "volumes (GiB-month)"
	case catAddress:
		l.Description = "public addresses (address-hour)"
	}
	amt, err := money.MulDiv(l.UnitPrice, l.Quantity, den)
	if err != nil {
		return l, fmt.Errorf("line %q: %w", l.Description, err)
	}
	l.Amount = amt
	return l, nil
}
