package advise

import (
	"fmt"
	"math"
	"time"

	"github.com/gpucloud/gpucloud/billing"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
)

// pricer prices one offering's mixes for the workload.
type pricer struct {
	w        *Workload
	need     *Need
	offering string
	q        *Quote
	terms    CommitmentTerms
}

// costed is one mix's price, or why the mix is left out: dim and why set
// exclude it with that reason; why alone (dim empty) means the mix does
// not apply and a note of the advice says so once.
type costed struct {
	compute            money.Micros
	zone               string
	odNodes, spotNodes int
	reclaimsMilli      int64
	lost               int64 // seconds of running time each node loses
	reasons            []string

	dim Dimension
	why string
}

// maxReclaimRateBP caps a pool's reclaim rate at 100 an hour, which keeps
// every product within 64 bits; spot is refused long before that.
const maxReclaimRateBP = 1_000_000

// bpHour is the denominator of a rate in basis points per hour applied to
// seconds.
const bpHour = 10_000 * money.SecondsPerHour

// commitmentEpoch is the start given to billing.NewCommitment: only the
// term's length matters to a price, and the advisor has no clock.
var commitmentEpoch = time.Unix(0, 0).UTC()

func (p pricer) price(mix Mix) (costed, error) {
	switch mix {
	case OnDemand:
		return p.onDemand()
	case Reserved:
		return p.reserved()
	case Retainer:
		return p.retainer()
	case Spot:
		return p.spot(0)
	case OnDemandSpot:
		if p.w.Nodes < 2 {
			return costed{why: "a mix needs two nodes or more"}, nil
		}
		return p.spot(1)
	}
	return costed{}, fmt.Errorf("unknown mix %q", mix)
}

// instanceSeconds is the nodes' running time: Nodes × RunSeconds.
func (p pricer) instanceSeconds() int64 { return int64(p.w.Nodes) * p.need.RunSeconds }

func (p pricer) onDemand() (costed, error) {
	c := costed{zone: p.q.Zone, odNodes: p.w.Nodes}
	var err error
	if c.compute, err = money.MulDiv(p.q.OnDemand, p.instanceSeconds(), money.SecondsPerHour); err != nil {
		return c, err
	}
	c.reasons = append(c.reasons, fmt.Sprintf("on demand at %s/h%s × %s × %s: %s",
		money.FormatPrice(p.q.OnDemand), inZone(p.q.Zone), plural(int64(p.w.Nodes), "node", "nodes"), Hours(p.need.RunSeconds), money.FormatAmount(c.compute)))
	return c, nil
}

// commitment prices a commitment of the nodes for the workload's days
// with billing.NewCommitment, the function the server buys them with:
// the upfront fee, the hourly fee for every hour of the term, and the
// usage rate for the hours used.
func (p pricer) commitment(plan cloud.Plan, payment cloud.Payment, discountBP int64) (*cloud.Commitment, money.Micros, error) {
	c, err := billing.NewCommitment(billing.CommitmentSpec{TenantID: "advise", Plan: string(plan), Offering: p.offering,
		Quantity: p.w.Nodes, Term: time.Duration(p.w.Days) * 24 * time.Hour, Payment: payment, DiscountBP: discountBP,
		Start: commitmentEpoch}, p.q.OnDemand, commitmentEpoch)
	if err != nil {
		return nil, 0, err
	}
	held, err := money.MulDiv(c.HourlyFee, int64(p.w.Nodes)*p.need.HeldSeconds, money.SecondsPerHour)
	if err != nil {
		return nil, 0, err
	}
	used, err := money.MulDiv(c.UsageRate, p.instanceSeconds(), money.SecondsPerHour)
	if err != nil {
		return nil, 0, err
	}
	total, err := sum(c.UpfrontFee, held, used)
	return c, total, err
}

// sum adds non-negative amounts, or reports that they overflow.
func sum(xs ...money.Micros) (money.Micros, error) {
	var t money.Micros
	for _, x := range xs {
		if x > math.MaxInt64-t {
			return 0, money.ErrOverflow
		}
		t += x
	}
	return t, nil
}

func (p pricer) reserved() (costed, error) {
	if p.terms.NoCommitments {
		return costed{why: "this market sells no commitments"}, nil
	}
	c := costed{zone: p.q.Zone, odNodes: p.w.Nodes}
	all, total, err := p.commitment(cloud.PlanReservation, cloud.PaymentAllUpfront, p.terms.ReservationDiscountBP)
	if err != nil {
		return c, err
	}
	c.compute = total
	_, noUpfront, err := p.commitment(cloud.PlanReservation, cloud.PaymentNoUpfront, p.terms.ReservationDiscountBP)
	if err != nil {
		return c, err
	}
	utilBP := p.need.RunSeconds * 10_000 / p.need.HeldSeconds
	c.reasons = append(c.reasons,
		fmt.Sprintf("reservation of %s for %s, all upfront, %s off %s/h: %s, held 24 h/day used or not (no upfront: %s)",
			plural(int64(p.w.Nodes), "node", "nodes"), Duration(p.need.HeldSeconds), percent(all.DiscountBP), money.FormatPrice(p.q.OnDemand),
			money.FormatAmount(total), money.FormatAmount(noUpfront)),
		fmt.Sprintf("breaks even with on demand at %s utilisation; this workload uses %s of each day",
			percent(10_000-all.DiscountBP), percent(utilBP)))
	return c, nil
}

