package billing

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
)

// Currency of every invoice.
const Currency = "USD"

// MinimumSeconds is the least a compute start bills: a closed interval
// shorter than this adds a minimum line for the rest.
const MinimumSeconds = 60

// Input is a snapshot to rate.
type Input struct {
	Period Period
	// AsOf is the time the invoice is as of: open intervals accrue until
	// min(AsOf, Period.End), and ledger entries at or after that have not
	// happened yet. Zero means Period.End (a final invoice).
	AsOf   time.Time
	Prices *PriceBook
	// Usage is the ledger with Time < Period.End in ID order, earlier
	// months included (an On before Start is open into the period).
	Usage       []*cloud.Usage
	Commitments []*cloud.Commitment
	// Tenants get an invoice even when it is empty; other tenants get one
	// when they have a line.
	Tenants []string
}

// CoverageHour is how many instance-seconds a commitment covered in a
// clock hour (UTC).
type CoverageHour struct {
	CommitmentID string    `json:"commitment_id"`
	Hour         time.Time `json:"hour"`
	Seconds      int64     `json:"seconds"`
}

// Result is Rate's output: invoices sorted by tenant, and the commitments'
// coverage by commitment ID and hour (hours with no coverage left out).
type Result struct {
	Invoices []*Invoice
	Coverage []CoverageHour
}

// Rate rates a snapshot of the ledger into invoices.
//
// Compute bills per second at the on-demand price of its offering and
// zone, or at the pool's spot price for spot instances, split wherever the
// price changes; a closed interval shorter than a minute adds a minimum
// line in the period of its end. Each clock hour, a tenant's commitments
// cover its matching on-demand seconds, at most Quantity×3600 per
// commitment (pro-rated by the part of the hour its term covers), the
// largest saving per second first (ties: commitment ID, instance ID, time);
// a commitment never covers a second at which it would cost more than
// on demand. Commitments add their hourly fee for the seconds of the term
// in the period and their upfront fee in the period they start. Volumes
// bill GiB-seconds at the per-GiB-month price, addresses seconds at the
// hourly price. A second that accrues where no price is in force is an
// error.
func Rate(in Input) (*Result, error) {
	if in.Prices == nil {
		return nil, errors.New("billing: no price book")
	}
	if !in.Period.End.After(in.Period.Start) {
		return nil, fmt.Errorf("billing: empty period [%s, %s)", in.Period.Start, in.Period.End)
	}
	asOf := in.AsOf
	if asOf.IsZero() {
		asOf = in.Period.End
	}
	cut := asOf
	if cut.After(in.Period.End) {
		cut = in.Period.End
	}
	r := &rater{
		book:  in.Prices,
		p:     in.Period,
		asOf:  asOf,
		start: floorSec(in.Period.Start),
		end:   floorSec(in.Period.End),
		od:    map[okey]*schedule{},
		spot:  map[okey]*schedule{},
	}
	r.cut = max(r.start, min(floorSec(cut), r.end))
	r.cutTime = cut

	// Index by tenant: intervals and commitments.
	tenants := map[string]*tenantWork{}
	get := func(id string) *tenantWork {
		t := tenants[id]
		if t == nil {
			t = &tenantWork{id: id}
			tenants[id] = t
		}
		return t
	}
	for _, u := range in.Usage {
		if u == nil || !u.Time.Before(cut) {
			continue
		}
		t := get(u.TenantID)
		t.usage = append(t.usage, u)
	}
	for _, c := range in.Commitments {
		if c == nil {
			continue
		}
		t := get(c.TenantID)
		t.commits = append(t.commits, len(r.commits))
		r.commits = append(r.commits, c)
	}
	explicit := map[string]bool{}
	for _, id := range in.Tenants {
		explicit[id] = true
		get(id)
	}
	ids := make([]string, 0, len(tenants))
	for id := range tenants {
		ids = append(ids, id)
	}
	sort.Strings(ids)

	res := &Result{}
	r.acc = map[lkey]int64{}
	for _, id := range ids {
		inv, err := r.tenant(tenants[id])
		if err != nil {
			return nil, err
		}
		if len(inv.Lines) > 0 || explicit[id] {
			res.Invoices = append(res.Invoices, inv)
		}
	}
	res.Coverage = r.coverage
	sort.Slice(res.Coverage, func(i, j int) bool {
		a, b := res.Coverage[i], res.Coverage[j]
		if a.CommitmentID != b.CommitmentID {
			return a.CommitmentID < b.CommitmentID
		}
		return a.Hour.Before(b.Hour)
	})
	return res, nil
}

