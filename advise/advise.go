package advise

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/money"
)

// Mix is how an option is priced.
type Mix string

const (
	// OnDemand: every node on demand, billed per second.
	OnDemand Mix = "on_demand"
	// Reserved: a reservation of the nodes for the workload's days, all
	// upfront (the largest discount), held 24 h a day.
	Reserved Mix = "reserved"
	// Retainer: the retainer plan: a fee for every hour of the days, and
	// the hours used at a discount.
	Retainer Mix = "retainer"
	// Spot: every node on spot, in the pool with the lowest expected
	// cost (reclaim losses included).
	Spot Mix = "spot"
	// OnDemandSpot: one node on demand (the job's head, which keeps
	// running), the others on spot; for jobs of two nodes or more.
	OnDemandSpot Mix = "on_demand+spot"
)

// mixes lists the mixes in the order ties are broken.
var mixes = []Mix{OnDemand, Reserved, Retainer, Spot, OnDemandSpot}

// String names the mix for people: "on demand", "on demand + spot".
func (m Mix) String() string {
	return strings.ReplaceAll(strings.ReplaceAll(string(m), "_", " "), "+", " + ")
}

// Dimension is what a reason is about: the seed article's three
// dimensions of its selection matrix (compute density, network topology,
// storage), then price, availability, deadline and budget.
type Dimension string

const (
	DimCompute      Dimension = "compute"
	DimNetwork      Dimension = "network"
	DimStorage      Dimension = "storage"
	DimPricing      Dimension = "pricing"
	DimAvailability Dimension = "availability"
	DimDeadline     Dimension = "deadline"
	DimBudget       Dimension = "budget"
)

// Reason is one line of why.
type Reason struct {
	Dimension Dimension `json:"dimension"`
	Text      string    `json:"text"`
}

// Fit says whether an option fits in the fleet right now.
type Fit string

const (
	FitsYes     Fit = "yes"
	FitsNo      Fit = "no"
	FitsUnknown Fit = "unknown"
)

// Option is one offering with one pricing mix, and what it costs to run
// the whole workload on it.
type Option struct {
	// Rank is the option's place, 1 first.
	Rank     int          `json:"rank"`
	Offering string       `json:"offering"`
	Mode     catalog.Mode `json:"mode"`
	Model    string       `json:"model"`
	Arch     Arch         `json:"arch,omitempty"`
	// GPUMemoryMiB is the memory of one GPU (or of the slice or share);
	// GPUs how many the instance has, Split how many the model spreads
	// over on each node.
	GPUMemoryMiB int64 `json:"gpu_memory_mib"`
	GPUs         int   `json:"gpus"`
	Split        int   `json:"split"`
	// Native is true when the GPU runs the precision natively (Tensor
	// Cores; CUDA cores for fp32); false when it runs it the slow way or
	// its architecture is unknown.
	Native bool `json:"native"`
	Mix    Mix  `json:"mix"`
	// Zone is the spot pool's zone, or the zone of a zonal on-demand
	// price; empty for any zone.
	Zone          string `json:"zone,omitempty"`
	Nodes         int    `json:"nodes"`
	OnDemandNodes int    `json:"on_demand_nodes"`
	SpotNodes     int    `json:"spot_nodes"`
	// Total is Compute plus Storage: the whole workload's cost.
	Total   money.Micros `json:"total"`
	Compute money.Micros `json:"compute"`
	Storage money.Micros `json:"storage"`
	// PerInstanceHour is Compute per instance-hour of the workload's
	// schedule (reclaim losses and commitment hours included).
	PerInstanceHour money.Micros `json:"per_instance_hour"`
	FitsNow         Fit          `json:"fits_now"`
	// ExpectedReclaimsMilli and LostSeconds are a spot option's expected
	// reclaims (thousandths) and the running time they cost each node.
	ExpectedReclaimsMilli int64 `json:"expected_reclaims_milli,omitempty"`
	LostSeconds           int64 `json:"lost_seconds,omitempty"`
	// CompletionSeconds is when the work is expected to be done, from
	// the start: the last day's running time after Days−1 whole days,
	// stretched by reclaim losses.
	CompletionSeconds int64    `json:"completion_seconds"`
	Reasons           []Reason `json:"reasons"`
}

