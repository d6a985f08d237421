// Package estimate compares what a workload costs on demand, on
// reservations, on a retainer and on spot: the arithmetic behind
// `gpucloud cost estimate`. It is pure integer arithmetic: money in
// micros (package money), durations in seconds, rates and discounts in
// basis points.
//
// Reservations are costed the articles' way, on the hours used: $12/h for
// 12 h/day over 30 days is $4,320 on demand, and 25% off is $3,240. A
// reservation is a commitment for every hour of its term, though, so each
// reservation row also gives what the same reservation costs held 24 h/day
// ($6,480 in that example) and the utilisation at which holding it breaks
// even with on demand (75% at 25% off).
package estimate

import (
	"errors"
	"fmt"

	"github.com/gpucloud/gpucloud/money"
)

// Defaults of Workload's zero fields.
const (
	// DefaultSpotDiscountBP prices spot at 60% off on demand.
	DefaultSpotDiscountBP = 6000
	// DefaultRetainerFeeBP is the retainer's fee per hour, charged 24 h a
	// day for the whole term: 10% of the on-demand price.
	DefaultRetainerFeeBP = 1000
	// DefaultRetainerDiscountBP is the discount on the hours a retainer
	// covers: 30%.
	DefaultRetainerDiscountBP = 3000
)

// Limits of a Workload, so that every product stays within 64 bits.
const (
	MaxDays  = 3653      // ten years
	MaxCount = 1_000_000 // instances
	// MaxDurationSeconds bounds the checkpoint interval and the restart
	// overhead: a week.
	MaxDurationSeconds = 7 * 86400
	// MaxReclaimRateBP is one reclaim per instance-hour.
	MaxReclaimRateBP = 10_000
)

// Workload is what to estimate: Count instances at PricePerHour on demand,
// each used SecondsPerDay a day for Days days.
type Workload struct {
	// PricePerHour is the on-demand price of one instance per hour.
	PricePerHour money.Micros `json:"price_per_hour"`
	// SecondsPerDay is how long each instance runs a day: 1..86,400
	// (12 h/day is 43,200).
	SecondsPerDay int64 `json:"seconds_per_day"`
	Days          int   `json:"days"`
	Count         int   `json:"count"`

	// InterruptionTolerant says the workload survives a spot reclaim
	// (it checkpoints and restarts); spot is unsuitable otherwise.
	InterruptionTolerant bool `json:"interruption_tolerant"`
	// CheckpointIntervalSeconds is how often the workload checkpoints: a
	// reclaim loses half of it on average.
	CheckpointIntervalSeconds int64 `json:"checkpoint_interval_seconds"`
	// RestartOverheadSeconds is how long a relaunch takes to get back to
	// work (scheduling, boot, loading the checkpoint).
	RestartOverheadSeconds int64 `json:"restart_overhead_seconds"`
	// ReclaimRateBP is the expected spot reclaims per instance-hour in
	// basis points: 500 is 0.05 an hour, one every 20 hours.
	ReclaimRateBP int64 `json:"reclaim_rate_bp"`

	// SpotPrice is the spot price per hour; zero prices spot at
	// SpotDiscountBP off on demand.
	SpotPrice money.Micros `json:"spot_price,omitempty"`
	// SpotDiscountBP is spot's discount when SpotPrice is zero (zero:
	// DefaultSpotDiscountBP).
	SpotDiscountBP int64 `json:"spot_discount_bp,omitempty"`

	// ReservedDiscountsBP, when set, replaces the built-in reservation
	// options with one row per discount.
	ReservedDiscountsBP []int64 `json:"reserved_discounts_bp,omitempty"`

	// RetainerFeeBP is the retainer's hourly fee in basis points of the
	// on-demand price, charged 24 h/day for the whole term (zero:
	// DefaultRetainerFeeBP).
	RetainerFeeBP int64 `json:"retainer_fee_bp,omitempty"`
	// RetainerDiscountBP is the discount on the hours the retainer covers
	// (zero: DefaultRetainerDiscountBP).
	RetainerDiscountBP int64 `json:"retainer_discount_bp,omitempty"`
}

