package service

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/placement"
)

// Instances is the instance service: create, read, and the lifecycle
// actions tenants ask for.
type Instances struct {
	base
	creates *createQueues
}

// CheckInstanceSpec validates what can be checked without the store and
// returns the offering. Label selectors and the image are rewritten in
// their parsed, canonical spelling.
func CheckInstanceSpec(cat *catalog.Catalog, spec *api.CreateInstanceRequest) (*catalog.Offering, error) {
	if spec.Offering == "" {
		return nil, Field("offering", "is required; GET /v1/offerings lists them")
	}
	o, err := cat.Offering(spec.Offering)
	if err != nil {
		var nf *catalog.NotFoundError
		if errors.As(err, &nf) {
			return nil, &cloud.Error{Code: cloud.Invalid, Message: "offering: " + err.Error(),
				Details: map[string]any{"field": "offering", "known": nf.Known[:min(len(nf.Known), 8)]}}
		}
		return nil, Field("offering", "%v", err)
	}
	if err := CheckName("name", spec.Name, false); err != nil {
		return nil, err
	}
	if err := CheckText("placement_group", spec.PlacementGroup, maxNameLen); err != nil {
		return nil, err
	}
	if spec.Image, err = CheckImage("image", spec.Image); err != nil {
		return nil, err
	}
	if len(spec.Zones) > maxZones {
		return nil, Field("zones", "%d zones; the limit is %d", len(spec.Zones), maxZones)
	}
	for i, z := range spec.Zones {
		if err := CheckName(fmt.Sprintf("zones[%d]", i), z, true); err != nil {
			return nil, err
		}
	}
	if len(spec.Labels) > maxLabels {
		return nil, Field("labels", "%d selectors; the limit is %d", len(spec.Labels), maxLabels)
	}
	for i, l := range spec.Labels {
		sel, err := placement.ParseLabelSelector(l)
		if err != nil {
			return nil, Field(fmt.Sprintf("labels[%d]", i), "%v (examples: \"driver>=550\", \"gpu-direct\", \"!maintenance\")", err)
		}
		spec.Labels[i] = sel.String()
	}
	if err := CheckWorkload(spec.Command, spec.Env, spec.Volumes, spec.Tags); err != nil {
		return nil, err
	}
	if err := checkNetworkSpec(spec); err != nil {
		return nil, err
	}
	if err := CheckPublish(spec.Publish, spec.PublishKeepPrefix); err != nil {
		return nil, err
	}
	return o, nil
}

// MaxPublish is how many ports one instance may publish.
const MaxPublish = 8

// CheckPublish validates an instance's published ports: 1 to 65535, each
// once, at most MaxPublish; and the ports among them that keep their
// path's prefix (each published, once).
func CheckPublish(ports, keepPrefix []int) error {
	if len(ports) > MaxPublish {
		return Field("publish", "%d ports; an instance publishes at most %d", len(ports), MaxPublish)
	}
	for i, p := range ports {
		field := fmt.Sprintf("publish[%d]", i)
		if p < 1 || p > 65535 {
			return Field(field, "%d is not a TCP port (1 to 65535)", p)
		}
		if slices.Contains(ports[:i], p) {
			return Field(field, "port %d is published twice", p)
		}
	}
	for i, p := range keepPrefix {
		field := fmt.Sprintf("publish_keep_prefix[%d]", i)
		if !slices.Contains(ports, p) {
			return Field(field, "port %d is not published (publish lists %v): a port keeps its prefix only if it is published", p, ports)
		}
		if slices.Contains(keepPrefix[:i], p) {
			return Field(field, "port %d is given twice", p)
		}
	}
	return nil
}

// CheckWorkload validates what an instance runs: its command, environment,
// volumes and tags (instances and spot requests share the rule).
func CheckWorkload(cmd []string, env map[string]string, volumes []string, tags map[string]string) error {
	if err := checkCommand(cmd); err != nil {
		return err
	}
	if err := checkEnv(env); err != nil {
		return err
	}
	if err := CheckTags("tags", tags); err != nil {
		return err
	}
	if len(volumes) > maxVolumes {
		return Field("volumes", "%d volumes; the limit is %d", len(volumes), maxVolumes)
	}
	for i, v := range volumes {
		if v == "" || slices.Contains(volumes[:i], v) {
			return Field(fmt.Sprintf("volumes[%d]", i), "volume IDs must be non-empty and given once")
		}
	}
	return nil
}