// Exclusion is an offering, or one of its mixes, that the workload
// cannot use, and why.
type Exclusion struct {
	Offering string `json:"offering"`
	// Mix is empty when the offering as a whole is excluded.
	Mix       Mix       `json:"mix,omitempty"`
	Dimension Dimension `json:"dimension"`
	Reason    string    `json:"reason"`
}

// Advice is Advise's answer.
type Advice struct {
	Workload Workload `json:"workload"`
	Need     Need     `json:"need"`
	// Source is the market's: "list prices", "live from ...".
	Source string `json:"source"`
	// Options are ranked: those that fit now or may (unknown) before
	// those that do not, each group by Total, lowest first.
	Options []Option `json:"options"`
	// Excluded lists every offering and mix left out, in catalog order.
	Excluded []Exclusion `json:"excluded"`
	// Notes are remarks about the whole advice (why spot is absent,
	// which numbers were assumed).
	Notes []string `json:"notes,omitempty"`
}

// Advise ranks the ways to run w on the offerings of cat in market m.
// Every offering of cat ends up in Options (once per pricing mix it
// allows) or in Excluded with the reason. A mix other than on demand is
// offered only when it costs at least a cent less than on demand on the
// same offering: a commitment binds and spot risks the work, for nothing
// otherwise. It is pure: the same inputs give the same advice.
//
// An invalid workload is a *cloud.Error with code invalid_argument
// naming the field (several are joined); a nil market or catalog, a
// negative price in the market, or a cost that overflows is a plain
// error.
func Advise(w Workload, m *MarketView, cat *catalog.Catalog) (*Advice, error) {
	if err := w.Validate(); err != nil {
		return nil, err
	}
	if m == nil || cat == nil {
		return nil, errors.New("advise: a market and a catalog are required")
	}
	if err := m.check(); err != nil {
		return nil, err
	}
	need := Estimate(&w)
	a := &Advice{Workload: w, Need: need, Source: m.Source}
	storage, storageWhy, err := storageCost(&need, m)
	if err != nil {
		return nil, err
	}
	if !w.Interruptible() {
		a.Notes = append(a.Notes, "no spot: the workload cannot be interrupted (no checkpoint interval)")
	}
	if m.Terms.NoCommitments {
		a.Notes = append(a.Notes, "no reservations or retainers: this market sells no commitments")
	}
	ad := &adviser{w: &w, need: &need, m: m, cat: cat, a: a, storage: storage, storageWhy: storageWhy}
	for _, o := range cat.Offerings() {
		if err := ad.offering(o); err != nil {
			return nil, err
		}
	}
	rank(a.Options)
	return a, nil
}

// adviser holds what Advise works out once and the advice it fills in,
// offering by offering.
type adviser struct {
	w          *Workload
	need       *Need
	m          *MarketView
	cat        *catalog.Catalog
	a          *Advice
	storage    money.Micros // the storage cost, the same for every option
	storageWhy string
}

func (ad *adviser) exclude(o *catalog.Offering, mix Mix, d Dimension, why string) {
	ad.a.Excluded = append(ad.a.Excluded, Exclusion{Offering: o.Name, Mix: mix, Dimension: d, Reason: why})
}

