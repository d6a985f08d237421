package service

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
)

// LiveStates are the states that count against a quota: every state but
// terminated. Stopped instances count too, because start must not fail on
// a quota the tenant already held.
var LiveStates = []cloud.State{cloud.Pending, cloud.Scheduled, cloud.Starting, cloud.Running, cloud.Paused,
	cloud.Stopping, cloud.Terminating, cloud.Stopped, cloud.Failed, cloud.Lost}

// defaultMetalGPUs is what a metal offering that does not fix the host's
// GPU count is charged: the largest host the catalog knows.
const defaultMetalGPUs = 8

// GPUDemand is what an offering holds against a GPU quota: its canonical
// GPU model and whole-GPU equivalents. Whole GPUs count one each, a MIG
// instance its compute slices out of 7, a time-slice its share, an AMD
// partition or VF one over the logical GPUs of its GPU, a bare metal host
// all its GPUs. CPU offerings and metal offerings without a
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
	case catalog.ModePartition:
		if p := m.ComputePartitionNamed(o.Partition); p != nil {
			return m.Name, 1 / float64(p.Devices)
		}
	case catalog.ModeVF:
		if o.VFs > 0 {
			return m.Name, 1 / float64(o.VFs)
		}
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
//
// It reads counts by state and offering, not the instances: every create
// under a quota runs it.
func TenantUsage(ctx context.Context, tx cloud.Tx, cat *catalog.Catalog, tenant string) (api.Usage, error) {
	counts, err := tx.CountTenantInstances(ctx, tenant)
	if err != nil {
		return api.Usage{}, err
	}
	u := api.Usage{GPUs: map[string]float64{}}
	for _, c := range counts {
		if !slices.Contains(LiveStates, c.State) {
			continue
		}
		u.Instances += c.Count
		o, err := cat.Offering(c.Offering)
		if err != nil {
			continue
		}
		if model, n := GPUDemand(cat, o); model != "" && n > 0 {
			u.GPUs[model] += n * float64(c.Count)
		}
	}
	if len(u.GPUs) == 0 {
		u.GPUs = nil
	}
	return u, nil
}

// quotaEpsilon absorbs float error in sums of sevenths.
const quotaEpsilon = 1e-9

// The default quota of a new tenant (Accounts.CreateTenant; the operator
// tenant that Bootstrap makes has none): room for a team to work without
// asking first, while a runaway script or a stolen token cannot take the
// fleet. An admin raises it (PUT /v1/tenants/{id}/quota, gpucloud quotas
// set). 16 GPUs of a model is two 8-GPU hosts, or two bare-metal hosts.
const (
	DefaultInstances    = 64
	DefaultGPUsPerModel = 16
)

// DefaultQuota is the quota a new tenant starts with: DefaultInstances
// and DefaultGPUsPerModel, and the server's default request rate.
func DefaultQuota(tenant string) *cloud.Quota {
	return &cloud.Quota{TenantID: tenant, Instances: DefaultInstances, GPUsPerModel: DefaultGPUsPerModel}
}

// Limits reports whether q limits what the tenant may hold (instances or
// GPUs): creates under such a quota count what the tenant holds. The
// request rate is not such a limit.
func Limits(q *cloud.Quota) bool {
	return q.Instances != 0 || len(q.GPUs) != 0 || q.GPUsPerModel != 0
}

// GPULimit is q's cap on whole-GPU equivalents of a canonical model: the
// model's own entry when q.GPUs has one (0 there means no limit), else
// q.GPUsPerModel; 0 means no limit.
func GPULimit(q *cloud.Quota, model string) float64 {
	if n, ok := q.GPUs[model]; ok {
		return n
	}
	return q.GPUsPerModel
}

