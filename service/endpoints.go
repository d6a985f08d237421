package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/billing"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
)

// Serverless endpoints (docs/ENDPOINTS.md): the endpoint's rules and
// records. Its workers are instances made through CreateInstance and
// ended through Act (endpoints_plan.go); its jobs are rows of the store
// (endpoints_jobs.go). The gateway, which routes requests to workers, is
// package gateway; the sizing decision is autoscale.PlanEndpoint.

// Endpoints creates, reads, changes and deletes endpoints, and takes and
// answers their jobs.
type Endpoints struct{ base }

// EndpointPrefix is endpoints' ID prefix; JobPrefix their jobs'.
const (
	EndpointPrefix = "ep-"
	JobPrefix      = "job-"
)

// Endpoint limits and defaults.
const (
	MaxEndpointsPerTenant   = 50
	MaxEndpointWorkers      = 100
	MaxEndpointConcurrency  = 1000
	MaxEndpointRetries      = 10
	MaxEndpointOfferings    = 8
	MaxJobInput             = 1 << 20
	DefaultEndpointPort     = 8080
	DefaultEndpointHealth   = "/health"
	DefaultEndpointMax      = 3
	DefaultEndpointIdle     = 30
	DefaultEndpointTimeout  = 600
	DefaultEndpointRetain   = 86400
	DefaultEndpointWait     = 30
	maxEndpointSeconds      = 7 * 86400
	maxEndpointRetainSecond = 30 * 86400
)

// The tags a worker carries: its endpoint's ID and name, and the spec
// generation it was launched at.
const (
	TagEndpoint           = ReservedTagPrefix + "endpoint"
	TagEndpointName       = ReservedTagPrefix + "endpoint-name"
	TagEndpointGeneration = ReservedTagPrefix + "endpoint-generation"
)

// CheckEndpointSpec validates a spec and fills in its defaults; the spec
// is normalized in place (offerings by their catalog names, the image in
// canonical form).
func CheckEndpointSpec(cat *catalog.Catalog, s *cloud.EndpointSpec) error {
	s.Offerings, s.Command, s.Zones, s.Labels = slices.Clone(s.Offerings), slices.Clone(s.Command), slices.Clone(s.Zones), slices.Clone(s.Labels)
	s.Volumes = slices.Clone(s.Volumes)
	s.Env = maps.Clone(s.Env)
	// An empty list or map is none: a PATCH of "command": [] on an
	// endpoint without one changes nothing (and rolls no worker).
	if len(s.Command) == 0 {
		s.Command = nil
	}
	if len(s.Env) == 0 {
		s.Env = nil
	}
	if len(s.Zones) == 0 {
		s.Zones = nil
	}
	if len(s.Labels) == 0 {
		s.Labels = nil
	}
	if len(s.Volumes) == 0 {
		s.Volumes = nil
	}
	if s.Image == "" {
		return Field("image", "is required: workers run in containers (an image whose HTTP server answers on port, default %d)", DefaultEndpointPort)
	}
	var err error
	if s.Image, err = CheckImage("image", s.Image); err != nil {
		return err
	}
	if len(s.Offerings) == 0 || len(s.Offerings) > MaxEndpointOfferings {
		return Field("offerings", "%d offerings; give 1 to %d, the first preferred (GET /v1/offerings lists them)", len(s.Offerings), MaxEndpointOfferings)
	}
	for i, name := range s.Offerings {
		field := fmt.Sprintf("offerings[%d]", i)
		o, err := offeringOf(cat, field, name)
		if err != nil {
			return err
		}
		if slices.Contains(s.Offerings[:i], o.Name) {
			return Field(field, "offering %s is given twice", o.Name)
		}
		s.Offerings[i] = o.Name
	}
	is := api.CreateInstanceRequest{Offering: s.Offerings[0], Zones: s.Zones, Labels: s.Labels, Command: s.Command, Env: s.Env, Volumes: s.Volumes}
	if _, err := CheckInstanceSpec(cat, &is); err != nil {
		return err
	}
	switch s.Mode {
	case "":
		s.Mode = cloud.EndpointQueue
	case cloud.EndpointQueue, cloud.EndpointHTTP:
	default:
		return Field("mode", "%s is not a mode: queue (jobs: run, runsync, status, cancel) or http (requests proxied to a worker)", Quote(string(s.Mode)))
	}
	if s.Port == 0 {
		s.Port = DefaultEndpointPort
	}
	if s.Port < 1 || s.Port > 65535 {
		return Field("port", "%d is not a TCP port (1 to 65535)", s.Port)
	}
	if s.HealthPath == "" {
		s.HealthPath = DefaultEndpointHealth
	}
	if !strings.HasPrefix(s.HealthPath, "/") || len(s.HealthPath) > 256 || strings.ContainsAny(s.HealthPath, " \t\r\n?#") {
		return Field("health_path", "%s is not a path: want one that starts with / (at most 256 characters, no query)", Quote(s.HealthPath))
	}
	if s.Max == 0 {
		s.Max = max(DefaultEndpointMax, s.Min)
	}
	if s.Min < 0 || s.Max < 1 || s.Min > s.Max || s.Max > MaxEndpointWorkers {
		return Field("max", "min %d and max %d: want 0 <= min <= max, 1 <= max <= %d", s.Min, s.Max, MaxEndpointWorkers)
	}
	for _, f := range []struct {
		name     string
		v        *int
		dflt, lo int
		hi       int
	}{
		{"concurrency", &s.Concurrency, 1, 1, MaxEndpointConcurrency},
		{"idle_timeout_seconds", &s.IdleTimeoutSeconds, DefaultEndpointIdle, 1, maxEndpointSeconds},
		{"timeout_seconds", &s.TimeoutSeconds, DefaultEndpointTimeout, 1, maxEndpointSeconds},
		{"retention_seconds", &s.RetentionSeconds, DefaultEndpointRetain, 1, maxEndpointRetainSecond},
		{"queue_wait_seconds", &s.QueueWaitSeconds, DefaultEndpointWait, 1, 3600},
	} {
		if *f.v == 0 {
			*f.v = f.dflt
		}
		if *f.v < f.lo || *f.v > f.hi {
			return Field(f.name, "%d is out of range %d..%d", *f.v, f.lo, f.hi)
		}
	}
	if s.Retries < 0 || s.Retries > MaxEndpointRetries {
		return Field("retries", "%d is out of range 0..%d", s.Retries, MaxEndpointRetries)
	}
	return checkWarm(s)
}