// offering adds the options of offering o, one per pricing mix it allows,
// or excludes the offering or its mixes with the reason.
func (ad *adviser) offering(o *catalog.Offering) error {
	w, need := ad.w, ad.need
	f, dim, why := fitOffering(w, need, ad.cat, o)
	if f == nil {
		ad.exclude(o, "", dim, why)
		return nil
	}
	q, ok := ad.m.Offerings[o.Name]
	if !ok {
		ad.exclude(o, "", DimPricing, "not sold by this market: no price for it")
		return nil
	}
	fits, availWhy, why := availability(w, f, q.Availability)
	if why != "" {
		ad.exclude(o, "", DimAvailability, why)
		return nil
	}
	p := pricer{w: w, need: need, offering: o.Name, q: &q, terms: ad.m.Terms}
	var onDemand money.Micros // mixes[0]'s compute cost
	for _, mix := range mixes {
		c, err := p.price(mix)
		if err != nil {
			return fmt.Errorf("advise: %s %s: %w", o.Name, mix, err)
		}
		if c.why != "" {
			if c.dim != "" { // "" marks a mix that does not apply at all
				ad.exclude(o, mix, c.dim, c.why)
			}
			continue
		}
		total, err := sum(c.compute, ad.storage)
		if err != nil {
			return fmt.Errorf("advise: %s %s: %w", o.Name, mix, err)
		}
		if mix == OnDemand {
			onDemand = c.compute
		} else if c.compute.Round(cent) >= onDemand.Round(cent) {
			// A commitment binds and spot risks the work: neither is
			// worth it when on demand costs no more, to the cent (a
			// retainer at its break-even differs by rounding only).
			ad.exclude(o, mix, DimPricing, fmt.Sprintf("costs %s, no less than on demand (%s)", money.FormatAmount(c.compute), money.FormatAmount(onDemand)))
			continue
		}
		opt := ad.option(o, f, mix, &c, total, fits)
		if deadline := int64(w.Deadline / time.Second); deadline > 0 && opt.CompletionSeconds > deadline {
			ad.exclude(o, mix, DimDeadline, fmt.Sprintf("expected to finish after %s, past the %s deadline",
				Duration(opt.CompletionSeconds), Duration(deadline)))
			continue
		}
		if w.Budget > 0 && opt.Total > w.Budget {
			ad.exclude(o, mix, DimBudget, fmt.Sprintf("costs %s, over the budget of %s by %s",
				money.FormatAmount(opt.Total), money.FormatAmount(w.Budget), money.FormatAmount(opt.Total-w.Budget)))
			continue
		}
		opt.Reasons = ad.reasons(f, &c, availWhy)
		ad.a.Options = append(ad.a.Options, opt)
	}
	return nil
}

// option describes offering o, fitted as f, at the cost c of mix.
func (ad *adviser) option(o *catalog.Offering, f *fit, mix Mix, c *costed, total money.Micros, fits Fit) Option {
	w, need := ad.w, ad.need
	opt := Option{Offering: o.Name, Mode: o.Mode, Model: f.u.model.Name, Arch: f.u.arch,
		GPUMemoryMiB: f.u.perMiB, GPUs: f.u.gpus, Split: f.split, Native: f.support == Native, Mix: mix, Zone: c.zone,
		Nodes: w.Nodes, OnDemandNodes: c.odNodes, SpotNodes: c.spotNodes,
		Compute: c.compute, Storage: ad.storage, Total: total, FitsNow: fits,
		ExpectedReclaimsMilli: c.reclaimsMilli, LostSeconds: c.lost,
		CompletionSeconds: completion(need.RunSeconds+c.lost, int64(w.PerDay/time.Second))}
	opt.PerInstanceHour, _ = money.MulDiv(c.compute, 3600, int64(w.Nodes)*need.RunSeconds)
	return opt
}

// reasons lists why an option is what it is, dimension by dimension.
func (ad *adviser) reasons(f *fit, c *costed, availWhy string) []Reason {
	var rs []Reason
	for _, s := range f.compute {
		rs = append(rs, Reason{DimCompute, s})
	}
	for _, s := range f.network {
		rs = append(rs, Reason{DimNetwork, s})
	}
	rs = append(rs, Reason{DimStorage, ad.storageWhy})
	if f.scratch != "" {
		rs = append(rs, Reason{DimStorage, f.scratch})
	}
	for _, s := range c.reasons {
		rs = append(rs, Reason{DimPricing, s})
	}
	return append(rs, Reason{DimAvailability, availWhy})
}

