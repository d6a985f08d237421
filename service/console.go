package service

import (
	"context"
	"time"

	"github.com/gpucloud/gpucloud/billing"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
)

// MaxInstanceMetricPoints caps what InstanceMetrics answers.
const MaxInstanceMetricPoints = 5000

// InstanceCost is what an instance a may see has cost from its creation
// until now, rated exactly as its tenant's invoices rate it (per second,
// at its offering's on-demand price or its pool's spot price, with the
// one-minute minimum), before any commitment discount: commitments cover
// a tenant's hours, not one instance's.
func (s *Billing) InstanceCost(ctx context.Context, a Actor, id string) (money.Micros, error) {
	now := s.now()
	var total money.Micros
	err := s.tx(ctx, func(tx cloud.Tx) error {
		in, err := Visible(ctx, a, "instance", id, tx.GetInstance)
		if err != nil {
			return err
		}
		period := billing.Period{Start: in.CreatedAt.Truncate(time.Second), End: now.Add(time.Second)}
		input, err := billing.Load(ctx, tx, in.TenantID, period, now)
		if err != nil {
			return err
		}
		mine := input.Usage[:0:0]
		for _, u := range input.Usage {
			if u.ResourceID == in.ID {
				mine = append(mine, u)
			}
		}
		input.Usage, input.Commitments, input.Tenants = mine, nil, []string{in.TenantID}
		res, err := billing.Rate(input)
		if err != nil {
			return err
		}
		for _, inv := range res.Invoices {
			if inv != nil && inv.TenantID == in.TenantID {
				total = inv.Total
			}
		}
		return nil
	})
	return total, err
}

// InstanceMetrics answers the utilization samples the agent reported for
// an instance a may see (gpu_utilization, cpu_utilization, ...), after
// since, oldest first, at most MaxInstanceMetricPoints; another tenant's
// instance answers NotFound.
func (s *Instances) InstanceMetrics(ctx context.Context, a Actor, id string, since time.Time) ([]cloud.MetricPoint, error) {
	var out []cloud.MetricPoint
	err := s.tx(ctx, func(tx cloud.Tx) error {
		in, err := Visible(ctx, a, "instance", id, tx.GetInstance)
		if err != nil {
			return err
		}
		ps, err := tx.ListMetrics(ctx, cloud.MetricFilter{TenantID: in.TenantID, After: since, Limit: 20 * MaxInstanceMetricPoints})
		if err != nil {
			return err
		}
		for _, p := range ps {
			if p.InstanceID == in.ID {
				out = append(out, p)
			}
		}
		if len(out) > MaxInstanceMetricPoints {
			out = out[len(out)-MaxInstanceMetricPoints:]
		}
		return nil
	})
	return out, err
}
