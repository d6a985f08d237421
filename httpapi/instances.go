package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/placement"
)

// Event kinds the API writes for instances.
const (
	// EventInstanceCreated is the first event of every instance.
	EventInstanceCreated = cloud.EventInstanceCreated
	// EventInstanceState records a state change (From, To, Reason).
	EventInstanceState = cloud.EventInstanceState
)

// checkInstanceRequest validates what can be checked without the store
// and returns the offering. Label selectors are stored in their parsed,
// canonical spelling.
func (s *api) checkInstanceRequest(req *CreateInstanceRequest) (*catalog.Offering, error) {
	if req.Offering == "" {
		return nil, field("offering", "is required; GET /v1/offerings lists them")
	}
	o, err := s.cat.Offering(req.Offering)
	if err != nil {
		var nf *catalog.NotFoundError
		if errors.As(err, &nf) {
			return nil, &cloud.Error{Code: cloud.Invalid, Message: "offering: " + err.Error(),
				Details: map[string]any{"field": "offering", "known": nf.Known[:min(len(nf.Known), 8)]}}
		}
		return nil, field("offering", "%v", err)
	}
	if err := checkName("name", req.Name, false); err != nil {
		return nil, err
	}
	if len(req.Zones) > maxZones {
		return nil, field("zones", "%d zones; the limit is %d", len(req.Zones), maxZones)
	}
	for i, z := range req.Zones {
		if err := checkName(fmt.Sprintf("zones[%d]", i), z, true); err != nil {
			return nil, err
		}
	}
	if len(req.Labels) > maxLabels {
		return nil, field("labels", "%d selectors; the limit is %d", len(req.Labels), maxLabels)
	}
	for i, l := range req.Labels {
		sel, err := placement.ParseLabelSelector(l)
		if err != nil {
			return nil, field(fmt.Sprintf("labels[%d]", i), "%v (examples: \"driver>=550\", \"gpu-direct\", \"!maintenance\")", err)
		}
		req.Labels[i] = sel.String()
	}
	if err := checkCommand(req.Command); err != nil {
		return nil, err
	}
	if err := checkEnv(req.Env); err != nil {
		return nil, err
	}
	if len(req.Tags) > maxTags {
		return nil, field("tags", "%d tags; the limit is %d", len(req.Tags), maxTags)
	}
	for k, v := range req.Tags {
		if k == "" {
			return nil, field("tags", "a tag key is empty")
		}
		if err := checkText("tags key", k, maxNameLen); err != nil {
			return nil, err
		}
		if err := checkText("tags."+k, v, maxTagLen); err != nil {
			return nil, err
		}
	}
	if len(req.Volumes) > maxVolumes {
		return nil, field("volumes", "%d volumes; the limit is %d", len(req.Volumes), maxVolumes)
	}
	for i, v := range req.Volumes {
		if v == "" || slices.Contains(req.Volumes[:i], v) {
			return nil, field(fmt.Sprintf("volumes[%d]", i), "volume IDs must be non-empty and given once")
		}
	}
	return o, nil
}

// checkCommand bounds the workload's argument vector. Arguments may hold
// any text but NUL, which cannot pass through exec.
func checkCommand(cmd []string) error {
	if len(cmd) > maxCommandArgs {
		return field("command", "%d arguments; the limit is %d", len(cmd), maxCommandArgs)
	}
	size := 0
	for i, a := range cmd {
		size += len(a)
		if strings.IndexByte(a, 0) >= 0 {
			return field(fmt.Sprintf("command[%d]", i), "contains a NUL byte")
		}
	}
	if size > maxCommandSize {
		return field("command", "is %d bytes long; the limit is %d", size, maxCommandSize)
	}
	return nil
}

