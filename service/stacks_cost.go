package service

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/billing"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
	"github.com/gpucloud/gpucloud/stack"
)

// hoursPerMonth is the month a volume's GiB-month price is per.
const hoursPerMonth = 730

// stackCopies are the copies a plan leaves applied, with the properties
// they will have: the changes' (resolved where known), else the state's.
func stackCopies(p *stack.PlanResult, rec *StackRecord) []*stack.Change {
	var out []*stack.Change
	for _, c := range p.Changes {
		switch c.Action {
		case stack.ActionDelete, stack.ActionRetain:
			continue
		}
		if c.Properties == nil {
			if rs := rec.State.Resources[c.Address]; rs != nil {
				cc := *c
				cc.Properties = rs.Properties
				c = &cc
			}
		}
		out = append(out, c)
	}
	return out
}

func propString(props map[string]any, key string) string {
	s, _ := props[key].(string)
	return s
}

func propInt(props map[string]any, key string) (int64, bool) {
	switch v := props[key].(type) {
	case int:
		return int64(v), true
	case int64:
		return v, true
	case float64:
		return int64(v), v == float64(int64(v))
	case string:
		n, err := strconv.ParseInt(v, 10, 64)
		return n, err == nil
	}
	return 0, false
}

func propStrings(props map[string]any, key string) []string {
	list, _ := props[key].([]any)
	out := make([]string, 0, len(list))
	for _, e := range list {
		if s, ok := e.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

func propMap(props map[string]any, key string) map[string]any {
	m, _ := props[key].(map[string]any)
	return m
}

// stackCost prices what the plan leaves applied, per hour, at the prices
// in force now.
func (s *Stacks) stackCost(ctx context.Context, b *stack.Bound, p *stack.PlanResult, rec *StackRecord) (api.StackCost, error) {
	book, spot, err := s.pricesNow(ctx)
	if err != nil {
		return api.StackCost{}, err
	}
	now := s.now()
	cost := api.StackCost{Lines: []api.StackCostLine{}}
	missing := map[string]bool{}
	onDemand := func(offering string, zones []string) (money.Micros, bool) {
		zone := ""
		if len(zones) > 0 {
			zone = zones[0]
		}
		p, ok := book.Compute(offering, zone, now)
		if !ok && offering != "" && !missing[offering] {
			missing[offering] = true
			cost.Assumptions = append(cost.Assumptions, "offering "+offering+" has no on-demand price: priced at 0")
		}
		return p, ok
	}
	add := func(addr, what string, od, sp money.Micros) {
		cost.Lines = append(cost.Lines, api.StackCostLine{Address: addr, What: what, OnDemand: od, WithSpot: sp})
		cost.OnDemand += od
		cost.WithSpot += sp
	}
	for _, c := range stackCopies(p, rec) {
		props := c.Properties
		switch c.Type {
		case stack.TypeInstance:
			o := propString(props, "offering")
			od, _ := onDemand(o, propStrings(props, "zones"))
			add(c.Address, "instance "+o, od, od)
		case stack.TypeSpotRequest:
			pools, _ := props["pools"].([]any)
			var od money.Micros
			if len(pools) > 0 {
				first, _ := pools[0].(map[string]any)
				od, _ = onDemand(propString(first, "offering"), nil)
			}
			best, found := cheapestSpot(pools, spot)
			if !found {
				best = od
				cost.Assumptions = append(cost.Assumptions, c.Address+": no spot price yet for its pools; priced on demand")
			}
			add(c.Address, "spot request", od, best)
		case stack.TypeGroup:
			tmpl := propMap(props, "template")
			offs := propStrings(tmpl, "offerings")
			n, ok := propInt(props, "desired")
			if !ok {
				n, _ = propInt(props, "min")
			}
			if len(offs) == 0 {
				continue
			}
			od, _ := onDemand(offs[0], propStrings(tmpl, "zones"))
			total := od * money.Micros(n)
			add(c.Address, fmt.Sprintf("group: %d × %s (its desired size now; it moves with its policies)", n, offs[0]), total, total)
		case stack.TypeVolume:
			size, _ := propInt(props, "size_gib")
			if pr, ok := book.Volume(now); ok {
				per, err := money.MulDiv(pr, size, hoursPerMonth)
				if err != nil {
					return api.StackCost{}, err
				}
				add(c.Address, fmt.Sprintf("volume %d GiB", size), per, per)
			}
		case stack.TypeAddress:
			if pr, ok := book.Address(now); ok {
				add(c.Address, "public address", pr, pr)
			}
		case stack.TypeCommitment:
			cost.Assumptions = append(cost.Assumptions, c.Address+": a commitment's fees are fixed at purchase and billed on their own; not included")
		case stack.TypeNetwork, stack.TypeSubnet, stack.TypeSecurityGroup, stack.TypeSecurityGroupRule:
			add(c.Address, strings.ReplaceAll(c.Type, "_", " ")+" (free)", 0, 0)
		case stack.TypeEndpoint:
			// Its workers come and go with its load: priced at min.
			offs := propStrings(props, "offerings")
			n, _ := propInt(props, "min")
			if len(offs) == 0 {
				continue
			}
			od, _ := onDemand(offs[0], propStrings(props, "zones"))
			total := od * money.Micros(n)
			add(c.Address, fmt.Sprintf("endpoint: %d × %s (its min; workers come and go with its load)", n, offs[0]), total, total)
		}
	}
	return cost, nil
}

// pricesNow reads the price book and the latest spot prices.
func (s *Stacks) pricesNow(ctx context.Context) (*billing.PriceBook, []cloud.SpotPrice, error) {
	var (
		prices []*cloud.Price
		spot   []cloud.SpotPrice
	)
	err := s.tx(ctx, func(tx cloud.Tx) error {
		var err error
		if prices, err = tx.ListPrices(ctx, cloud.PriceFilter{}); err != nil {
			return err
		}
		spot, err = tx.LatestSpotPrices(ctx)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	return billing.NewPriceBook(prices, spot), spot, nil
}

// cheapestSpot is the lowest current spot price among a spot request's
// pools (a pool without a zone takes any zone's); found is false when
// none of them has one yet.
func cheapestSpot(pools []any, spot []cloud.SpotPrice) (best money.Micros, found bool) {
	for _, raw := range pools {
		pm, _ := raw.(map[string]any)
		pool := cloud.Pool{Offering: propString(pm, "offering"), Zone: propString(pm, "zone")}
		for _, sp := range spot {
			if sp.Pool.Offering == pool.Offering && (pool.Zone == "" || sp.Pool.Zone == pool.Zone) && (!found || sp.Price < best) {
				best, found = sp.Price, true
			}
		}
	}
	return best, found
}

// stackFit runs the plan's new instances through the scheduler's dry run:
// the instances a create or replace adds, a spot request's first launch,
// a group's desired members. While the scheduler has not yet seen every
// host that joined (Options.FleetSeen), the fit is not known and its
// reason says the fleet is still starting, with counts: never "does not
// fit", and never a refusal (an apply goes on; its instances wait to be
// placed as any do).
func (s *Stacks) stackFit(ctx context.Context, b *stack.Bound, p *stack.PlanResult, rec *StackRecord, tenant string) (*api.StackFit, error) {
	fit := &api.StackFit{}
	if s.opts.DryRun == nil {
		return fit, nil
	}
	var reqs []cloud.DryRunRequest
	groupOf := func(c *stack.Change) (string, cloud.PlacementStrategy, bool) {
		for _, d := range c.DependsOn {
			dc, ok := b.Copy(d)
			if !ok || dc.Type != stack.TypePlacementGroup {
				continue
			}
			strategy := propString(dc.Properties, "strategy")
			byRack, _ := dc.Properties["by_rack"].(bool)
			return d, cloud.PlacementStrategy(strategy), byRack
		}
		return "", "", false
	}
	// An instance on one of the stack's subnets runs in the subnet's zone.
	subnetZones := map[string]string{}
	for _, c := range stackCopies(p, rec) {
		if z := propString(c.Properties, "zone"); c.Type == stack.TypeSubnet && z != "" {
			subnetZones[c.Address] = z
		}
	}
	zonesOf := func(c *stack.Change) []string {
		for _, d := range c.DependsOn {
			if z, ok := subnetZones[d]; ok {
				return []string{z}
			}
		}
		return propStrings(c.Properties, "zones")
	}
	for _, c := range p.Changes {
		if c.Action != stack.ActionCreate && c.Action != stack.ActionReplace {
			continue
		}
		props := c.Properties
		switch c.Type {
		case stack.TypeInstance:
			g, strategy, byRack := groupOf(c)
			reqs = append(reqs, cloud.DryRunRequest{Tenant: tenant, ID: c.Address, Offering: propString(props, "offering"),
				Zones: zonesOf(c), Labels: propStrings(props, "labels"), Group: g, Strategy: strategy, ByRack: byRack})
		case stack.TypeSpotRequest:
			pools, _ := props["pools"].([]any)
			if len(pools) > 0 {
				pm, _ := pools[0].(map[string]any)
				var zones []string
				if z := propString(pm, "zone"); z != "" {
					zones = []string{z}
				}
				reqs = append(reqs, cloud.DryRunRequest{Tenant: tenant, ID: c.Address, Offering: propString(pm, "offering"), Zones: zones})
			}
		case stack.TypeGroup:
			tmpl := propMap(props, "template")
			offs := propStrings(tmpl, "offerings")
			n, ok := propInt(props, "desired")
			if !ok {
				n, _ = propInt(props, "min")
			}
			for i := range n {
				if len(offs) > 0 {
					reqs = append(reqs, cloud.DryRunRequest{Tenant: tenant, ID: fmt.Sprintf("%s/%d", c.Address, i), Offering: offs[0],
						Zones: propStrings(tmpl, "zones"), Labels: propStrings(tmpl, "labels")})
				}
			}
		}
	}
	if len(reqs) > 0 {
		starting, err := s.fleetStarting(ctx)
		if err != nil {
			return nil, err
		}
		if starting != "" {
			fit.Reason = starting
			return fit, nil
		}
	}
	res, ok := s.opts.DryRun(reqs)
	if !ok {
		return fit, nil
	}
	fit.Known, fit.Fits = true, true
	for _, r := range res {
		fit.Lines = append(fit.Lines, api.StackFitLine{Address: r.ID, Fits: r.Fits, Host: r.Host, Reason: r.Reason})
		fit.Fits = fit.Fits && r.Fits
	}
	return fit, nil
}

// fleetStarting says, while the store holds hosts that the scheduler's
// fleet does not (Options.FleetSeen: before its first pass, or in the
// moment after hosts joined), that the fleet is still starting and how
// many hosts the scheduler has seen; "" otherwise.
func (s *Stacks) fleetStarting(ctx context.Context) (string, error) {
	if s.opts.FleetSeen == nil {
		return "", nil
	}
	seen, ok := s.opts.FleetSeen()
	if !ok {
		return "", nil
	}
	var stamp cloud.HostStamp
	if err := s.tx(ctx, func(tx cloud.Tx) (err error) {
		stamp, err = tx.HostStamp(ctx)
		return err
	}); err != nil {
		return "", err
	}
	if stamp.Hosts <= seen {
		return "", nil
	}
	return fmt.Sprintf("the fleet is still starting: %d of %d hosts seen by the scheduler; plan again in a few seconds", seen, stamp.Hosts), nil
}