// checkCommand bounds the workload's argument vector. Arguments may hold
// any text but NUL, which cannot pass through exec.
func checkCommand(cmd []string) error {
	if len(cmd) > maxCommandArgs {
		return Field("command", "%d arguments; the limit is %d", len(cmd), maxCommandArgs)
	}
	size := 0
	for i, a := range cmd {
		size += len(a)
		if strings.IndexByte(a, 0) >= 0 {
			return Field(fmt.Sprintf("command[%d]", i), "contains a NUL byte")
		}
	}
	if size > maxCommandSize {
		return Field("command", "is %d bytes long; the limit is %d", size, maxCommandSize)
	}
	return nil
}

// checkEnv bounds the workload's environment.
func checkEnv(env map[string]string) error {
	if len(env) > maxEnvVars {
		return Field("env", "%d variables; the limit is %d", len(env), maxEnvVars)
	}
	size := 0
	for k, v := range env {
		size += len(k) + len(v)
		if !checkEnvName(k) {
			return Field("env", "%s is not a variable name (letters, digits and '_', not starting with a digit)", Quote(k))
		}
		if strings.IndexByte(v, 0) >= 0 {
			return Field("env."+k, "contains a NUL byte")
		}
	}
	if size > maxEnvSize {
		return Field("env", "is %d bytes long; the limit is %d", size, maxEnvSize)
	}
	return nil
}

// CreateInstance is the one way an instance comes to be, whoever asks
// (the API, a spot request's launch, the autoscaler, a stack): in tx it
// checks the tenant's quota (EnforceQuota), checks and attaches the
// volumes (one rule: the tenant's own, not deleted, in one of the
// instance's zones, and not attached to another instance that is not
// terminated), gives it an ID when it has none, gives it its place on a
// private network (placeOnNetwork: in.SubnetID and in.SecurityGroupIDs,
// or the tenant's defaults; a private address), writes it pending, and
// appends its instance.created event with reason. A key the tenant used
// before makes the store's unique constraint answer with the existing
// instance's ID (see asKeyRace).
//
// It may run at read committed (cloud.ReadCommitted) when the instance
// has no volumes: EnforceQuota locks the tenant's quota before it counts.
//
// in is the instance to create: CreateInstance fills in its ID (when
// empty), state, times and version; TenantID, Offering (a catalog name)
// and the workload are the caller's.
func CreateInstance(ctx context.Context, tx cloud.Tx, cat *catalog.Catalog, in *cloud.Instance, actor, reason string) error {
	o, err := cat.Offering(in.Offering)
	if err != nil {
		return Field("offering", "%v", err)
	}
	in.Offering = o.Name
	if in.ID == "" {
		in.ID = NewID(InstancePrefix)
	}
	if in.Market == "" {
		in.Market = cloud.MarketOnDemand
	}
	in.State, in.UpdatedAt = cloud.Pending, in.CreatedAt
	vols, err := attachable(ctx, tx, in)
	if err != nil {
		return err
	}
	if err := EnforceQuota(ctx, tx, cat, in.TenantID, o); err != nil {
		return err
	}
	sub, err := placeOnNetwork(ctx, tx, in, actor)
	if err != nil {
		return err
	}
	ev := &cloud.Event{Time: in.CreatedAt, Kind: cloud.EventInstanceCreated, TenantID: in.TenantID,
		InstanceID: in.ID, To: cloud.Pending, Actor: actor, Reason: reason}
	if b := deferring(ctx, in); b != nil {
		b.add(in, sub, ev)
		return nil
	}
	if err := tx.CreateInstance(ctx, in); err != nil {
		return asKeyRace(err, in.IdempotencyKey)
	}
	if err := tx.AppendEvent(ctx, ev); err != nil {
		return err
	}
	for _, v := range vols {
		// A shared volume's attachments are the instances that name it.
		if !v.Shared() {
			v.InstanceID = in.ID
			if err := tx.UpdateVolume(ctx, v); err != nil {
				return err
			}
		}
		if err := tx.AppendEvent(ctx, &cloud.Event{Time: in.CreatedAt, Kind: EventVolumeAttached, TenantID: in.TenantID,
			InstanceID: in.ID, Actor: actor, Reason: "volume " + v.ID + " attached at the instance's creation",
			Details: volumeDetails(v.ID)}); err != nil {
			return err
		}
	}
	return nil
}