type tenantWork struct {
	id      string
	usage   []*cloud.Usage
	commits []int // indices into rater.commits
}

// Categories in line order.
const (
	catCompute uint8 = iota
	catMinimum
	catUpfront
	catFee
	catVolume
	catAddress
)

var categories = [...]Category{CategoryCompute, CategoryMinimum, CategoryCommitmentUpfront, CategoryCommitmentFee, CategoryVolume, CategoryAddress}

// lkey is what an invoice line groups: category, price schedule (offering,
// zone and model), commitment and unit price.
type lkey struct {
	cat    uint8
	sched  int32 // index into rater.scheds, -1 for commitment fees
	commit int32 // index into rater.commits, -1 when none
	price  money.Micros
}

type schedKind uint8

const (
	schedOnDemand schedKind = iota
	schedSpot
	schedVolume
	schedAddress
)

// schedule is a price as a step function of whole seconds over the
// period: price[i] (ok[i] false when there is none) from at[i] until
// at[i+1]. at[0] is the period's start; equal neighbours are merged.
type schedule struct {
	id             int32
	kind           schedKind
	offering, zone string
	at             []int64
	price          []money.Micros
	ok             []bool
}

// find returns the index of the segment holding second t >= at[0].
func (s *schedule) find(t int64) int {
	return sort.Search(len(s.at), func(i int) bool { return s.at[i] > t }) - 1
}

type rater struct {
	book            *PriceBook
	p               Period
	asOf            time.Time
	start, end, cut int64 // the period and the cut (min(AsOf, End)) in whole seconds
	cutTime         time.Time

	pairer   pairer
	commits  []*cloud.Commitment
	scheds   []*schedule
	od, spot map[okey]*schedule
	vol      *schedule
	addr     *schedule
	acc      map[lkey]int64
	coverage []CoverageHour
	hw       hourWork
}

func (r *rater) build(kind schedKind, offering, zone string, pts []int64, price func(time.Time) (money.Micros, bool)) *schedule {
	sort.Slice(pts, func(i, j int) bool { return pts[i] < pts[j] })
	s := &schedule{id: int32(len(r.scheds)), kind: kind, offering: offering, zone: zone}
	for i, t := range pts {
		if i > 0 && t == pts[i-1] {
			continue
		}
		p, ok := price(unix(t))
		if n := len(s.at); n > 0 && s.ok[n-1] == ok && s.price[n-1] == p {
			continue
		}
		s.at = append(s.at, t)
		s.price = append(s.price, p)
		s.ok = append(s.ok, ok)
	}
	r.scheds = append(r.scheds, s)
	return s
}

func (r *rater) computePoints(pts []int64, offering, zone string) []int64 {
	if zone != "" {
		pts = changes(pts, r.book.compute[okey{offering, zone}], r.start, r.end)
	}
	return changes(pts, r.book.compute[okey{offering, ""}], r.start, r.end)
}

func (r *rater) onDemand(offering, zone string) *schedule {
	k := okey{offering, zone}
	if s := r.od[k]; s != nil {
		return s
	}
	pts := r.computePoints([]int64{r.start}, offering, zone)
	s := r.build(schedOnDemand, offering, zone, pts, func(t time.Time) (money.Micros, bool) {
		return r.book.Compute(offering, zone, t)
	})
	r.od[k] = s
	return s
}

func (r *rater) spotSched(offering, zone string) *schedule {
	k := okey{offering, zone}
	if s := r.spot[k]; s != nil {
		return s
	}
	pool := cloud.Pool{Offering: offering, Zone: zone}
	pts := changes([]int64{r.start}, r.book.spot[pool], r.start, r.end)
	pts = r.computePoints(pts, offering, zone)
	s := r.build(schedSpot, offering, zone, pts, func(t time.Time) (money.Micros, bool) {
		if p, ok := r.book.Spot(pool, t); ok {
			return p, true
		}
		return r.book.Compute(offering, zone, t)
	})
	r.spot[k] = s
	return s
}

func (r *rater) volSched() *schedule {
	if r.vol == nil {
		r.vol = r.build(schedVolume, "", "", changes([]int64{r.start}, r.book.volume, r.start, r.end), r.book.Volume)
	}
	return r.vol
}

func (r *rater) addrSched() *schedule {
	if r.addr == nil {
		r.addr = r.build(schedAddress, "", "", changes([]int64{r.start}, r.book.address, r.start, r.end), r.book.Address)
	}
	return r.addr
}

