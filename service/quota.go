package service

import (
	"context"
	"fmt"

	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
)

// LiveStates are the states that count against a quota: every state but
// terminated. Stopped instances count too, because start must not fail on
// a quota the tenant already held.
var LiveStates = []cloud.State{cloud.Pending, cloud.Scheduled, cloud.Starting, cloud.Running,
	cloud.Stopping, cloud.Terminating, cloud.Stopped, cloud.Failed, cloud.Lost}

// defaultMetalGPUs is what a metal offering that does not fix the host's
// GPU count is charged: the largest host the catalog knows.
const defaultMetalGPUs = 8

// GPUDemand is what an offering holds against a GPU quota: its canonical
// GPU model and whole-GPU equivalents. Whole GPUs count one each, a MIG
// instance its compute slices out of 7, a time-slice its share, a bare
// metal host all its GPUs. CPU offerings and metal offerings without a
// model hold no GPU quota (model "").
func GPUDemand(cat *catalog.Catalog, o *catalog.Offering) (model string, gpus float64) {
	if o.Model == "" {
		return "", 0
	}
	m, err := cat.Model(o.Model)
	if err != nil {
		// ValidateOffering guarantees the model; keep the raw name so that
		// a quota on it still applies.
		return o.Model, 0
	}
	switch o.Mode {
	case catalog.ModeGPU:
		return m.Name, float64(o.GPUs)
	case catalog.ModeMIG:
		if p, err := m.ResolveProfile(o.MIGProfile); err == nil {
			return m.Name, float64(p.ComputeSlices) / catalog.MIGComputeSlices
		}
	case catalog.ModeShared:
		return m.Name, float64(o.ShareMilli) / 1000
	case catalog.ModeMetal:
		if o.GPUs > 0 {
			return m.Name, float64(o.GPUs)
		}
		return m.Name, defaultMetalGPUs
	}
	return m.Name, 0
}

// TenantUsage sums what a tenant's non-terminated instances hold. An instance
// whose offering left the catalog counts as an instance but holds no GPUs
// any more: the operator removed what it was charged by.
func TenantUsage(ctx context.Context, tx cloud.Tx, cat *catalog.Catalog, tenant string) (Usage, error) {
	ins, err := tx.ListInstances(ctx, cloud.InstanceFilter{TenantID: tenant, States: LiveStates})
	if err != nil {
		return Usage{}, err
	}
	u := Usage{Instances: len(ins), GPUs: map[string]float64{}}
	for _, in := range ins {
		o, err := cat.Offering(in.Offering)
		if err != nil {
			continue
		}
		if model, n := GPUDemand(cat, o); model != "" && n > 0 {
			u.GPUs[model] += n
		}
	}
	if len(u.GPUs) == 0 {
		u.GPUs = nil
	}
	return u, nil
}

// quotaEpsilon absorbs float error in sums of sevenths.
const quotaEpsilon = 1e-9

// EnforceQuota answers quota_exceeded when one more instance of offering o
// would take the tenant over its quota. The details carry the limit, what
// is used and what was requested, so that the caller can see by how much.
func EnforceQuota(ctx context.Context, tx cloud.Tx, cat *catalog.Catalog, tenant string, o *catalog.Offering) error {
	q, err := GetQuota(ctx, tx, tenant)
	if err != nil {
		return err
	}
	if q.Instances == 0 && len(q.GPUs) == 0 {
		return nil
	}
	u, err := TenantUsage(ctx, tx, cat, tenant)
	if err != nil {
		return err
	}
	if q.Instances > 0 && u.Instances+1 > q.Instances {
		return &cloud.Error{Code: cloud.QuotaExceeded,
			Message: fmt.Sprintf("instance quota exceeded: tenant holds %d of %d instances (terminated ones do not count)", u.Instances, q.Instances),
			Details: map[string]any{"resource": "instances", "limit": q.Instances, "used": u.Instances, "requested": 1}}
	}
	model, n := GPUDemand(cat, o)
	limit := q.GPUs[model]
	if model == "" || n == 0 || limit == 0 {
		return nil
	}
	if used := u.GPUs[model]; used+n > limit+quotaEpsilon {
		return &cloud.Error{Code: cloud.QuotaExceeded,
			Message: fmt.Sprintf("GPU quota for %s exceeded: tenant holds %.3g of %.3g GPUs and %s needs %.3g more", model, used, limit, o.Name, n),
			Details: map[string]any{"resource": "gpus", "model": model, "limit": limit, "used": used, "requested": n}}
	}
	return nil
}

// Usage is what a tenant's instances hold against its quota.
type Usage struct {
	Instances int                `json:"instances"`
	GPUs      map[string]float64 `json:"gpus,omitempty"`
}

// GetQuota reads a tenant's quota; a tenant without one has the zero
// quota (no limits).
func GetQuota(ctx context.Context, tx cloud.Tx, tenantID string) (*cloud.Quota, error) {
	q, err := tx.GetQuota(ctx, tenantID)
	if cloud.IsNotFound(err) {
		return &cloud.Quota{TenantID: tenantID}, nil
	}
	return q, err
}