// Create makes an endpoint with no worker (the controller launches its
// min at its next tick); key makes a retry answer the first endpoint, and
// a reused key with another request is a conflict naming the fields.
func (s *Endpoints) Create(ctx context.Context, a Actor, req api.CreateEndpointRequest, key string) (out *cloud.Endpoint, created bool, err error) {
	if err := endpointUsers(a, "making endpoints"); err != nil {
		return nil, false, err
	}
	if err := CheckIdempotencyKey(key); err != nil {
		return nil, false, err
	}
	if err := CheckName("name", req.Name, true); err != nil {
		return nil, false, err
	}
	if strings.HasPrefix(req.Name, EndpointPrefix) {
		return nil, false, Field("name", "may not start with %s: that is how endpoint IDs start", Quote(EndpointPrefix))
	}
	if err := CheckEndpointSpec(s.cat, &req.EndpointSpec); err != nil {
		return nil, false, err
	}
	if err := s.checkRegistry("image", req.Image); err != nil {
		return nil, false, err
	}
	same := func(e *cloud.Endpoint) error { return sameEndpoint(e, &req) }
	err = s.tx(ctx, func(tx cloud.Tx) error {
		out, created = nil, false
		tenant, err := Scope(ctx, tx, a, req.Tenant, a.TenantID)
		if err != nil {
			return err
		}
		if tenant == "" {
			return Field("tenant", "is required for an admin without a tenant")
		}
		if err := s.imagesRunSomewhere(); err != nil {
			return err
		}
		if err := s.pausesSomewhere(&req.EndpointSpec); err != nil {
			return err
		}
		if old, found, err := prior(key, func(k string) (*cloud.Endpoint, error) { return endpointByKey(ctx, tx, tenant, k) }, same); found || err != nil {
			out = old
			return err
		}
		if err := checkEndpointVolumes(ctx, tx, tenant, &req.EndpointSpec); err != nil {
			return err
		}
		live, err := tx.ListEndpoints(ctx, tenant, cloud.EndpointActive, cloud.EndpointDeleting)
		if err != nil {
			return err
		}
		if len(live) >= MaxEndpointsPerTenant {
			return &cloud.Error{Code: cloud.QuotaExceeded,
				Message: fmt.Sprintf("endpoint limit reached: tenant holds %d of %d endpoints (deleted ones do not count)", len(live), MaxEndpointsPerTenant),
				Details: map[string]any{"resource": "endpoints", "limit": MaxEndpointsPerTenant, "used": len(live), "requested": 1}}
		}
		now := s.now()
		e := &cloud.Endpoint{ID: NewID(EndpointPrefix), TenantID: tenant, Name: req.Name, Spec: req.EndpointSpec,
			State: cloud.EndpointActive, Status: cloud.EndpointStatus{Generation: 1}, IdempotencyKey: key, CreatedAt: now, UpdatedAt: now}
		if err := tx.CreateEndpoint(ctx, e); err != nil {
			return asKeyRace(err, key)
		}
		if err := endpointEvent(ctx, tx, e, cloud.EventEndpoint, a.ID, fmt.Sprintf("endpoint %s created: %s mode, %s on %s, min %d, max %d, concurrency %d",
			e.Name, e.Spec.Mode, e.Spec.Image, strings.Join(e.Spec.Offerings, ", "), e.Spec.Min, e.Spec.Max, e.Spec.Concurrency), nil); err != nil {
			return err
		}
		out, created = e, true
		return nil
	})
	out, err = settleRace(ctx, s.store, out, err, func(tx cloud.Tx, id string) (*cloud.Endpoint, error) { return tx.GetEndpoint(ctx, id) }, same)
	return out, created && err == nil, err
}