// attachable reads the volumes an instance asks for and checks that they
// may be attached to it: the tenant's own and not deleted (a missing
// volume and another tenant's answer the same, so that IDs do not leak),
// in one of the instance's zones when it names zones, and not attached to
// another instance that is not terminated. A shared volume may be attached
// to any number of instances, where some host has the shared filesystem.
func attachable(ctx context.Context, tx cloud.Tx, in *cloud.Instance) ([]*cloud.Volume, error) {
	var vols []*cloud.Volume
	for i, id := range in.Volumes {
		name := fmt.Sprintf("volumes[%d]", i)
		v, err := tx.GetVolume(ctx, id)
		if cloud.IsNotFound(err) || err == nil && (v.TenantID != in.TenantID || v.DeletedAt != nil) {
			return nil, Field(name, "volume %s not found", Quote(id))
		}
		if err != nil {
			return nil, err
		}
		if v.Shared() {
			if err := sharedVolumesOffered(ctx, tx, name); err != nil {
				return nil, err
			}
		}
		if v.InstanceID != "" && v.InstanceID != in.ID {
			other, err := tx.GetInstance(ctx, v.InstanceID)
			if err != nil && !cloud.IsNotFound(err) {
				return nil, err
			}
			if err == nil && other.State != cloud.Terminated {
				return nil, &cloud.Error{Code: cloud.Conflict,
					Message: "volume " + v.ID + " is attached to instance " + v.InstanceID + " (" + string(other.State) + "); detach it first",
					Details: map[string]any{"field": name, "instance_id": v.InstanceID}}
			}
		}
		if v.Zone != "" && len(in.Zones) > 0 && !slices.Contains(in.Zones, v.Zone) {
			return nil, Field(name, "volume %s is in zone %s, which the instance's zones %v exclude", v.ID, v.Zone, in.Zones)
		}
		vols = append(vols, v)
	}
	return vols, nil
}

// Create creates an instance for actor a. With an idempotency key, a retry
// answers the instance the first call created (created false); the same
// key with a request that differs in any field is a Conflict naming the
// fields.
func (s *Instances) Create(ctx context.Context, a Actor, spec api.CreateInstanceRequest, key string) (out *cloud.Instance, created bool, err error) {
	if err := CheckIdempotencyKey(key); err != nil {
		return nil, false, err
	}
	o, err := CheckInstanceSpec(s.cat, &spec)
	if err != nil {
		return nil, false, err
	}
	if err := s.checkRegistry("image", spec.Image); err != nil {
		return nil, false, err
	}
	spec.Tags = addSystemTags(ctx, spec.Tags)
	c := &createCall{ctx: ctx, a: a, spec: spec, o: o, key: key, done: make(chan struct{})}
	if len(spec.Volumes) > 0 {
		// A volume attachment needs serializable isolation: such a
		// create runs alone.
		res, err := s.commitCreates(ctx, []*createCall{c}, true)
		return s.settleCreate(c, res, err)
	}
	// A create without volumes depends only on the unique (tenant,
	// idempotency key) constraint and on the tenant's quota, which
	// EnforceQuota locks before it counts: it runs at read committed,
	// which spares it the aborts of serializable transactions under
	// contention, with the other creates of its tenant that arrive while
	// one runs (runCreates).
	s.creates.submit(c.asked(), c, s.runCreates)
	return c.out, c.created, c.err
}