// MissingPriceError says that usage accrued where the price book has no
// price: an operator's gap to fill, not an internal failure.
type MissingPriceError struct {
	What string    // e.g. "on-demand price for offering h100.1x in us-east-1a"
	At   time.Time // when the usage accrued
}

func (e *MissingPriceError) Error() string {
	return "billing: no " + e.What + " at " + e.At.Format(time.RFC3339)
}

func (r *rater) noPrice(s *schedule, t int64) error {
	e := &MissingPriceError{At: unix(t)}
	switch s.kind {
	case schedOnDemand:
		e.What = fmt.Sprintf("on-demand price for offering %s in %s", s.offering, zoneName(s.zone))
	case schedSpot:
		e.What = fmt.Sprintf("price for spot pool %s/%s (no spot price yet and no on-demand price for offering %s in %s)",
			s.offering, s.zone, s.offering, zoneName(s.zone))
	case schedVolume:
		e.What = "volume price"
	default:
		e.What = "address price"
	}
	return e
}

func zoneName(z string) string {
	if z == "" {
		return "any zone"
	}
	return "zone " + z
}

// add accrues qty units for each second of [a, b) at the prices of s.
func (r *rater) add(cat uint8, s *schedule, a, b, qty int64) error {
	if a >= b || qty == 0 {
		return nil
	}
	for i := s.find(a); i < len(s.at) && s.at[i] < b; i++ {
		lo, hi := max(a, s.at[i]), b
		if i+1 < len(s.at) {
			hi = min(b, s.at[i+1])
		}
		if !s.ok[i] {
			return r.noPrice(s, lo)
		}
		r.acc[lkey{cat, s.id, -1, s.price[i]}] += (hi - lo) * qty
	}
	return nil
}

// matchOffering reports whether a commitment for offering c (an offering
// or a family) matches offering o.
func matchOffering(c, o string) bool {
	return o == c || len(o) > len(c) && o[len(c)] == '.' && o[:len(c)] == c
}

func matches(c *cloud.Commitment, offering, zone string) bool {
	return matchOffering(c.Offering, offering) && (c.Zone == "" || c.Zone == zone)
}

func overlap(a, b, c, d int64) int64 { return max(0, min(b, d)-max(a, c)) }

func (r *rater) tenant(t *tenantWork) (*Invoice, error) {
	clear(r.acc)
	// The tenant's commitments that can cover seconds of this invoice.
	var tcs []tcommit
	for _, ci := range t.commits {
		c := r.commits[ci]
		ts, te := floorSec(c.Start), floorSec(c.End)
		if c.Quantity > 0 && overlap(ts, te, r.start, r.cut) > 0 {
			tcs = append(tcs, tcommit{c: c, idx: int32(ci), ts: ts, te: te})
		}
	}
	sort.Slice(tcs, func(i, j int) bool { return tcs[i].c.ID < tcs[j].c.ID })
	var deferred []dinterval
	var matchCache map[okey][]int

	ivs := r.pairer.pair(t.usage, r.cutTime)
	for i := range ivs {
		iv := &ivs[i]
		u := iv.on
		fs, fe := floorSec(iv.start), floorSec(iv.end)
		if fe < r.start {
			continue // ended before the period (its minimum too)
		}
		a, b := max(fs, r.start), min(fe, r.cut)
		switch u.Kind {
		case cloud.UsageCompute:
			spot := u.Market == cloud.MarketSpot
			var s *schedule
			if spot {
				s = r.spotSched(u.Offering, u.Zone)
			} else {
				s = r.onDemand(u.Offering, u.Zone)
			}
			if a < b {
				var cs []int
				if !spot && len(tcs) > 0 {
					k := okey{u.Offering, u.Zone}
					var ok bool
					if cs, ok = matchCache[k]; !ok {
						for i, tc := range tcs {
							if matches(tc.c, u.Offering, u.Zone) {
								cs = append(cs, i)
							}
						}
						if matchCache == nil {
							matchCache = map[okey][]int{}
						}
						matchCache[k] = cs
					}
				}
				covered := false
				for _, ci := range cs {
					covered = covered || overlap(a, b, tcs[ci].ts, tcs[ci].te) > 0
				}
				if covered {
					deferred = append(deferred, dinterval{a: a, b: b, inst: u.ResourceID, s: s, cs: cs})
				} else if err := r.add(catCompute, s, a, b, 1); err != nil {
					return nil, err
				}
			}
			if !iv.open && fe-fs < MinimumSeconds && fe >= r.start && fe < r.end {
				i := s.find(fe)
				if !s.ok[i] {
					return nil, r.noPrice(s, fe)
				}
				r.acc[lkey{catMinimum, s.id, -1, s.price[i]}] += MinimumSeconds - (fe - fs)
			}
		case cloud.UsageVolume:
			if u.Quantity > 0 {
				if err := r.add(catVolume, r.volSched(), a, b, u.Quantity); err != nil {
					return nil, err
				}
			}
		case cloud.UsageAddress:
			if err := r.add(catAddress, r.addrSched(), a, b, 1); err != nil {
				return nil, err
			}
		}
	}
	if len(deferred) > 0 {
		if err := r.cover(tcs, deferred); err != nil {
			return nil, err
		}
	}

	// Commitment fees.
	for _, ci := range t.commits {
		c := r.commits[ci]
		if c.HourlyFee != 0 && c.Quantity > 0 {
			if sec := overlap(floorSec(c.Start), floorSec(c.End), r.start, r.cut); sec > 0 {
				r.acc[lkey{catFee, -1, int32(ci), c.HourlyFee}] += int64(c.Quantity) * sec
			}
		}
		if c.UpfrontFee != 0 && !c.Start.Before(r.p.Start) && c.Start.Before(r.p.End) && !c.Start.After(r.asOf) {
			r.acc[lkey{catUpfront, -1, int32(ci), c.UpfrontFee}] = 1
		}
	}
	return r.invoice(t.id)
}

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

