package billing

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
)

// spotLookback is how far before a period Load reads spot history at
// first, to find the point in force at its start; pools without a point in
// that window are read further back.
const spotLookback = 24 * time.Hour

// Load reads the snapshot Rate needs for period p as of asOf: every price
// version, the spot history up to p.End (including the point in force at
// p.Start), the usage ledger entries still open at p.Start and those of the
// period, the commitments, and the names of the endpoints whose workers
// the usage meters, of tenantID or of every tenant when it is empty. A single tenant gets an invoice
// even when it has nothing to pay.
func Load(ctx context.Context, tx cloud.Tx, tenantID string, p Period, asOf time.Time) (Input, error) {
	prices, err := tx.ListPrices(ctx, cloud.PriceFilter{})
	if err != nil {
		return Input{}, fmt.Errorf("billing: load prices: %w", err)
	}
	// What still accrued at the period's start, and the entries of the
	// period: rating needs no older history, however long the ledger.
	open, err := tx.OpenUsage(ctx, tenantID, p.Start)
	if err != nil {
		return Input{}, fmt.Errorf("billing: load usage: %w", err)
	}
	usage, err := tx.ListUsage(ctx, cloud.UsageFilter{TenantID: tenantID, Since: p.Start, Before: p.End})
	if err != nil {
		return Input{}, fmt.Errorf("billing: load usage: %w", err)
	}
	usage = append(open, usage...)
	slices.SortStableFunc(usage, func(a, b *cloud.Usage) int { return cmp.Compare(a.ID, b.ID) })
	commits, err := tx.ListCommitments(ctx, tenantID)
	if err != nil {
		return Input{}, fmt.Errorf("billing: load commitments: %w", err)
	}
	since := p.Start.Add(-spotLookback)
	spot, err := tx.ListSpotPrices(ctx, cloud.SpotPriceFilter{Since: since, Until: p.End})
	if err != nil {
		return Input{}, fmt.Errorf("billing: load spot prices: %w", err)
	}
	// Pools of spot usage without a point at or before the period's start
	// in the window: read their older history too.
	known := map[cloud.Pool]bool{}
	for _, s := range spot {
		if !s.Time.After(p.Start) {
			known[s.Pool] = true
		}
	}
	var older []cloud.Pool
	for _, u := range usage {
		if u.Kind != cloud.UsageCompute || u.Market != cloud.MarketSpot || !u.On {
			continue
		}
		pool := cloud.Pool{Offering: u.Offering, Zone: u.Zone}
		if !known[pool] {
			known[pool] = true
			older = append(older, pool)
		}
	}
	if len(older) > 0 {
		more, err := tx.ListSpotPrices(ctx, cloud.SpotPriceFilter{Pools: older, Until: since})
		if err != nil {
			return Input{}, fmt.Errorf("billing: load spot prices: %w", err)
		}
		spot = append(more, spot...)
	}
	in := Input{
		Period:      p,
		AsOf:        asOf,
		Prices:      NewPriceBook(prices, spot),
		Usage:       usage,
		Commitments: commits,
	}
	if in.Endpoints, err = endpointNames(ctx, tx, tenantID, usage); err != nil {
		return Input{}, err
	}
	if tenantID != "" {
		in.Tenants = []string{tenantID}
	}
	return in, nil
}

// endpointNames reads the names of the endpoints usage names (nil when
// it names none): deleted endpoints too, whose workers still bill.
func endpointNames(ctx context.Context, tx cloud.Tx, tenantID string, usage []*cloud.Usage) (map[string]string, error) {
	want := map[string]bool{}
	for _, u := range usage {
		if u.EndpointID != "" {
			want[u.EndpointID] = true
		}
	}
	if len(want) == 0 {
		return nil, nil
	}
	eps, err := tx.ListEndpoints(ctx, tenantID)
	if err != nil {
		return nil, fmt.Errorf("billing: load endpoints: %w", err)
	}
	names := make(map[string]string, len(want))
	for _, e := range eps {
		if want[e.ID] {
			names[e.ID] = e.Name
		}
	}
	return names, nil
}