// EnforceQuota answers quota_exceeded when one more instance of offering o
// would take the tenant over its quota. The details carry the limit, what
// is used and what was requested, so that the caller can see by how much.
//
// It locks the tenant's quota (Tx.LockQuota) before it counts, so that
// the creates of one tenant take turns: at read committed each counts
// what those before it committed, and at serializable a concurrent one
// fails to serialize and is retried, rather than both counting the same
// instances. Creates of different tenants do not wait for each other, and
// those of a tenant whose quota limits nothing lock nothing (a quota set
// meanwhile applies to the creates after them).
func EnforceQuota(ctx context.Context, tx cloud.Tx, cat *catalog.Catalog, tenant string, o *catalog.Offering) error {
	b := batchOf(ctx)
	var (
		q   *cloud.Quota
		u   api.Usage
		err error
	)
	if b != nil && b.tenant == tenant && b.loaded {
		q, u = b.quota, b.usage
	} else {
		if q, err = GetQuota(ctx, tx, tenant); err != nil || !Limits(q) {
			return err
		}
		if q, err = tx.LockQuota(ctx, tenant); err != nil {
			return err
		}
		if !Limits(q) {
			return nil
		}
		if u, err = TenantUsage(ctx, tx, cat, tenant); err != nil {
			return err
		}
	}
	if err := checkQuota(cat, q, u, o); err != nil {
		return err
	}
	if b != nil && (b.tenant == "" || b.tenant == tenant) {
		// The batch's next create counts this one as held.
		model, n := GPUDemand(cat, o)
		u.Instances++
		if model != "" && n > 0 {
			gpus := make(map[string]float64, len(u.GPUs)+1)
			for k, v := range u.GPUs {
				gpus[k] = v
			}
			gpus[model] += n
			u.GPUs = gpus
		}
		b.tenant, b.quota, b.usage, b.loaded = tenant, q, u, true
	}
	return nil
}

// checkQuota checks one more instance of offering o against quota q and
// usage u.
func checkQuota(cat *catalog.Catalog, q *cloud.Quota, u api.Usage, o *catalog.Offering) error {
	if !Limits(q) {
		return nil
	}
	if q.Instances > 0 && u.Instances+1 > q.Instances {
		return &cloud.Error{Code: cloud.QuotaExceeded,
			Message: fmt.Sprintf("instance quota exceeded: tenant holds %d of %d instances (terminated ones do not count)", u.Instances, q.Instances),
			Details: map[string]any{"resource": "instances", "limit": q.Instances, "used": u.Instances, "requested": 1}}
	}
	model, n := GPUDemand(cat, o)
	limit := GPULimit(q, model)
	if model == "" || n == 0 || limit == 0 {
		return nil
	}
	if used := u.GPUs[model]; used+n > limit+quotaEpsilon {
		d := map[string]any{"resource": "gpus", "model": model, "limit": limit, "used": used, "requested": n}
		which := ""
		if _, own := q.GPUs[model]; !own {
			d["per_model"] = true
			which = " (the limit of each model without its own)"
		}
		return &cloud.Error{Code: cloud.QuotaExceeded,
			Message: fmt.Sprintf("GPU quota for %s exceeded: tenant holds %.3g of %.3g GPUs%s and %s needs %.3g more", model, used, limit, which, o.Name, n),
			Details: d}
	}
	return nil
}

// GetQuota reads a tenant's quota; a tenant without one (the operator
// tenant, and tenants made before default quotas) has the zero quota (no
// limits, the default request rate).
func GetQuota(ctx context.Context, tx cloud.Tx, tenantID string) (*cloud.Quota, error) {
	q, err := tx.GetQuota(ctx, tenantID)
	if cloud.IsNotFound(err) {
		return &cloud.Quota{TenantID: tenantID}, nil
	}
	return q, err
}

// checkQuotaRates validates the per-model GPU cap and the request rate of
// a quota spec (CheckQuotaSpec does the rest).
func checkQuotaRates(spec api.QuotaSpec) error {
	if n := spec.GPUsPerModel; math.IsNaN(n) || n < 0 || n > MaxQuota {
		return Field("gpus_per_model", "%v is out of range 0..%d (0 means no limit)", n, MaxQuota)
	}
	if spec.RequestsPerSecond < 0 || spec.RequestsPerSecond > MaxQuota {
		return Field("requests_per_second", "%d is out of range 0..%d (0 means the server's default)", spec.RequestsPerSecond, MaxQuota)
	}
	if spec.Burst < 0 || spec.Burst > MaxQuota {
		return Field("burst", "%d is out of range 0..%d (0 means the server's default)", spec.Burst, MaxQuota)
	}
	return nil
}

// RequestRate reads the request rate a tenant's quota gives each of its
// users: requests per second and burst, 0 each for the server's default
// (also for a tenant without a quota, or a missing one). It takes no
// actor: it serves the transport's rate limiter, which asks about the
// tenant of a token it has just authenticated (as TokenOf serves its
// authentication), and answers nothing to a caller.
func (s *Accounts) RequestRate(ctx context.Context, tenant string) (perSecond, burst int, err error) {
	err = s.tx(ctx, func(tx cloud.Tx) error {
		q, err := GetQuota(ctx, tx, tenant)
		if err != nil {
			return err
		}
		perSecond, burst = q.RequestsPerSecond, q.Burst
		return nil
	})
	return perSecond, burst, err
}
