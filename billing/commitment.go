package billing

import (
	"errors"
	"fmt"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
)

// Commitment limits and the retainer's terms.
const (
	// MaxCommitmentQuantity is the most units one commitment holds.
	MaxCommitmentQuantity = 10_000
	// MinCommitmentTerm and MaxCommitmentTerm bound a term; a year is
	// 8,760 hours and three years 26,280.
	MinCommitmentTerm = time.Hour
	OneYear           = 8760 * time.Hour
	ThreeYears        = 3 * OneYear
	MaxCommitmentTerm = ThreeYears
	// MaxDiscountBP is the largest discount a reservation may be given.
	MaxDiscountBP = 9000
	// RetainerFeeBP is a retainer's hourly fee per unit, in basis points
	// of the on-demand price.
	RetainerFeeBP = 1000
	// RetainerUsageDiscountBP is the discount of a retainer's covered
	// hours off the on-demand price.
	RetainerUsageDiscountBP = 3000
)

// CommitmentSpec is what a tenant asks for when buying a commitment.
type CommitmentSpec struct {
	TenantID string
	// Plan is "reservation" or "retainer".
	Plan     string
	Offering string // an offering ("h100.8x") or a family ("h100")
	Zone     string // optional
	Quantity int
	Term     time.Duration
	// Payment is a reservation's payment option; empty for a retainer.
	Payment cloud.Payment
	// DiscountBP overrides the default discount: of a reservation's
	// price, or of a retainer's covered hours. 0 means the default.
	DiscountBP int64
	// Start is when the term begins; zero means now.
	Start time.Time
}

// DefaultDiscountBP is a reservation's default discount in basis points by
// term and payment: the 1-year row below three years, the 3-year row at
// three years.
func DefaultDiscountBP(term time.Duration, payment cloud.Payment) (int64, error) {
	col := 0
	switch payment {
	case cloud.PaymentNoUpfront:
		col = 0
	case cloud.PaymentPartialUpfront:
		col = 1
	case cloud.PaymentAllUpfront:
		col = 2
	default:
		return 0, fmt.Errorf("billing: unknown payment option %q (want %s, %s or %s)",
			payment, cloud.PaymentNoUpfront, cloud.PaymentPartialUpfront, cloud.PaymentAllUpfront)
	}
	if term >= ThreeYears {
		return [3]int64{4500, 5000, 5500}[col], nil
	}
	return [3]int64{2500, 3000, 3500}[col], nil
}

// NewCommitment prices a commitment from the on-demand price per hour of
// its offering at purchase. A reservation's effective hourly price is the
// on-demand price less its discount: all upfront pays it for every unit
// and hour of the term at once; partial upfront pays half of that total
// upfront and half the effective price per unit-hour; no upfront pays the
// effective price per unit-hour. A retainer pays RetainerFeeBP of the
// on-demand price per unit-hour and its covered hours at the on-demand
// price less RetainerUsageDiscountBP (or DiscountBP when given). The ID is
// left for the store to set.
func NewCommitment(spec CommitmentSpec, onDemand money.Micros, now time.Time) (*cloud.Commitment, error) {
	switch {
	case spec.TenantID == "":
		return nil, errors.New("billing: commitment: tenant is required")
	case spec.Offering == "":
		return nil, errors.New("billing: commitment: offering is required")
	case spec.Quantity < 1 || spec.Quantity > MaxCommitmentQuantity:
		return nil, fmt.Errorf("billing: commitment: quantity %d out of range 1..%d", spec.Quantity, MaxCommitmentQuantity)
	case spec.Term < MinCommitmentTerm || spec.Term > MaxCommitmentTerm:
		return nil, fmt.Errorf("billing: commitment: term %s out of range 1h..%s (3 years)", spec.Term, MaxCommitmentTerm)
	case spec.Term%time.Second != 0:
		return nil, fmt.Errorf("billing: commitment: term %s is not whole seconds", spec.Term)
	case spec.DiscountBP < 0 || spec.DiscountBP > MaxDiscountBP:
		return nil, fmt.Errorf("billing: commitment: discount %d bp out of range 0..%d", spec.DiscountBP, MaxDiscountBP)
	case onDemand < 0:
		return nil, fmt.Errorf("billing: commitment: negative on-demand price %s", onDemand)
	}
	start := spec.Start
	if start.IsZero() {
		start = now
	}
	start = start.UTC()
	c := &cloud.Commitment{
		TenantID:  spec.TenantID,
		Plan:      cloud.Plan(spec.Plan),
		Offering:  spec.Offering,
		Zone:      spec.Zone,
		Quantity:  spec.Quantity,
		Start:     start,
		End:       start.Add(spec.Term),
		CreatedAt: now.UTC(),
	}
	seconds := int64(spec.Term / time.Second)
	switch c.Plan {
	case cloud.PlanReservation:
		d := spec.DiscountBP
		if d == 0 {
			var err error
			if d, err = DefaultDiscountBP(spec.Term, spec.Payment); err != nil {
				return nil, err
			}
		} else if _, err := DefaultDiscountBP(spec.Term, spec.Payment); err != nil {
			return nil, err
		}
		c.Payment, c.DiscountBP = spec.Payment, d
		effective := onDemand - money.BasisPoints(onDemand, d)
		total, err := money.MulDiv(effective, int64(spec.Quantity)*seconds, money.SecondsPerHour)
		if err != nil {
			return nil, fmt.Errorf("billing: commitment: upfront fee: %w", err)
		}
		switch spec.Payment {
		case cloud.PaymentAllUpfront:
			c.UpfrontFee = total
		case cloud.PaymentPartialUpfront:
			c.UpfrontFee = half(total)
			c.HourlyFee = half(effective)
		case cloud.PaymentNoUpfront:
			c.HourlyFee = effective
		}
	case cloud.PlanRetainer:
		if spec.Payment != "" {
			return nil, fmt.Errorf("billing: commitment: a retainer has no payment option (got %q)", spec.Payment)
		}
		d := spec.DiscountBP
		if d == 0 {
			d = RetainerUsageDiscountBP
		}
		c.DiscountBP = d
		c.HourlyFee = money.BasisPoints(onDemand, RetainerFeeBP)
		c.UsageRate = onDemand - money.BasisPoints(onDemand, d)
	default:
		return nil, fmt.Errorf("billing: commitment: unknown plan %q (want %s or %s)", spec.Plan, cloud.PlanReservation, cloud.PlanRetainer)
	}
	return c, nil
}

// half is m/2 rounded half away from zero.
func half(m money.Micros) money.Micros {
	v, _ := money.MulDiv(m, 1, 2) // cannot overflow
	return v
}