// imagesRunSomewhere refuses an endpoint when the fleet is known to have
// no host that runs containers (some offering has hosts, and every
// offering's Containers is zero): its workers could never start.
func (s *Endpoints) imagesRunSomewhere() error {
	av := s.Availability()
	if av == nil {
		return nil
	}
	known := false
	for _, a := range av {
		if a.Containers > 0 {
			return nil
		}
		known = known || a.Hosts > 0
	}
	if !known {
		// No host has reported what it can run yet (a fleet that is
		// just joining): nothing says that containers never run.
		return nil
	}
	return &cloud.Error{Code: cloud.Unavailable,
		Message: "no host of this cloud runs containers, and endpoint workers are containers: add a host with the containerd runtime"}
}

// endpointByKey finds the tenant's endpoint created with key.
func endpointByKey(ctx context.Context, tx cloud.Tx, tenant, key string) (*cloud.Endpoint, error) {
	es, err := tx.ListEndpoints(ctx, tenant)
	if err != nil {
		return nil, err
	}
	for _, e := range es {
		if e.IdempotencyKey == key {
			return e, nil
		}
	}
	return nil, NotFound("endpoint", key)
}

func sameEndpoint(old *cloud.Endpoint, req *api.CreateEndpointRequest) error {
	var d KeyDiffs
	d.String("name", old.Name, req.Name)
	o, n := old.Spec, req.EndpointSpec
	if old.Status.Generation > 1 {
		// Updated since: a retry of the create still answers it.
		return d.Err("endpoint", old.ID)
	}
	d.String("image", o.Image, n.Image)
	d.Strings("command", o.Command, n.Command)
	d.Map("env", o.Env, n.Env)
	d.Strings("volumes", o.Volumes, n.Volumes)
	d.Strings("offerings", o.Offerings, n.Offerings)
	d.Strings("zones", o.Zones, n.Zones)
	d.Strings("labels", o.Labels, n.Labels)
	Value(&d, "mode", o.Mode, n.Mode)
	Value(&d, "port", o.Port, n.Port)
	d.String("health_path", o.HealthPath, n.HealthPath)
	Value(&d, "min", o.Min, n.Min)
	Value(&d, "max", o.Max, n.Max)
	Value(&d, "concurrency", o.Concurrency, n.Concurrency)
	Value(&d, "idle_timeout_seconds", o.IdleTimeoutSeconds, n.IdleTimeoutSeconds)
	Value(&d, "timeout_seconds", o.TimeoutSeconds, n.TimeoutSeconds)
	Value(&d, "retries", o.Retries, n.Retries)
	Value(&d, "retention_seconds", o.RetentionSeconds, n.RetentionSeconds)
	Value(&d, "queue_wait_seconds", o.QueueWaitSeconds, n.QueueWaitSeconds)
	Value(&d, "spot", o.Spot, n.Spot)
	Value(&d, "warm", o.Warm, n.Warm)
	return d.Err("endpoint", old.ID)
}