// ---- commitment coverage ----

// tcommit is a tenant's commitment with its term in whole seconds.
type tcommit struct {
	c      *cloud.Commitment
	idx    int32 // index into rater.commits
	ts, te int64
}

// dinterval is an on-demand interval [a, b) that some commitment matches.
type dinterval struct {
	a, b int64
	inst string
	s    *schedule
	cs   []int // indices into the tenant's tcommits
}

type piece struct {
	d       int32 // index into the deferred intervals
	a, n    int64 // first second and length
	price   money.Micros
	covered int64
}

type candidate struct {
	saving money.Micros
	tc     int32
	piece  int32
}

type delta struct {
	k   lkey
	sec int64
}

// hourWork is scratch space reused across hours and tenants.
type hourWork struct {
	pieces []piece
	cands  []candidate
	pts    []int64
	capa   []int64
	cov    []int64
	deltas []delta
}

// cover rates deferred on-demand intervals, hour by hour, as covered by
// the tenant's commitments or on demand. An hour in which nothing starts,
// ends or changes price, and that starts with nothing changing, rates as
// the hour before it, so that only hours with changes are worked out.
func (r *rater) cover(tcs []tcommit, ds []dinterval) error {
	sort.Slice(ds, func(i, j int) bool { return ds[i].a < ds[j].a })
	// Breakpoints: where anything that matters to an hour's allocation
	// changes.
	bps := []int64{r.cut}
	seen := map[*schedule]bool{}
	for _, d := range ds {
		bps = append(bps, d.a, d.b)
		if !seen[d.s] {
			seen[d.s] = true
			bps = append(bps, d.s.at[1:]...)
		}
	}
	for _, tc := range tcs {
		bps = append(bps, tc.ts, tc.te)
	}
	sort.Slice(bps, func(i, j int) bool { return bps[i] < bps[j] })

	w := &r.hw
	w.capa = resize(w.capa, len(tcs))
	w.cov = resize(w.cov, len(tcs))
	var active []int32
	next, bi := 0, 0
	prevClean := false
	var mul int64
	h0 := r.start - mod(r.start, 3600)
	for h := h0; h < r.cut; h += 3600 {
		he := h + 3600
		for bi < len(bps) && bps[bi] < h {
			bi++
		}
		atH := bi < len(bps) && bps[bi] == h
		j := bi
		for j < len(bps) && bps[j] == h {
			j++
		}
		clean := (j >= len(bps) || bps[j] >= he) && he <= r.cut
		for next < len(ds) && ds[next].a < he {
			active = append(active, int32(next))
			next++
		}
		keep := active[:0]
		for _, k := range active {
			if ds[k].b > h {
				keep = append(keep, k)
			}
		}
		active = keep
		if clean && prevClean && !atH {
			mul++
			r.recordCoverage(tcs, h)
			continue
		}
		r.flush(mul)
		if err := r.coverHour(tcs, ds, active, h, he); err != nil {
			return err
		}
		mul, prevClean = 1, clean
		r.recordCoverage(tcs, h)
	}
	r.flush(mul)
	return nil
}