func (p pricer) retainer() (costed, error) {
	if p.terms.NoCommitments {
		return costed{why: "this market sells no commitments"}, nil
	}
	c := costed{zone: p.q.Zone, odNodes: p.w.Nodes}
	r, total, err := p.commitment(cloud.PlanRetainer, "", p.terms.RetainerDiscountBP)
	if err != nil {
		return c, err
	}
	c.compute = total
	c.reasons = append(c.reasons, fmt.Sprintf("retainer for %s: a fee of %s/h per node, 24 h/day, and the hours used at %s/h (%s off): %s",
		Duration(p.need.HeldSeconds), money.FormatPrice(r.HourlyFee), money.FormatPrice(r.UsageRate), percent(r.DiscountBP), money.FormatAmount(total)))
	return c, nil
}

// spot prices the job with base nodes on demand and the rest on spot, in
// the pool where that costs least. Every reclaim of one of its spot nodes
// stops the whole job (its nodes work in step), which loses half a
// checkpoint interval on average on every node.
func (p pricer) spot(base int) (costed, error) {
	w := p.w
	if !w.Interruptible() {
		return costed{why: "the workload cannot be interrupted"}, nil
	}
	if len(p.q.Spot) == 0 {
		return costed{dim: DimPricing, why: "no spot pool for it"}, nil
	}
	spotNodes := w.Nodes - base
	ckpt := int64(w.CheckpointInterval / time.Second)
	var best *costed
	var refused string
	for _, pool := range p.q.Spot {
		rate, rateWhy := pool.ReclaimRateBP, "recent"
		switch {
		case pool.Assumed:
			rateWhy = "assumed"
		case !pool.RateKnown:
			rate, rateWhy = DefaultReclaimRateBP, "assumed: the pool ran no spot recently"
		}
		rate = min(rate, maxReclaimRateBP)
		jobRate := int64(spotNodes) * rate
		// A reclaim is expected before the first checkpoint when
		// jobRate × interval reaches an hour: the job would lose half its
		// work or more. Spot is not for such a job in such a pool.
		if jobRate*ckpt >= bpHour {
			if refused == "" {
				refused = fmt.Sprintf("the job expects a reclaim every %s%s (%s per node-hour%s), "+
					"sooner than its %s checkpoint interval: it would lose half its work or more",
					Duration(bpHour/max(jobRate, 1)), inZone(pool.Zone), decimal(rate, 10_000, 4), jobWord(spotNodes), Duration(ckpt))
			}
			continue
		}
		run := p.need.RunSeconds
		lost, err := money.MulDiv(money.Micros(run*jobRate), ckpt, 2*bpHour)
		if err != nil {
			return costed{}, err
		}
		reclaims, err := money.MulDiv(money.Micros(run*jobRate), 1000, bpHour)
		if err != nil {
			return costed{}, err
		}
		secs := run + int64(lost)
		sp, err := money.MulDiv(pool.Price, int64(spotNodes)*secs, money.SecondsPerHour)
		if err != nil {
			return costed{}, err
		}
		od, err := money.MulDiv(p.q.OnDemand, int64(base)*secs, money.SecondsPerHour)
		if err != nil {
			return costed{}, err
		}
		total, err := sum(sp, od)
		if err != nil {
			return costed{}, err
		}
		c := costed{compute: total, zone: pool.Zone, odNodes: base, spotNodes: spotNodes,
			reclaimsMilli: int64(reclaims), lost: int64(lost)}
		if best != nil && (c.compute > best.compute || c.compute == best.compute && c.zone >= best.zone) {
			continue
		}
		priceWhy := ""
		if pool.Assumed {
			priceWhy = fmt.Sprintf(" (assumed %s off on demand)", percent(DefaultSpotDiscountBP))
		}
		c.reasons = []string{fmt.Sprintf("spot at %s/h%s%s for %s × %s (%s + %s lost to reclaims)",
			money.FormatPrice(pool.Price), inZone(pool.Zone), priceWhy, plural(int64(spotNodes), "node", "nodes"), Hours(secs), Hours(run), Hours(c.lost))}
		if base > 0 {
			c.reasons = append(c.reasons, fmt.Sprintf("%s on demand at %s/h for the job's head, which keeps running through reclaims",
				plural(int64(base), "node", "nodes"), money.FormatPrice(p.q.OnDemand)))
		}
		c.reasons = append(c.reasons, fmt.Sprintf("%s reclaims per node-hour (%s)%s: %s expected reclaims, each losing half "+
			"of the %s checkpoint interval: %s (%s) more running time; total %s",
			decimal(rate, 10_000, 4), rateWhy, jobWord(spotNodes), decimal(c.reclaimsMilli, 1000, 2), Duration(ckpt),
			Hours(c.lost), percent(c.lost*10_000/max(run, 1)), money.FormatAmount(c.compute)))
		best = &c
	}
	if best == nil {
		return costed{dim: DimPricing, why: "spot: " + refused}, nil
	}
	return *best, nil
}

// jobWord says that the job's reclaim rate is its spot nodes' together.
func jobWord(spotNodes int) string {
	if spotNodes == 1 {
		return ""
	}
	return fmt.Sprintf(" on each of %d spot nodes, any of which stops the job", spotNodes)
}

func inZone(zone string) string {
	if zone == "" {
		return ""
	}
	return " in " + zone
}

// percent prints basis points: 2500 is "25%", 1250 "12.5%".
func percent(bp int64) string { return decimal(bp, 100, 2) + "%" }