// createIn is one create inside a transaction: the tenant, the key's
// earlier instance (created false), the offering's availability, the
// placement group, then CreateInstance.
func (s *Instances) createIn(ctx context.Context, tx cloud.Tx, a Actor, spec *api.CreateInstanceRequest, o *catalog.Offering, key string) (*cloud.Instance, bool, error) {
	tenant, err := Scope(ctx, tx, a, spec.Tenant, a.TenantID)
	if err != nil {
		return nil, false, err
	}
	if err := subnetZone(ctx, tx, tenant, spec); err != nil {
		return nil, false, err
	}
	byKey := func(k string) (*cloud.Instance, error) { return batchOf(ctx).instanceByKey(ctx, tx, tenant, k) }
	same := func(old *cloud.Instance) error { return sameInstance(old, o, spec) }
	if old, found, err := prior(key, byKey, same); found || err != nil {
		return old, false, err
	}
	if err := s.runnable(ctx, tx, o, spec.Image); err != nil {
		return nil, false, err
	}
	if spec.PlacementGroup != "" {
		if err := checkedPlacementGroup(ctx, tx, tenant, spec.PlacementGroup); err != nil {
			return nil, false, err
		}
	}
	in := &cloud.Instance{TenantID: tenant, Name: spec.Name, Offering: o.Name, Image: spec.Image,
		IdempotencyKey: key, Zones: spec.Zones, Labels: spec.Labels, Command: spec.Command,
		Env: spec.Env, Volumes: spec.Volumes, Tags: spec.Tags, PlacementGroupID: spec.PlacementGroup, CreatedAt: s.now(),
		SubnetID: spec.Subnet, SecurityGroupIDs: slices.Clone(spec.SecurityGroups), Publish: slices.Clone(spec.Publish),
		PublishKeepPrefix: slices.Clone(spec.PublishKeepPrefix)}
	if err := CreateInstance(ctx, tx, s.cat, in, a.ID, "created with offering "+o.Name); err != nil {
		return nil, false, err
	}
	return in, true, nil
}

// InstanceCreate is one create of CreateMany: a spec, its idempotency
// key, and the system tags it carries (added after the spec's check, as
// WithSystemTags adds them).
type InstanceCreate struct {
	Spec api.CreateInstanceRequest
	Key  string
	Tags map[string]string
}

// CreateMany creates several instances of actor a in one transaction,
// each exactly as Create would (createIn), and answers them in order; any
// failure fails them all and writes nothing, and the caller creates them
// one by one to learn which failed. The stack engine uses it for the
// instances of one wave.
func (s *Instances) CreateMany(ctx context.Context, a Actor, items []InstanceCreate) ([]*cloud.Instance, error) {
	offs := make([]*catalog.Offering, len(items))
	volumes := false
	for i := range items {
		it := &items[i]
		if err := CheckIdempotencyKey(it.Key); err != nil {
			return nil, err
		}
		o, err := CheckInstanceSpec(s.cat, &it.Spec)
		if err != nil {
			return nil, err
		}
		if err := s.checkRegistry("image", it.Spec.Image); err != nil {
			return nil, err
		}
		offs[i] = o
		it.Spec.Tags = addSystemTags(WithSystemTags(ctx, it.Tags), it.Spec.Tags)
		volumes = volumes || len(it.Spec.Volumes) > 0
	}
	calls := make([]*createCall, len(items))
	for i := range items {
		calls[i] = &createCall{ctx: ctx, a: a, spec: items[i].Spec, o: offs[i], key: items[i].Key}
	}
	res, err := s.commitCreates(ctx, calls, volumes)
	if err != nil {
		return nil, err
	}
	out := make([]*cloud.Instance, len(res))
	for i, r := range res {
		out[i] = r.out
	}
	return out, nil
}