func endpointEvent(ctx context.Context, tx cloud.Tx, e *cloud.Endpoint, kind cloud.EventKind, actor, reason string, extra map[string]any) error {
	d := map[string]any{"endpoint_id": e.ID, "endpoint": e.Name}
	maps.Copy(d, extra)
	details, err := json.Marshal(d)
	if err != nil {
		return err
	}
	return tx.AppendEvent(ctx, &cloud.Event{Time: e.UpdatedAt, Kind: kind, TenantID: e.TenantID, Actor: actor, Reason: reason, Details: details})
}

// lookupEndpoint reads the endpoint ref names for actor a: an ID
// (ep-...), or a name among the actor's tenant's live endpoints. Another
// tenant's answers like a missing one.
func lookupEndpoint(ctx context.Context, tx cloud.Tx, a Actor, ref string) (*cloud.Endpoint, error) {
	if ref == "" {
		return nil, Field("endpoint", "is required: an endpoint's name or ID")
	}
	var e *cloud.Endpoint
	var err error
	if strings.HasPrefix(ref, EndpointPrefix) {
		e, err = Visible(ctx, a, "endpoint", ref, tx.GetEndpoint)
	} else if e, err = tx.EndpointByName(ctx, a.TenantID, ref); cloud.IsNotFound(err) {
		err = NotFound("endpoint", ref)
	}
	if err == nil && a.Role == cloud.RoleInvoke && e.ID != a.EndpointID {
		// An endpoint key sees its own endpoint only.
		return nil, NotFound("endpoint", ref)
	}
	return e, err
}

// Get reads an endpoint a may see, by ID or name (deleted ones by ID).
func (s *Endpoints) Get(ctx context.Context, a Actor, ref string) (*cloud.Endpoint, error) {
	var out *cloud.Endpoint
	err := s.tx(ctx, func(tx cloud.Tx) error {
		var err error
		out, err = lookupEndpoint(ctx, tx, a, ref)
		return err
	})
	return out, err
}

// List lists the endpoints a may see (a member its tenant's; an admin
// tenant's, or every tenant's when tenant is empty), deleted ones only
// when all is set.
func (s *Endpoints) List(ctx context.Context, a Actor, tenant string, all bool) ([]*cloud.Endpoint, error) {
	if err := endpointUsers(a, "listing endpoints"); err != nil {
		return nil, err
	}
	var out []*cloud.Endpoint
	err := s.tx(ctx, func(tx cloud.Tx) error {
		t, err := Scope(ctx, tx, a, tenant, "")
		if err != nil {
			return err
		}
		states := []cloud.EndpointState{cloud.EndpointActive, cloud.EndpointDeleting}
		if all {
			states = nil
		}
		out, err = tx.ListEndpoints(ctx, t, states...)
		return err
	})
	return out, err
}