// checkEnv bounds the workload's environment.
func checkEnv(env map[string]string) error {
	if len(env) > maxEnvVars {
		return field("env", "%d variables; the limit is %d", len(env), maxEnvVars)
	}
	size := 0
	for k, v := range env {
		size += len(k) + len(v)
		if !checkEnvName(k) {
			return field("env", "%s is not a variable name (letters, digits and '_', not starting with a digit)", quote(k))
		}
		if strings.IndexByte(v, 0) >= 0 {
			return field("env."+k, "contains a NUL byte")
		}
	}
	if size > maxEnvSize {
		return field("env", "is %d bytes long; the limit is %d", size, maxEnvSize)
	}
	return nil
}

// errNeedSerializable restarts a read-committed create at the store's
// default isolation.
var errNeedSerializable = errors.New("create needs serializable isolation")

// keyRace is returned from a create transaction that lost an idempotency
// race: the store found the key taken by an instance created meanwhile.
type keyRace struct{ id string }

func (k *keyRace) Error() string { return "idempotency key taken by " + k.id }

// createInstance handles POST /v1/instances. With an Idempotency-Key, a
// retry returns the instance the first call created, with 200 instead of
// 201; the same key with another offering or name is a conflict.
func (s *api) createInstance(w http.ResponseWriter, r *http.Request, p principal) error {
	var req CreateInstanceRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	key := r.Header.Get("Idempotency-Key")
	if err := checkIdempotencyKey(key); err != nil {
		return err
	}
	asked := req.Tenant
	if q := r.URL.Query().Get("tenant"); q != "" {
		if asked != "" && asked != q {
			return field("tenant", "the body says %s and ?tenant says %s", quote(asked), quote(q))
		}
		asked = q
	}
	o, err := s.checkInstanceRequest(&req)
	if err != nil {
		return err
	}
	var out *cloud.Instance
	created := false
	// A create without volumes, for a tenant without a quota, depends only
	// on the unique (tenant, idempotency key) constraint: it runs at read
	// committed, which spares it the aborts of serializable transactions
	// under contention. A quota count or a volume attachment needs
	// serializable isolation, so finding either restarts the create there.
	ctx := r.Context()
	if len(req.Volumes) == 0 {
		ctx = cloud.WithIsolation(ctx, cloud.ReadCommitted)
	}
	body := func(tx cloud.Tx) error {
		out, created = nil, false
		tenant, err := s.scope(ctx, tx, p, asked, p.TenantID)
		if err != nil {
			return err
		}
		if key != "" {
			old, err := tx.InstanceByKey(ctx, tenant, key)
			if err == nil {
				out = old
				return sameRequest(old, o, &req)
			}
			if !cloud.IsNotFound(err) {
				return err
			}
		}
		now := s.now()
		in := &cloud.Instance{ID: newID("i-"), TenantID: tenant, Name: req.Name, Offering: o.Name,
			State: cloud.Pending, IdempotencyKey: key, Zones: req.Zones, Labels: req.Labels,
			Command: req.Command, Env: req.Env, Volumes: req.Volumes, Tags: req.Tags,
			CreatedAt: now, UpdatedAt: now}
		vols, err := attachable(ctx, tx, tenant, in)
		if err != nil {
			return err
		}
		if cloud.IsolationOf(ctx) == cloud.ReadCommitted {
			q, err := getQuota(ctx, tx, tenant)
			if err != nil {
				return err
			}
			if q.Instances != 0 || len(q.GPUs) != 0 {
				return errNeedSerializable
			}
		} else if err := s.enforceQuota(ctx, tx, tenant, o); err != nil {
			return err
		}
		if err := tx.CreateInstance(ctx, in); err != nil {
			var ce *cloud.Error
			if errors.As(err, &ce) && ce.Code == cloud.Conflict && key != "" {
				if id, ok := ce.Details["existing_id"].(string); ok {
					return &keyRace{id: id}
				}
			}
			return err
		}
		for _, v := range vols {
			v.InstanceID = in.ID
			if err := tx.UpdateVolume(ctx, v); err != nil {
				return err
			}
		}
		if err := tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: EventInstanceCreated, TenantID: tenant,
			InstanceID: in.ID, To: cloud.Pending, Actor: p.UserID, Reason: "created with offering " + o.Name}); err != nil {
			return err
		}
		out, created = in, true
		return nil
	}
	err = s.tx(ctx, body)
	if errors.Is(err, errNeedSerializable) {
		ctx = r.Context()
		err = s.tx(ctx, body)
	}
	out, err = raceWinner(s, r.Context(), out, err, func(tx cloud.Tx, id string) (*cloud.Instance, error) { return tx.GetInstance(r.Context(), id) }, func(*cloud.Instance) error { return nil })
	if err != nil {
		return err
	}
	w.Header().Set("ETag", etag(out.Version))
	writeCreated(w, created, "/v1/instances/"+out.ID, out)
	return nil
}

