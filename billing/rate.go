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
	// Endpoints names the serverless endpoints of the usage's compute
	// entries (ID to name), which their lines show; an endpoint not named
	// here is shown by its ID.
	Endpoints map[string]string
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
// error. The seconds of an endpoint's workers (usage with an EndpointID)
// rate as any instance's, on lines of their own per endpoint.
func Rate(in Input) (*Result, error) {
	if in.Prices == nil {
		return nil, errors.New("billing: no price book")
	}
	if !in.Period.End.After(in.Period.Start) {
		return nil, fmt.Errorf("billing: empty period [%s, %s)", in.Period.Start, in.Period.End)
	}
	r := newRater(in)
	tenants, explicit := r.byTenant(in)
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

// newRater sets up the rating of in's period up to its as-of time (the
// period's end when unset), cut at the period's end.
func newRater(in Input) *rater {
	asOf := in.AsOf
	if asOf.IsZero() {
		asOf = in.Period.End
	}
	cut := asOf
	if cut.After(in.Period.End) {
		cut = in.Period.End
	}
	r := &rater{
		book:    in.Prices,
		p:       in.Period,
		asOf:    asOf,
		start:   floorSec(in.Period.Start),
		end:     floorSec(in.Period.End),
		od:      map[okey]*schedule{},
		spot:    map[okey]*schedule{},
		eps:     []string{""},
		epIdx:   map[string]int32{},
		epNames: in.Endpoints,
	}
	r.cut = max(r.start, min(floorSec(cut), r.end))
	r.cutTime = cut
	return r
}

// byTenant indexes the usage before the cut and the commitments by tenant,
// and adds the tenants in.Tenants names (explicit), which get an invoice
// even when it has no lines. It fills r.commits.
func (r *rater) byTenant(in Input) (tenants map[string]*tenantWork, explicit map[string]bool) {
	tenants = map[string]*tenantWork{}
	get := func(id string) *tenantWork {
		t := tenants[id]
		if t == nil {
			t = &tenantWork{id: id}
			tenants[id] = t
		}
		return t
	}
	for _, u := range in.Usage {
		if u == nil || !u.Time.Before(r.cutTime) {
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
	explicit = map[string]bool{}
	for _, id := range in.Tenants {
		explicit[id] = true
		get(id)
	}
	return tenants, explicit
}

// tenantWork is one tenant's share of the input.
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
// zone and model), commitment, unit price and endpoint.
type lkey struct {
	cat    uint8
	sched  int32 // index into rater.scheds, -1 for commitment fees
	commit int32 // index into rater.commits, -1 when none
	price  money.Micros
	ep     int32 // index into rater.eps, 0 when none
}

// rater rates one Input: the price schedules built so far, shared by its
// tenants, and the quantities accrued for the tenant being rated (acc,
// cleared per tenant).
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
	// eps are the endpoint IDs seen (eps[0] is none), epIdx their
	// indices, epNames their names (Input.Endpoints).
	eps     []string
	epIdx   map[string]int32
	epNames map[string]string
}

// endpoint answers the index in r.eps of endpoint id (0 for none).
func (r *rater) endpoint(id string) int32 {
	if id == "" {
		return 0
	}
	i, ok := r.epIdx[id]
	if !ok {
		i = int32(len(r.eps))
		r.eps = append(r.eps, id)
		r.epIdx[id] = i
	}
	return i
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

// tenant rates one tenant's usage and commitments into its invoice.
// Compute seconds that a commitment could cover are deferred to cover,
// which rates them hour by hour; everything else accrues at once.
func (r *rater) tenant(t *tenantWork) (*Invoice, error) {
	clear(r.acc)
	tr := &tenantRating{tcs: r.coverable(t)}
	ivs := r.pairer.pair(t.usage, r.cutTime)
	for i := range ivs {
		if err := r.interval(tr, &ivs[i]); err != nil {
			return nil, err
		}
	}
	if len(tr.deferred) > 0 {
		if err := r.cover(tr.tcs, tr.deferred); err != nil {
			return nil, err
		}
	}
	r.commitmentFees(t)
	return r.invoice(t.id)
}

// tenantRating is the state of one tenant's rating between intervals.
type tenantRating struct {
	tcs      []tcommit   // the commitments that can cover seconds, by ID
	deferred []dinterval // on-demand seconds left to cover
	// matchCache holds, per offering and zone, the indices into tcs of
	// the commitments that match it.
	matchCache map[okey][]int
}

// coverable lists t's commitments that can cover seconds of this invoice,
// sorted by ID.
func (r *rater) coverable(t *tenantWork) []tcommit {
	var tcs []tcommit
	for _, ci := range t.commits {
		c := r.commits[ci]
		ts, te := floorSec(c.Start), floorSec(c.End)
		if c.Quantity > 0 && overlap(ts, te, r.start, r.cut) > 0 {
			tcs = append(tcs, tcommit{c: c, idx: int32(ci), ts: ts, te: te})
		}
	}
	sort.Slice(tcs, func(i, j int) bool { return tcs[i].c.ID < tcs[j].c.ID })
	return tcs
}

// matching returns the indices into tr.tcs of the commitments that match
// offering and zone.
func (tr *tenantRating) matching(offering, zone string) []int {
	k := okey{offering, zone}
	cs, ok := tr.matchCache[k]
	if ok {
		return cs
	}
	for i, tc := range tr.tcs {
		if matches(tc.c, offering, zone) {
			cs = append(cs, i)
		}
	}
	if tr.matchCache == nil {
		tr.matchCache = map[okey][]int{}
	}
	tr.matchCache[k] = cs
	return cs
}

// interval accrues the seconds of one usage interval inside the period
// and before the cut.
func (r *rater) interval(tr *tenantRating, iv *ival) error {
	u := iv.on
	fs, fe := floorSec(iv.start), floorSec(iv.end)
	if fe < r.start {
		return nil // ended before the period (its minimum too)
	}
	a, b := max(fs, r.start), min(fe, r.cut)
	switch u.Kind {
	case cloud.UsageCompute:
		return r.compute(tr, iv, a, b)
	case cloud.UsageVolume:
		if u.Quantity > 0 {
			return r.add(catVolume, r.volSched(), 0, a, b, u.Quantity)
		}
	case cloud.UsageAddress:
		return r.add(catAddress, r.addrSched(), 0, a, b, 1)
	}
	return nil
}

// compute accrues the seconds [a, b) of a compute interval at its spot or
// on-demand price, deferring on-demand seconds a commitment's term
// overlaps, and the minimum of a closed interval shorter than
// MinimumSeconds that ends in the period.
func (r *rater) compute(tr *tenantRating, iv *ival, a, b int64) error {
	u := iv.on
	fs, fe := floorSec(iv.start), floorSec(iv.end)
	spot := u.Market == cloud.MarketSpot
	ep := r.endpoint(u.EndpointID)
	var s *schedule
	if spot {
		s = r.spotSched(u.Offering, u.Zone)
	} else {
		s = r.onDemand(u.Offering, u.Zone)
	}
	if a < b {
		var cs []int
		if !spot && len(tr.tcs) > 0 {
			cs = tr.matching(u.Offering, u.Zone)
		}
		covered := false
		for _, ci := range cs {
			covered = covered || overlap(a, b, tr.tcs[ci].ts, tr.tcs[ci].te) > 0
		}
		if covered {
			tr.deferred = append(tr.deferred, dinterval{a: a, b: b, inst: u.ResourceID, s: s, cs: cs, ep: ep})
		} else if err := r.add(catCompute, s, ep, a, b, 1); err != nil {
			return err
		}
	}
	if !iv.open && fe-fs < MinimumSeconds && fe >= r.start && fe < r.end {
		i := s.find(fe)
		if !s.ok[i] {
			return r.noPrice(s, fe)
		}
		r.acc[lkey{catMinimum, s.id, -1, s.price[i], ep}] += MinimumSeconds - (fe - fs)
	}
	return nil
}

// commitmentFees accrues t's commitments' hourly fees for the seconds of
// their terms before the cut, and their upfront fees in the period they
// start (once that is not after the as-of time).
func (r *rater) commitmentFees(t *tenantWork) {
	for _, ci := range t.commits {
		c := r.commits[ci]
		if c.HourlyFee != 0 && c.Quantity > 0 {
			if sec := overlap(floorSec(c.Start), floorSec(c.End), r.start, r.cut); sec > 0 {
				r.acc[lkey{catFee, -1, int32(ci), c.HourlyFee, 0}] += int64(c.Quantity) * sec
			}
		}
		if c.UpfrontFee != 0 && !c.Start.Before(r.p.Start) && c.Start.Before(r.p.End) && !c.Start.After(r.asOf) {
			r.acc[lkey{catUpfront, -1, int32(ci), c.UpfrontFee, 0}] = 1
		}
	}
}