// Update changes an endpoint's spec; a change of what workers run (image,
// command, environment, volumes, offerings) starts a new generation, which the
// controller rolls the workers over to. ifMatch, when not zero, must be
// the endpoint's version.
func (s *Endpoints) Update(ctx context.Context, a Actor, ref string, p api.UpdateEndpointRequest, ifMatch int64) (*cloud.Endpoint, error) {
	if err := endpointUsers(a, "changing endpoints"); err != nil {
		return nil, err
	}
	var out *cloud.Endpoint
	err := s.tx(ctx, func(tx cloud.Tx) error {
		e, err := lookupEndpoint(ctx, tx, a, ref)
		if err != nil {
			return err
		}
		if err := CheckVersion("endpoint", e.ID, ifMatch, e.Version); err != nil {
			return err
		}
		if e.State != cloud.EndpointActive {
			return &cloud.Error{Code: cloud.Conflict, Message: "endpoint " + e.Name + " is " + string(e.State) + "; only an active one changes",
				Details: map[string]any{"state": e.State}}
		}
		spec := e.Spec
		set := func(dst *int, v *int) {
			if v != nil {
				*dst = *v
			}
		}
		if p.Image != nil {
			spec.Image = *p.Image
		}
		if p.Command != nil {
			spec.Command = *p.Command
		}
		if p.Env != nil {
			spec.Env = *p.Env
		}
		if p.Volumes != nil {
			spec.Volumes = *p.Volumes
		}
		if p.Offerings != nil {
			spec.Offerings = *p.Offerings
		}
		if p.Max != nil && *p.Max < 1 {
			return Field("max", "%d: want 1 to %d (min 0 scales to zero)", *p.Max, MaxEndpointWorkers)
		}
		set(&spec.Min, p.Min)
		set(&spec.Max, p.Max)
		set(&spec.Concurrency, p.Concurrency)
		set(&spec.IdleTimeoutSeconds, p.IdleTimeoutSeconds)
		set(&spec.TimeoutSeconds, p.TimeoutSeconds)
		set(&spec.Retries, p.Retries)
		set(&spec.RetentionSeconds, p.RetentionSeconds)
		set(&spec.QueueWaitSeconds, p.QueueWaitSeconds)
		set(&spec.Warm, p.Warm)
		if err := CheckEndpointSpec(s.cat, &spec); err != nil {
			return err
		}
		if spec.Warm > e.Spec.Warm {
			if err := s.pausesSomewhere(&spec); err != nil {
				return err
			}
		}
		if err := s.checkRegistry("image", spec.Image); err != nil {
			return err
		}
		if p.Volumes != nil {
			// Only a new list is checked: one already taken stays, and a
			// volume deleted since refuses the workers' launch.
			if err := checkEndpointVolumes(ctx, tx, e.TenantID, &spec); err != nil {
				return err
			}
		}
		var changed []string
		for _, f := range []struct {
			name      string
			was, want any
		}{{"image", e.Spec.Image, spec.Image}, {"command", e.Spec.Command, spec.Command}, {"env", e.Spec.Env, spec.Env},
			{"volumes", e.Spec.Volumes, spec.Volumes}, {"offerings", e.Spec.Offerings, spec.Offerings}} {
			if !sameJSON(f.was, f.want, false) {
				changed = append(changed, f.name)
			}
		}
		e.Spec = spec
		reason := "endpoint " + e.Name + " updated"
		if len(changed) > 0 {
			e.Status.Generation++
			e.Status.Hosts = nil // they cache the old image
			reason += fmt.Sprintf(" (%s: the workers roll over to generation %d)", strings.Join(changed, ", "), e.Status.Generation)
		}
		e.UpdatedAt = s.now()
		if err := tx.UpdateEndpoint(ctx, e); err != nil {
			return err
		}
		out = e
		return endpointEvent(ctx, tx, e, cloud.EventEndpoint, a.ID, reason, nil)
	})
	return out, err
}

// Delete marks an endpoint deleting: the controller terminates its
// workers, then marks it deleted. Its waiting jobs are cancelled.
func (s *Endpoints) Delete(ctx context.Context, a Actor, ref string) (*cloud.Endpoint, error) {
	if err := endpointUsers(a, "deleting endpoints"); err != nil {
		return nil, err
	}
	var out *cloud.Endpoint
	err := s.tx(ctx, func(tx cloud.Tx) error {
		e, err := lookupEndpoint(ctx, tx, a, ref)
		if err != nil {
			return err
		}
		if e.State != cloud.EndpointActive {
			out = e
			return nil // deleting already: a retry
		}
		now := s.now()
		e.State, e.UpdatedAt = cloud.EndpointDeleting, now
		if err := tx.UpdateEndpoint(ctx, e); err != nil {
			return err
		}
		n, err := cancelQueued(ctx, tx, e, now)
		if err != nil {
			return err
		}
		out = e
		return endpointEvent(ctx, tx, e, cloud.EventEndpoint, a.ID,
			fmt.Sprintf("endpoint %s deleted: its workers are terminated; %d waiting jobs cancelled", e.Name, n), nil)
	})
	return out, err
}