// cent is one cent in micros.
const cent = 10_000

// rank sorts options: fitting now (or unknown) before not fitting, then
// by Total, then native precision support, then offering and mix.
func rank(opts []Option) {
	group := func(o *Option) int {
		if o.FitsNow == FitsNo {
			return 1
		}
		return 0
	}
	slices.SortStableFunc(opts, func(a, b Option) int {
		return cmp.Or(
			cmp.Compare(group(&a), group(&b)),
			cmp.Compare(a.Total, b.Total),
			cmp.Compare(supportRank(a), supportRank(b)),
			strings.Compare(a.Offering, b.Offering),
			cmp.Compare(slices.Index(mixes, a.Mix), slices.Index(mixes, b.Mix)),
			strings.Compare(a.Zone, b.Zone))
	})
	for i := range opts {
		opts[i].Rank = i + 1
	}
}

// supportRank orders native precision support first.
func supportRank(o Option) int {
	if o.Native {
		return 0
	}
	return 1
}

// availability says whether the offering fits now, for the reasons, or
// why the fleet can never run the job.
func availability(w *Workload, f *fit, av *Availability) (Fit, string, string) {
	if av == nil {
		return FitsUnknown, "fits now: unknown (the market has no fleet information)", ""
	}
	if av.Hosts == 0 {
		return "", "", "no host of the fleet could ever run it"
	}
	if w.Nodes > 1 && f.u.rdma && av.Hosts < w.Nodes {
		return "", "", fmt.Sprintf("the job needs %d whole hosts; only %d of the fleet could run it", w.Nodes, av.Hosts)
	}
	if av.FitsNow >= w.Nodes {
		return FitsYes, fmt.Sprintf("fits now: %d of %d hosts have room", av.FitsNow, av.Hosts), ""
	}
	if av.FitsNow == 0 {
		return FitsNo, fmt.Sprintf("no host has room now (%d could run it when free): it would wait", av.Hosts), ""
	}
	return FitsNo, fmt.Sprintf("only %d hosts have room now for %d nodes (%d could run it when free): it would wait",
		av.FitsNow, w.Nodes, av.Hosts), ""
}

// storageCost prices the checkpoint volume for the workload's days.
func storageCost(need *Need, m *MarketView) (money.Micros, string, error) {
	c, err := money.MulDiv(m.VolumePerGiBMonth, need.CheckpointGiB*need.HeldSeconds, money.SecondsPerMonth)
	if err != nil {
		return 0, "", fmt.Errorf("advise: volume cost: %w", err)
	}
	return c, fmt.Sprintf("checkpoint volume of %d GiB (%s) at %s/GiB-month for %s: %s",
		need.CheckpointGiB, need.CheckpointRule, money.FormatPrice(m.VolumePerGiBMonth), Duration(need.HeldSeconds), money.FormatAmount(c)), nil
}

// completion is when run seconds of work are done, from the start, when
// the job runs perDay seconds a day: the last day's share after whole
// days.
func completion(run, perDay int64) int64 {
	if run <= 0 || perDay <= 0 {
		return 0
	}
	days := ceilDiv(run, perDay)
	return (days-1)*86400 + run - (days-1)*perDay
}

// Duration prints seconds as days and hours, the way the advice talks
// about schedules: "30 days", "2 days 4 h", "5.5 h", "45 min".
func Duration(s int64) string {
	d, rest := s/86400, s%86400
	h := decimal(rest, 3600, 1)
	switch {
	case d == 0 && rest < 3600:
		return decimal(rest, 60, 1) + " min"
	case d == 0:
		return h + " h"
	case rest == 0:
		return plural(d, "day", "days")
	}
	return plural(d, "day", "days") + " " + h + " h"
}

// Hours prints seconds as hours with at most two decimals: "240 h",
// "4.5 h".
func Hours(s int64) string { return decimal(s, 3600, 2) + " h" }

func plural(n int64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