// Option is a built-in reservation option.
type Option struct {
	Term       string // "1y" or "3y"
	TermDays   int    // 365 or 1095
	Payment    string // "no upfront", "partial upfront", "all upfront"
	DiscountBP int64
}

// Options are the built-in reservation options, in the order of the rows.
var Options = []Option{
	{"1y", 365, "no upfront", 2500},
	{"1y", 365, "partial upfront", 3000},
	{"1y", 365, "all upfront", 3500},
	{"3y", 1095, "no upfront", 4500},
	{"3y", 1095, "partial upfront", 5000},
	{"3y", 1095, "all upfront", 5500},
}

// Row kinds.
const (
	KindOnDemand    = "on_demand"
	KindReservation = "reservation"
	KindRetainer    = "retainer"
	KindSpot        = "spot"
)

// Row is one plan of the comparison.
type Row struct {
	// Plan names the plan: "on demand", "reserved 1y no upfront",
	// "reserved 25% off", "retainer", "spot".
	Plan string `json:"plan"`
	Kind string `json:"kind"`
	// Total is the plan's cost of the workload.
	Total money.Micros `json:"total"`
	// PerHour is Total per instance-hour used.
	PerHour money.Micros `json:"per_hour"`
	// SavingsBP is the saving against on demand in basis points; negative
	// when the plan costs more.
	SavingsBP int64  `json:"savings_bp"`
	Note      string `json:"note,omitempty"`

	// DiscountBP is the plan's discount off on demand (reservations,
	// retainer usage, spot).
	DiscountBP int64 `json:"discount_bp,omitempty"`
	// HeldTotal (reservations) is the reservation's cost held 24 h/day
	// for the days, as an always-on commitment is charged; the retainer's
	// fee share of Total for the retainer.
	HeldTotal money.Micros `json:"held_total,omitempty"`
	// HeldSavingsBP is HeldTotal's saving against on demand.
	HeldSavingsBP int64 `json:"held_savings_bp,omitempty"`
	// BreakEvenBP is the utilisation (hours used of 24 a day) from which
	// the commitment costs no more than on demand.
	BreakEvenBP int64 `json:"break_even_bp,omitempty"`
	// TermDays is a built-in reservation option's term: what it commits
	// to, however few days the workload runs.
	TermDays int `json:"term_days,omitempty"`

	// Spot: the expected reclaims in thousandths, and the hours they cost
	// (in seconds), at the spot price.
	ExpectedReclaimsMilli int64 `json:"expected_reclaims_milli,omitempty"`
	OverheadSeconds       int64 `json:"overhead_seconds,omitempty"`
	// Unsuitable marks a plan the workload cannot use (spot for a
	// workload that does not tolerate interruptions).
	Unsuitable bool `json:"unsuitable,omitempty"`
}

// Comparison is the result: the workload's totals and one row per plan,
// on demand first.
type Comparison struct {
	// Workload is the workload with its zero defaults filled in.
	Workload Workload `json:"workload"`
	// InstanceSeconds is the usage: SecondsPerDay × Days × Count.
	InstanceSeconds int64 `json:"instance_seconds"`
	// UtilisationBP is SecondsPerDay of 86,400.
	UtilisationBP int64 `json:"utilisation_bp"`
	// SpotPrice is the spot price per hour used.
	SpotPrice money.Micros `json:"spot_price"`
	Rows      []Row        `json:"rows"`
}