// sameInstance reports a conflict when an idempotency key is reused for an
// instance that differs in any field the request sent.
func sameInstance(old *cloud.Instance, o *catalog.Offering, spec *api.CreateInstanceRequest) error {
	var d KeyDiffs
	d.String("name", old.Name, spec.Name)
	d.String("offering", old.Offering, o.Name)
	d.String("image", old.Image, spec.Image)
	d.Strings("zones", old.Zones, spec.Zones)
	d.Strings("labels", old.Labels, spec.Labels)
	d.Strings("command", old.Command, spec.Command)
	d.Map("env", old.Env, spec.Env)
	d.Strings("volumes", old.Volumes, spec.Volumes)
	d.Map("tags", old.Tags, spec.Tags)
	d.String("placement_group", old.PlacementGroupID, spec.PlacementGroup)
	if !slices.Equal(old.Publish, spec.Publish) {
		d.Add("publish", render(old.Publish), render(spec.Publish))
	}
	if !slices.Equal(old.PublishKeepPrefix, spec.PublishKeepPrefix) {
		d.Add("publish_keep_prefix", render(old.PublishKeepPrefix), render(spec.PublishKeepPrefix))
	}
	// A create without a subnet or groups got the defaults.
	if spec.Subnet != "" {
		d.String("subnet", old.SubnetID, spec.Subnet)
	}
	if len(spec.SecurityGroups) > 0 {
		d.Strings("security_groups", old.SecurityGroupIDs, spec.SecurityGroups)
	}
	return d.Err("instance", old.ID)
}

// Get reads an instance actor a may see.
func (s *Instances) Get(ctx context.Context, a Actor, id string) (*cloud.Instance, error) {
	var in *cloud.Instance
	err := s.tx(ctx, func(tx cloud.Tx) error {
		var err error
		in, err = Visible(ctx, a, "instance", id, tx.GetInstance)
		return err
	})
	return in, err
}

// InstanceQuery selects instances to list. Tenant is for admins (empty:
// every tenant); members always list their own.
type InstanceQuery struct {
	Tenant   string
	States   []cloud.State
	Host     string
	Offering string
	Market   cloud.Market
	// Name selects the instances of that exact name (the CLI resolves a
	// name a user typed with it).
	Name string
	// Limit caps the page (it must be positive); After pages by ID, or
	// with NewestFirst in that order.
	Limit int
	After string
	// NewestFirst lists the newest instances first (by creation, then by
	// ID), across pages.
	NewestFirst bool
}

// List answers one page of the instances actor a may see, in ID order
// (newest first with q.NewestFirst), and the After of the next page (""
// at the end).
func (s *Instances) List(ctx context.Context, a Actor, q InstanceQuery) (ins []*cloud.Instance, next string, err error) {
	if q.Offering != "" {
		if o, err := s.cat.Offering(q.Offering); err == nil {
			q.Offering = o.Name
		}
	}
	if q.Market != "" && q.Market != cloud.MarketOnDemand && q.Market != cloud.MarketSpot {
		return nil, "", Field("market", "want %s or %s, got %s", cloud.MarketOnDemand, cloud.MarketSpot, Quote(string(q.Market)))
	}
	if q.Limit <= 0 {
		return nil, "", Field("limit", "must be positive")
	}
	err = s.tx(ctx, func(tx cloud.Tx) error {
		tenant, err := Scope(ctx, tx, a, q.Tenant, "")
		if err != nil {
			return err
		}
		ins, err = tx.ListInstances(ctx, cloud.InstanceFilter{TenantID: tenant, States: q.States,
			HostID: q.Host, Offering: q.Offering, Market: q.Market, Name: q.Name, Limit: q.Limit + 1, AfterID: q.After,
			NewestFirst: q.NewestFirst})
		return err
	})
	if err != nil {
		return nil, "", err
	}
	if len(ins) > q.Limit {
		ins = ins[:q.Limit]
		next = ins[q.Limit-1].ID
	}
	return ins, next, nil
}