// sameRequest reports a conflict when an idempotency key is reused for a
// different instance: answering the old one would hide the mistake.
func sameRequest(old *cloud.Instance, o *catalog.Offering, req *CreateInstanceRequest) error {
	if old.Offering == o.Name && old.Name == req.Name {
		return nil
	}
	return &cloud.Error{Code: cloud.Conflict,
		Message: "the Idempotency-Key was used for instance " + old.ID + " with another offering or name; use a new key for a new instance",
		Details: map[string]any{"existing_id": old.ID}}
}

// attachable reads the volumes an instance asks for and checks that they
// belong to its tenant and are detached. A missing volume and another
// tenant's answer the same, so that IDs do not leak.
func attachable(ctx context.Context, tx cloud.Tx, tenant string, in *cloud.Instance) ([]*cloud.Volume, error) {
	var vols []*cloud.Volume
	for i, id := range in.Volumes {
		name := fmt.Sprintf("volumes[%d]", i)
		v, err := tx.GetVolume(ctx, id)
		if cloud.IsNotFound(err) || err == nil && (v.TenantID != tenant || v.DeletedAt != nil) {
			return nil, field(name, "volume %s not found", quote(id))
		}
		if err != nil {
			return nil, err
		}
		if v.InstanceID != "" && v.InstanceID != in.ID {
			return nil, &cloud.Error{Code: cloud.Conflict,
				Message: "volume " + v.ID + " is attached to instance " + v.InstanceID + "; detach it first",
				Details: map[string]any{"field": name, "instance_id": v.InstanceID}}
		}
		if v.Zone != "" && len(in.Zones) > 0 && !slices.Contains(in.Zones, v.Zone) {
			return nil, field(name, "volume %s is in zone %s, which the instance's zones %v exclude", v.ID, v.Zone, in.Zones)
		}
		vols = append(vols, v)
	}
	return vols, nil
}

// getVisibleInstance reads an instance the principal may see; another
// tenant's answers exactly like a missing one.
func getVisibleInstance(ctx context.Context, tx cloud.Tx, p principal, id string) (*cloud.Instance, error) {
	in, err := tx.GetInstance(ctx, id)
	if cloud.IsNotFound(err) || err == nil && !p.visible(in.TenantID) {
		return nil, notFound("instance", id)
	}
	return in, err
}

// parseStates parses ?state=running,pending.
func parseStates(s string) ([]cloud.State, error) {
	if s == "" {
		return nil, nil
	}
	var out []cloud.State
	for _, part := range strings.Split(s, ",") {
		st := cloud.State(strings.TrimSpace(part))
		if !slices.Contains(liveStates, st) && st != cloud.Terminated {
			return nil, field("state", "unknown state %s (known: pending, scheduled, starting, running, stopping, stopped, failed, lost, terminated)", quote(string(st)))
		}
		out = append(out, st)
	}
	return out, nil
}