func mod(a, m int64) int64 {
	x := a % m
	if x < 0 {
		x += m
	}
	return x
}

func resize(s []int64, n int) []int64 {
	if cap(s) < n {
		return make([]int64, n)
	}
	s = s[:n]
	clear(s)
	return s
}

func (r *rater) flush(mul int64) {
	for _, d := range r.hw.deltas {
		r.acc[d.k] += d.sec * mul
	}
	r.hw.deltas = r.hw.deltas[:0]
}

func (r *rater) recordCoverage(tcs []tcommit, h int64) {
	for i, s := range r.hw.cov {
		if s > 0 {
			r.coverage = append(r.coverage, CoverageHour{CommitmentID: tcs[i].c.ID, Hour: unix(h), Seconds: s})
		}
	}
}

// coverHour allocates the hour [h, he) and leaves its lines in hw.deltas
// and its coverage in hw.cov.
func (r *rater) coverHour(tcs []tcommit, ds []dinterval, active []int32, h, he int64) error {
	w := &r.hw
	w.pieces, w.cands = w.pieces[:0], w.cands[:0]
	for i, tc := range tcs {
		w.capa[i] = int64(tc.c.Quantity) * overlap(h, h+3600, tc.ts, tc.te)
		w.cov[i] = 0
	}
	for _, k := range active {
		d := &ds[k]
		a, b := max(d.a, h), min(d.b, he)
		if a >= b {
			continue
		}
		// Split at price changes and at the terms of its commitments, so
		// that each piece has one price and each commitment is active over
		// all of it or none.
		pts := append(w.pts[:0], a)
		si := d.s.find(a)
		for i := si + 1; i < len(d.s.at) && d.s.at[i] < b; i++ {
			pts = append(pts, d.s.at[i])
		}
		for _, ci := range d.cs {
			tc := &tcs[ci]
			if a < tc.ts && tc.ts < b {
				pts = append(pts, tc.ts)
			}
			if a < tc.te && tc.te < b {
				pts = append(pts, tc.te)
			}
		}
		if len(pts) > 2 {
			sort.Slice(pts, func(i, j int) bool { return pts[i] < pts[j] })
		}
		pts = append(pts, b)
		w.pts = pts
		for i := 0; i+1 < len(pts); i++ {
			x, y := pts[i], pts[i+1]
			if x == y {
				continue
			}
			for si+1 < len(d.s.at) && d.s.at[si+1] <= x {
				si++
			}
			if !d.s.ok[si] {
				return r.noPrice(d.s, x)
			}
			p := piece{d: k, a: x, n: y - x, price: d.s.price[si]}
			pi := int32(len(w.pieces))
			w.pieces = append(w.pieces, p)
			for _, ci := range d.cs {
				tc := &tcs[ci]
				if tc.ts <= x && y <= tc.te && p.price >= tc.c.UsageRate {
					w.cands = append(w.cands, candidate{saving: p.price - tc.c.UsageRate, tc: int32(ci), piece: pi})
				}
			}
		}
	}
	cands := w.cands
	sort.Slice(cands, func(i, j int) bool {
		x, y := &cands[i], &cands[j]
		if x.saving != y.saving {
			return x.saving > y.saving
		}
		if x.tc != y.tc {
			return x.tc < y.tc // tcs are sorted by ID
		}
		px, py := &w.pieces[x.piece], &w.pieces[y.piece]
		if ix, iy := ds[px.d].inst, ds[py.d].inst; ix != iy {
			return ix < iy
		}
		return px.a < py.a
	})
	for _, cd := range cands {
		p := &w.pieces[cd.piece]
		take := min(w.capa[cd.tc], p.n-p.covered)
		if take <= 0 {
			continue
		}
		p.covered += take
		w.capa[cd.tc] -= take
		w.cov[cd.tc] += take
		tc := &tcs[cd.tc]
		w.deltas = append(w.deltas, delta{lkey{catCompute, ds[p.d].s.id, tc.idx, tc.c.UsageRate}, take})
	}
	for i := range w.pieces {
		p := &w.pieces[i]
		if rest := p.n - p.covered; rest > 0 {
			w.deltas = append(w.deltas, delta{lkey{catCompute, ds[p.d].s.id, -1, p.price}, rest})
		}
	}
	return nil
}