// FieldError is a workload field out of range.
type FieldError struct {
	Field string // "hours per day", "days", ...
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Validate reports every field out of range, as *FieldError values joined.
func (w *Workload) Validate() error {
	var errs []error
	if w.PricePerHour <= 0 {
		errs = append(errs, fieldErr("price per hour", "must be more than 0, got %s", w.PricePerHour))
	}
	switch {
	case w.SecondsPerDay <= 0:
		errs = append(errs, fieldErr("hours per day", "must be more than 0"))
	case w.SecondsPerDay > 86400:
		errs = append(errs, fieldErr("hours per day", "must be at most 24, got %s", hours(w.SecondsPerDay)))
	}
	if w.Days <= 0 || w.Days > MaxDays {
		errs = append(errs, fieldErr("days", "must be 1..%d, got %d", MaxDays, w.Days))
	}
	if w.Count <= 0 || w.Count > MaxCount {
		errs = append(errs, fieldErr("count", "must be 1..%d, got %d", MaxCount, w.Count))
	}
	if w.CheckpointIntervalSeconds < 0 || w.CheckpointIntervalSeconds > MaxDurationSeconds {
		errs = append(errs, fieldErr("checkpoint interval", "must be 0..%d seconds, got %d", MaxDurationSeconds, w.CheckpointIntervalSeconds))
	}
	if w.RestartOverheadSeconds < 0 || w.RestartOverheadSeconds > MaxDurationSeconds {
		errs = append(errs, fieldErr("restart overhead", "must be 0..%d seconds, got %d", MaxDurationSeconds, w.RestartOverheadSeconds))
	}
	if w.ReclaimRateBP < 0 || w.ReclaimRateBP > MaxReclaimRateBP {
		errs = append(errs, fieldErr("reclaim rate", "must be 0..1 per hour, got %s", rate(w.ReclaimRateBP)))
	}
	if w.SpotPrice < 0 {
		errs = append(errs, fieldErr("spot price", "must not be negative, got %s", w.SpotPrice))
	}
	checkBP := func(field string, bp int64) {
		if bp < 0 || bp > 10_000 {
			errs = append(errs, fieldErr(field, "must be 0%%..100%%, got %s", percent(bp)))
		}
	}
	checkBP("spot discount", w.SpotDiscountBP)
	for _, d := range w.ReservedDiscountsBP {
		checkBP("reserved discount", d)
	}
	checkBP("retainer fee", w.RetainerFeeBP)
	checkBP("retainer discount", w.RetainerDiscountBP)
	return errors.Join(errs...)
}

// bpDen is the denominator of an hourly price applied to seconds at a share
// in basis points.
const bpDen = money.SecondsPerHour * 10_000

// charge is price × seconds × payBP / (3600 × 10,000), rounded once.
// Validate's limits keep seconds × payBP within 64 bits (at most
// 86,400 × 3,653 × 10⁶ × 10⁴ ≈ 3.2·10¹⁸).
func charge(price money.Micros, seconds, payBP int64) (money.Micros, error) {
	return money.MulDiv(price, seconds*payBP, bpDen)
}

// Compare validates w and prices it on every plan.
func Compare(w Workload) (*Comparison, error) {
	if err := w.Validate(); err != nil {
		return nil, err
	}
	w.ReservedDiscountsBP = append([]int64(nil), w.ReservedDiscountsBP...)
	w.RetainerFeeBP = orDefault(w.RetainerFeeBP, DefaultRetainerFeeBP)
	w.RetainerDiscountBP = orDefault(w.RetainerDiscountBP, DefaultRetainerDiscountBP)
	if w.SpotPrice == 0 {
		w.SpotDiscountBP = orDefault(w.SpotDiscountBP, DefaultSpotDiscountBP)
	}
	used := w.SecondsPerDay * int64(w.Days) * int64(w.Count)
	held := 86400 * int64(w.Days) * int64(w.Count)
	c := &Comparison{Workload: w, InstanceSeconds: used, UtilisationBP: w.SecondsPerDay * 10_000 / 86400}

	od, err := charge(w.PricePerHour, used, 10_000)
	if err != nil {
		return nil, err
	}
	b := baseline{onDemand: od, used: used}
	add := func(r Row) {
		r.PerHour, r.SavingsBP = b.perHour(r.Total), b.savings(r.Total)
		c.Rows = append(c.Rows, r)
	}
	add(Row{Plan: "on demand", Kind: KindOnDemand, Total: od})
	rows, err := reservationRows(w, b, held)
	if err != nil {
		return nil, err
	}
	for _, r := range rows {
		add(r)
	}
	r, err := retainerRow(w, used, held)
	if err != nil {
		return nil, err
	}
	add(r)
	if r, c.SpotPrice, err = spotRow(w, used); err != nil {
		return nil, err
	}
	add(r)
	return c, nil
}

// baseline is the on-demand total of the used seconds, against which the
// other plans are compared.
type baseline struct {
	onDemand money.Micros
	used     int64 // instance-seconds
}

// perHour is a total per used instance-hour.
func (b baseline) perHour(total money.Micros) money.Micros {
	v, _ := money.MulDiv(total, money.SecondsPerHour, b.used)
	return v
}

// savings is how much less than on demand a total is, in basis points;
// onDemand > 0 since price and usage are.
func (b baseline) savings(total money.Micros) int64 {
	v, _ := money.MulDiv(b.onDemand-total, 10_000, int64(b.onDemand))
	return int64(v)
}

// reservationRows prices the reservations: the discounts w names, or else
// the standard Options. A reservation is billed for every held second.
func reservationRows(w Workload, b baseline, held int64) ([]Row, error) {
	type resv struct {
		plan string
		bp   int64
		term int
	}
	var opts []resv
	if len(w.ReservedDiscountsBP) > 0 {
		for _, d := range w.ReservedDiscountsBP {
			opts = append(opts, resv{"reserved " + percent(d) + " off", d, 0})
		}
	} else {
		for _, o := range Options {
			opts = append(opts, resv{"reserved " + o.Term + " " + o.Payment, o.DiscountBP, o.TermDays})
		}
	}
	var rows []Row
	for _, o := range opts {
		total, err := charge(w.PricePerHour, b.used, 10_000-o.bp)
		if err != nil {
			return nil, err
		}
		heldTotal, err := charge(w.PricePerHour, held, 10_000-o.bp)
		if err != nil {
			return nil, err
		}
		r := Row{Plan: o.plan, Kind: KindReservation, Total: total, DiscountBP: o.bp,
			HeldTotal: heldTotal, HeldSavingsBP: b.savings(heldTotal), BreakEvenBP: 10_000 - o.bp, TermDays: o.term}
		r.Note = fmt.Sprintf("breaks even at %s utilisation", percent(r.BreakEvenBP))
		if w.SecondsPerDay < 86400 {
			// Total and HeldTotal assume different things; the note says
			// which is which, so that they do not read as a contradiction.
			r.Note = fmt.Sprintf("total counts the used hours only; held 24 h/day, as a commitment is billed: %s; %s", money.FormatAmount(heldTotal), r.Note)
		}
		if o.term > w.Days {
			r.Note += fmt.Sprintf("; the term commits %d days", o.term)
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// retainerRow prices the retainer: the fee for every hour of the term, the
// used hours at a discount. It breaks even where fee × 24 h = discount ×
// used hours.
func retainerRow(w Workload, used, held int64) (Row, error) {
	feeBP, rdBP := w.RetainerFeeBP, w.RetainerDiscountBP
	fee, err := charge(w.PricePerHour, held, feeBP)
	if err != nil {
		return Row{}, err
	}
	usage, err := charge(w.PricePerHour, used, 10_000-rdBP)
	if err != nil {
		return Row{}, err
	}
	r := Row{Plan: "retainer", Kind: KindRetainer, Total: fee + usage, DiscountBP: rdBP, HeldTotal: fee}
	if feeBP < rdBP {
		r.BreakEvenBP = ceilDiv(feeBP*10_000, rdBP)
		r.Note = fmt.Sprintf("fee %s (%s of on demand, 24 h/day) + usage %s at %s off; breaks even at %s utilisation",
			money.FormatAmount(fee), percent(feeBP), money.FormatAmount(usage), percent(rdBP), percent(r.BreakEvenBP))
	} else {
		r.Note = fmt.Sprintf("fee %s (%s of on demand, 24 h/day) + usage %s at %s off; never cheaper than on demand",
			money.FormatAmount(fee), percent(feeBP), money.FormatAmount(usage), percent(rdBP))
	}
	return r, nil
}

// spotRow prices spot: the used hours plus the work each expected reclaim
// costs (half a checkpoint interval lost, plus the restart), at the spot
// price, which it also returns.
func spotRow(w Workload, used int64) (Row, money.Micros, error) {
	sp := w.SpotPrice
	var err error
	if sp == 0 {
		if sp, err = money.MulDiv(w.PricePerHour, 10_000-w.SpotDiscountBP, 10_000); err != nil {
			return Row{}, 0, err
		}
	}
	// used × rate ≤ 3.2·10¹⁴ × 10⁴ fits; the rest goes through 128 bits.
	reclaimsMilli, err := money.MulDiv(money.Micros(used*w.ReclaimRateBP), 1000, bpDen)
	if err != nil {
		return Row{}, 0, err
	}
	lost := w.CheckpointIntervalSeconds + 2*w.RestartOverheadSeconds // twice the loss per reclaim
	overhead, err := money.MulDiv(money.Micros(used*w.ReclaimRateBP), lost, 2*bpDen)
	if err != nil {
		return Row{}, 0, err
	}
	total, err := money.MulDiv(sp, used+int64(overhead), money.SecondsPerHour)
	if err != nil {
		return Row{}, 0, err
	}
	r := Row{Plan: "spot", Kind: KindSpot, Total: total, ExpectedReclaimsMilli: int64(reclaimsMilli), OverheadSeconds: int64(overhead)}
	if w.SpotPrice == 0 {
		r.DiscountBP = w.SpotDiscountBP
	}
	r.Note = fmt.Sprintf("at %s/h; %s expected reclaims cost %s h more", money.FormatPrice(sp), milli(int64(reclaimsMilli)), hours(int64(overhead)))
	if !w.InterruptionTolerant {
		r.Unsuitable = true
		r.Note = "unsuitable: the workload does not tolerate interruptions; " + r.Note
	}
	return r, sp, nil
}

func orDefault(v, def int64) int64 {
	if v == 0 {
		return def
	}
	return v
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// percent prints basis points as a percentage with no more decimals than it
// needs: 2500 → "25%", 1250 → "12.5%", 7 → "0.07%".
func percent(bp int64) string { return decimal(bp, 100) + "%" }

// hours prints seconds as hours: 7560 → "2.1", 43200 → "12".
func hours(s int64) string {
	// To the 0.0001 h, truncated; in two parts so that no product
	// overflows.
	return decimal(s/3600*10_000+s%3600*10_000/3600, 10_000)
}

// rate prints a reclaim rate in basis points per hour: 500 → "0.05".
func rate(bp int64) string { return decimal(bp, 10_000) }

// milli prints thousandths: 18000 → "18", 1500 → "1.5".
func milli(m int64) string { return decimal(m, 1000) }

// decimal prints v/unit (unit a power of ten) without trailing zeros.
func decimal(v, unit int64) string {
	sign := ""
	if v < 0 {
		sign, v = "-", -v
	}
	s := fmt.Sprintf("%s%d", sign, v/unit)
	if f := v % unit; f != 0 {
		digits := len(fmt.Sprint(unit)) - 1
		frac := fmt.Sprintf("%0*d", digits, f)
		for frac[len(frac)-1] == '0' {
			frac = frac[:len(frac)-1]
		}
		s += "." + frac
	}
	return s
}

// Percent prints basis points as a percentage: 2500 → "25%".
func Percent(bp int64) string { return percent(bp) }

// Hours prints seconds as hours, to four decimals at most: 7560 → "2.1".
func Hours(seconds int64) string { return hours(seconds) }

// Milli prints thousandths as a decimal number: 18000 → "18", 2500 → "2.5".
func Milli(m int64) string { return milli(m) }