// listInstances handles GET /v1/instances. Members list their tenant's;
// admins every tenant's, or one tenant's with ?tenant. Pages are in ID
// order; next is the ?after of the following page.
func (s *api) listInstances(w http.ResponseWriter, r *http.Request, p principal) error {
	q := r.URL.Query()
	states, err := parseStates(q.Get("state"))
	if err != nil {
		return err
	}
	limit, err := queryLimit(r)
	if err != nil {
		return err
	}
	offering := q.Get("offering")
	if o, err := s.cat.Offering(offering); offering != "" && err == nil {
		offering = o.Name
	}
	market := cloud.Market(q.Get("market"))
	if market != "" && market != cloud.MarketOnDemand && market != cloud.MarketSpot {
		return field("market", "want %s or %s, got %s", cloud.MarketOnDemand, cloud.MarketSpot, quote(string(market)))
	}
	out := InstanceList{Instances: []*cloud.Instance{}}
	err = s.tx(r.Context(), func(tx cloud.Tx) error {
		tenant, err := s.scope(r.Context(), tx, p, q.Get("tenant"), "")
		if err != nil {
			return err
		}
		ins, err := tx.ListInstances(r.Context(), cloud.InstanceFilter{TenantID: tenant, States: states,
			HostID: q.Get("host"), Offering: offering, Market: market, Limit: limit + 1, AfterID: q.Get("after")})
		if err != nil {
			return err
		}
		out.Next = ""
		if len(ins) > limit {
			ins = ins[:limit]
			out.Next = ins[limit-1].ID
		}
		if ins != nil {
			out.Instances = ins
		}
		return nil
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// getInstance handles GET /v1/instances/{id}; the ETag is the version.
func (s *api) getInstance(w http.ResponseWriter, r *http.Request, p principal) error {
	var in *cloud.Instance
	err := s.tx(r.Context(), func(tx cloud.Tx) error {
		var err error
		in, err = getVisibleInstance(r.Context(), tx, p, r.PathValue("id"))
		return err
	})
	if err != nil {
		return err
	}
	w.Header().Set("ETag", etag(in.Version))
	writeJSON(w, http.StatusOK, in)
	return nil
}

// eventPage answers one page of events, asking the store for one more than
// the limit to know whether there is a next page.
func eventPage(ctx context.Context, tx cloud.Tx, f cloud.EventFilter) (EventList, error) {
	limit := f.Limit
	f.Limit++
	evs, err := tx.ListEvents(ctx, f)
	if err != nil {
		return EventList{}, err
	}
	out := EventList{Events: []*cloud.Event{}}
	if len(evs) > limit {
		evs = evs[:limit]
		out.Next = strconv.FormatInt(evs[limit-1].ID, 10)
	}
	if evs != nil {
		out.Events = evs
	}
	return out, nil
}

// instanceEvents handles GET /v1/instances/{id}/events.
func (s *api) instanceEvents(w http.ResponseWriter, r *http.Request, p principal) error {
	limit, err := queryLimit(r)
	if err != nil {
		return err
	}
	after, err := queryAfterInt(r)
	if err != nil {
		return err
	}
	var out EventList
	err = s.tx(r.Context(), func(tx cloud.Tx) error {
		in, err := getVisibleInstance(r.Context(), tx, p, r.PathValue("id"))
		if err != nil {
			return err
		}
		out, err = eventPage(r.Context(), tx, cloud.EventFilter{InstanceID: in.ID, AfterID: after, Limit: limit})
		return err
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// listEvents handles GET /v1/events (admin), filtered by ?host, ?tenant
// and ?instance.
func (s *api) listEvents(w http.ResponseWriter, r *http.Request, p principal) error {
	limit, err := queryLimit(r)
	if err != nil {
		return err
	}
	after, err := queryAfterInt(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	var out EventList
	err = s.tx(r.Context(), func(tx cloud.Tx) error {
		var err error
		out, err = eventPage(r.Context(), tx, cloud.EventFilter{TenantID: q.Get("tenant"),
			InstanceID: q.Get("instance"), HostID: q.Get("host"), AfterID: after, Limit: limit})
		return err
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