// Describe reads endpoint ref with its workers' instances, its queue's
// counts and its cost this month so far (EndpointCost); the gateway adds
// what only it knows (readiness, load, latency).
func (s *Endpoints) Describe(ctx context.Context, a Actor, ref string) (*api.EndpointDetail, error) {
	if err := endpointUsers(a, "describing endpoints"); err != nil {
		return nil, err
	}
	var out *api.EndpointDetail
	now := s.now()
	err := s.tx(ctx, func(tx cloud.Tx) error {
		e, err := lookupEndpoint(ctx, tx, a, ref)
		if err != nil {
			return err
		}
		d := &api.EndpointDetail{Endpoint: e, Workers: []api.EndpointWorker{}}
		period := billing.Month(now.UTC().Year(), now.UTC().Month())
		d.CostMonth = period.Name()
		cost, err := EndpointCost(ctx, tx, e, period, now)
		var ce *cloud.Error
		switch {
		case errors.As(err, &ce) && ce.Code == cloud.Conflict:
			d.CostError = ce.Message
		case err != nil:
			return err
		default:
			d.Cost = &cost
		}
		counts, err := tx.CountJobs(ctx, e.ID)
		if err != nil {
			return err
		}
		d.Queue = counts[e.ID]
		ids := make([]string, len(e.Status.Workers))
		for i, w := range e.Status.Workers {
			ids[i] = w.ID
		}
		if len(ids) > 0 {
			ins, err := tx.ListInstances(ctx, cloud.InstanceFilter{IDs: ids, TenantID: e.TenantID})
			if err != nil {
				return err
			}
			byID := map[string]*cloud.Instance{}
			for _, in := range ins {
				byID[in.ID] = in
			}
			for _, ref := range e.Status.Workers {
				in := byID[ref.ID]
				if in == nil {
					continue
				}
				d.Workers = append(d.Workers, api.EndpointWorker{ID: in.ID, Name: in.Name, State: in.State, Market: string(in.Market),
					Offering: in.Offering, Outdated: ref.Generation < e.Status.Generation, Created: in.CreatedAt})
			}
		}
		out = d
		return nil
	})
	return out, err
}

// EndpointCost is what e's workers cost in period as of asOf: the sum of
// e's lines on its tenant's invoice, rated by Rate as the invoice is (so
// that the two always agree). A gap in the price book is Rate's Conflict.
func EndpointCost(ctx context.Context, tx cloud.Tx, e *cloud.Endpoint, period billing.Period, asOf time.Time) (money.Micros, error) {
	invs, err := Rate(ctx, tx, e.TenantID, period, asOf)
	if err != nil {
		return 0, err
	}
	var sum money.Micros
	for _, inv := range invs {
		for _, l := range inv.Lines {
			if l.EndpointID == e.ID {
				sum += l.Amount
			}
		}
	}
	return sum, nil
}

// checkEndpointVolumes checks, in tx, the volumes an endpoint's workers
// mount: each one the tenant's own and not deleted (another tenant's
// answers not_found, as a missing one does), and shared, since an
// endpoint has many workers and a block volume attaches to one instance
// at a time; then as an instance create checks them (a host with the
// shared filesystem, the spec's zones).
func checkEndpointVolumes(ctx context.Context, tx cloud.Tx, tenant string, s *cloud.EndpointSpec) error {
	for i, id := range s.Volumes {
		field := fmt.Sprintf("volumes[%d]", i)
		v, err := tx.GetVolume(ctx, id)
		if cloud.IsNotFound(err) || err == nil && (v.TenantID != tenant || v.DeletedAt != nil) {
			return &cloud.Error{Code: cloud.NotFound, Message: field + ": volume " + Quote(id) + " not found",
				Details: map[string]any{"field": field, "kind": "volume", "id": id}}
		}
		if err != nil {
			return err
		}
		if !v.Shared() {
			return Field(field, "volume %s is a block volume, which attaches to one instance at a time, and an endpoint has many workers: "+
				"give a shared volume (volumes create --kind shared), which every worker mounts", v.ID)
		}
	}
	_, err := attachable(ctx, tx, &cloud.Instance{TenantID: tenant, Volumes: s.Volumes, Zones: s.Zones})
	return err
}