// Act applies a lifecycle action (Stop, Start, Terminate) that actor a
// asks for. ifMatch, when not zero, is the version the caller read: a
// stale one is a conflict, even when the action would change nothing.
func (s *Instances) Act(ctx context.Context, a Actor, id string, action Action, ifMatch int64) (*cloud.Instance, error) {
	var out *cloud.Instance
	err := s.tx(ctx, func(tx cloud.Tx) error {
		in, err := Visible(ctx, a, "instance", id, tx.GetInstance)
		if err != nil {
			return err
		}
		if err := CheckVersion("instance", id, ifMatch, in.Version); err != nil {
			return err
		}
		out = in
		_, err = Act(ctx, tx, a, in, action, "", s.now())
		return err
	})
	return out, err
}

// Events answers one page of the events of an instance actor a may see,
// after the event ID after, and the after of the next page (0 at the
// end).
func (s *Instances) Events(ctx context.Context, a Actor, id string, after int64, limit int) (evs []*cloud.Event, next int64, err error) {
	err = s.tx(ctx, func(tx cloud.Tx) error {
		in, err := Visible(ctx, a, "instance", id, tx.GetInstance)
		if err != nil {
			return err
		}
		evs, next, err = EventPage(ctx, tx, cloud.EventFilter{InstanceID: in.ID, AfterID: after, Limit: limit})
		return err
	})
	return evs, next, err
}

// EventPage reads one page of events, asking the store for one more than
// the limit to know whether there is a next page.
func EventPage(ctx context.Context, tx cloud.Tx, f cloud.EventFilter) ([]*cloud.Event, int64, error) {
	limit := f.Limit
	f.Limit++
	evs, err := tx.ListEvents(ctx, f)
	if err != nil {
		return nil, 0, err
	}
	var next int64
	if limit > 0 && len(evs) > limit {
		evs = evs[:limit]
		next = evs[limit-1].ID
	}
	return evs, next, nil
}

// EventLog answers one page of the whole event trail (admins only),
// filtered by f, and the after of the next page (0 at the end).
func (s *Instances) EventLog(ctx context.Context, a Actor, f cloud.EventFilter) (evs []*cloud.Event, next int64, err error) {
	if !a.Admin() {
		return nil, 0, &cloud.Error{Code: cloud.PermissionDenied, Message: "the event trail is for admins only"}
	}
	err = s.tx(ctx, func(tx cloud.Tx) error {
		evs, next, err = EventPage(ctx, tx, f)
		return err
	})
	return evs, next, err
}

// runnable refuses an offering that no host of the fleet could ever run
// (Options.Availability), rather than accepting an instance that would
// wait forever; with an image, also one that only hosts running plain
// processes could run (they cannot run an image). When the fleet is
// unknown, empty, or stale (a host joined or left since the scheduler
// counted: the store's host count differs), it says nothing.
func (s *base) runnable(ctx context.Context, tx cloud.Tx, o *catalog.Offering, image string) error {
	a, ok := s.Availability()[o.Name]
	never := a.Hosts == 0 && total(a.Reasons) > 0
	noContainers := image != "" && a.Hosts > 0 && a.Containers == 0
	if !ok || !never && !noContainers {
		return nil
	}
	st, err := tx.HostStamp(ctx)
	if err != nil {
		return err
	}
	if st.Hosts != a.FleetHosts {
		return nil
	}
	if noContainers {
		return &cloud.Error{Code: cloud.Invalid,
			Message: fmt.Sprintf("image: every host that could run offering %s runs workloads as plain processes (%d hosts), which cannot run an image; "+
				"leave --image out to run the command on the host, or add hosts that run containers (gpucloud agent --runtime containerd)", o.Name, a.Hosts),
			Details: map[string]any{"field": "image", "hosts": a.Hosts, "containers": 0}}
	}
	return &cloud.Error{Code: cloud.Invalid,
		Message: fmt.Sprintf("offering %s: no host in this cloud could ever run it (%s); 'gpucloud offerings --available' lists the offerings its hosts can run",
			o.Name, fmt.Sprintf("%d hosts: %s", total(a.Reasons), placement.FormatReasons(a.Reasons))),
		Details: map[string]any{"field": "offering", "hosts": total(a.Reasons), "reasons": a.Reasons}}
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// MaxInstanceMetricPoints caps what InstanceMetrics answers.
const MaxInstanceMetricPoints = 5000

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
