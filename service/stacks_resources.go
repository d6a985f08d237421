package service

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
	"github.com/gpucloud/gpucloud/stack"
)

// How the stack engine creates, reads, changes and deletes each resource
// type: through the type's own service, as the API does, so that every
// rule (quotas, validation, idempotency, tenancy) is the API's.

// stackGroupBody is a group's properties: api.CreateGroupRequest's fields.
type stackGroupBody struct {
	Name          string                `json:"name"`
	Template      cloud.GroupTemplate   `json:"template"`
	Min           int                   `json:"min"`
	Max           int                   `json:"max"`
	Desired       *int                  `json:"desired,omitempty"`
	Policies      []cloud.ScalingPolicy `json:"policies,omitempty"`
	Mixed         cloud.MixedInstances  `json:"mixed,omitzero"`
	Timing        cloud.GroupTiming     `json:"timing,omitzero"`
	BudgetPerHour money.Micros          `json:"budget_per_hour,omitempty"`
	IdleRelease   *cloud.IdleRelease    `json:"idle_release,omitempty"`
	Tags          map[string]string     `json:"tags,omitempty"`
}

// decodeProps decodes a copy's resolved properties into a create body,
// refusing unknown fields and a tenant (a stack creates in its own
// tenant), with errors that name the resource copy.
func decodeProps(address string, props map[string]any, dst any) error {
	if _, ok := props["tenant"]; ok {
		return Field("resources."+address+".properties.tenant", "a stack creates its resources in its own tenant; leave tenant out")
	}
	b, err := json.Marshal(props)
	if err != nil {
		return Field("resources."+address+".properties", "%v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		msg := err.Error()
		msg = strings.TrimPrefix(msg, "json: ")
		return Field("resources."+address+".properties", "%s", msg)
	}
	return nil
}

// checkStackProps validates a copy's properties as its create would,
// without the store: the plan's early check, so that a typo fails the
// plan rather than the apply. Properties with values not known yet are
// checked for their fields only.
func (s *Stacks) checkStackProps(c *stack.Change) error {
	props := c.Properties
	known := true
	for _, v := range props {
		if hasUnknown(v) {
			known = false
		}
	}
	if !known {
		props = withoutUnknown(props)
	}
	switch c.Type {
	case stack.TypeInstance:
		var spec InstanceSpec
		if err := decodeProps(c.Address, props, &spec); err != nil || !known {
			return err
		}
		_, err := CheckInstanceSpec(s.cat, &spec)
		return stackField(c.Address, err)
	case stack.TypeVolume:
		var spec VolumeSpec
		if err := decodeProps(c.Address, props, &spec); err != nil || !known {
			return err
		}
		return stackField(c.Address, CheckVolumeSpec(&spec))
	case stack.TypeAddress:
		var spec AddressSpec
		return decodeProps(c.Address, props, &spec)
	case stack.TypeSpotRequest:
		var spec SpotRequestSpec
		if err := decodeProps(c.Address, props, &spec); err != nil || !known {
			return err
		}
		return stackField(c.Address, CheckSpotRequestSpec(s.cat, &spec))
	case stack.TypeGroup:
		var body stackGroupBody
		if err := decodeProps(c.Address, props, &body); err != nil || !known {
			return err
		}
		spec := body.spec()
		return stackField(c.Address, CheckGroupSpec(s.cat, &spec))
	case stack.TypePlacementGroup:
		var spec PlacementGroupSpec
		if err := decodeProps(c.Address, props, &spec); err != nil || !known {
			return err
		}
		return stackField(c.Address, CheckPlacementGroupSpec(&spec))
	case stack.TypeCommitment:
		var spec CommitmentSpec
		return decodeProps(c.Address, props, &spec)
	}
	return Field("resources."+c.Address+".type", "%s is not a resource type", Quote(c.Type))
}

func (b *stackGroupBody) spec() GroupSpec {
	return GroupSpec{Name: b.Name, Template: b.Template, Min: b.Min, Max: b.Max, Desired: b.Desired,
		Policies: b.Policies, Mixed: b.Mixed, Timing: b.Timing, BudgetPerHour: b.BudgetPerHour,
		IdleRelease: b.IdleRelease, Tags: b.Tags}
}

// stackField puts a copy's address in front of a field error's field.
func stackField(address string, err error) error {
	ce, ok := err.(*cloud.Error)
	if !ok || ce.Code != cloud.Invalid {
		return err
	}
	out := *ce
	out.Details = map[string]any{}
	for k, v := range ce.Details {
		out.Details[k] = v
	}
	if f, ok := ce.Details["field"].(string); ok {
		out.Details["field"] = "resources." + address + ".properties." + f
	}
	out.Message = "resources." + address + ".properties." + ce.Message
	return &out
}

func hasUnknown(v any) bool {
	switch x := v.(type) {
	case map[string]any:
		for _, e := range x {
			if hasUnknown(e) {
				return true
			}
		}
	case []any:
		for _, e := range x {
			if hasUnknown(e) {
				return true
			}
		}
	default:
		return stack.IsUnknown(v)
	}
	return false
}

// withoutUnknown drops the top-level properties whose value is not known
// yet, so that the rest can be decoded.
func withoutUnknown(props map[string]any) map[string]any {
	out := make(map[string]any, len(props))
	for k, v := range props {
		if !hasUnknown(v) {
			out[k] = v
		}
	}
	return out
}

// createResource creates one resource copy with the idempotency key key
// and answers its ID and attributes.
func (s *Stacks) createResource(ctx context.Context, svc *Services, a Actor, typ, address string, props map[string]any, key string) (string, map[string]any, error) {
	switch typ {
	case stack.TypeInstance:
		var spec InstanceSpec
		if err := decodeProps(address, props, &spec); err != nil {
			return "", nil, err
		}
		in, _, err := svc.Instances.Create(ctx, a, spec, key)
		if err != nil {
			return "", nil, stackField(address, err)
		}
		return in.ID, instanceAttrs(in), nil
	case stack.TypeVolume:
		var spec VolumeSpec
		if err := decodeProps(address, props, &spec); err != nil {
			return "", nil, err
		}
		v, _, err := svc.Volumes.Create(ctx, a, spec, key)
		if err != nil {
			return "", nil, stackField(address, err)
		}
		return v.ID, volumeAttrs(v), nil
	case stack.TypeAddress:
		var spec AddressSpec
		if err := decodeProps(address, props, &spec); err != nil {
			return "", nil, err
		}
		ad, _, err := svc.Addresses.Allocate(ctx, a, spec, key)
		if err != nil {
			return "", nil, stackField(address, err)
		}
		return ad.ID, addressAttrs(ad), nil
	case stack.TypeSpotRequest:
		var spec SpotRequestSpec
		if err := decodeProps(address, props, &spec); err != nil {
			return "", nil, err
		}
		r, _, err := svc.Spot.Create(ctx, a, spec, key)
		if err != nil {
			return "", nil, stackField(address, err)
		}
		return r.ID, spotAttrs(r), nil
	case stack.TypeGroup:
		var body stackGroupBody
		if err := decodeProps(address, props, &body); err != nil {
			return "", nil, err
		}
		g, _, err := svc.Groups.Create(ctx, a, body.spec(), key)
		if err != nil {
			return "", nil, stackField(address, err)
		}
		return g.ID, groupAttrs(g), nil
	case stack.TypePlacementGroup:
		var spec PlacementGroupSpec
		if err := decodeProps(address, props, &spec); err != nil {
			return "", nil, err
		}
		g, _, err := svc.Placement.Create(ctx, a, spec, key)
		if err != nil {
			return "", nil, stackField(address, err)
		}
		return g.ID, placementAttrs(g), nil
	case stack.TypeCommitment:
		var spec CommitmentSpec
		if err := decodeProps(address, props, &spec); err != nil {
			return "", nil, err
		}
		c, _, err := svc.Commitments.Create(ctx, a, spec, key)
		if err != nil {
			return "", nil, stackField(address, err)
		}
		return c.ID, map[string]any{"id": c.ID}, nil
	}
	return "", nil, Field("resources."+address+".type", "%s is not a resource type", Quote(typ))
}

// readResource reads a resource copy as it lives now: whether it is gone
// (terminated, deleted, released, cancelled, or not found), stopped, its
// attributes and its status word.
func (s *Stacks) readResource(ctx context.Context, svc *Services, a Actor, rs *stack.ResourceState) (live stack.Live, attrs map[string]any, status string, err error) {
	gone := func(err error) (stack.Live, map[string]any, string, error) {
		if cloud.ErrorCode(err) == cloud.NotFound {
			return stack.Live{Gone: true}, nil, "not found", nil
		}
		return stack.Live{}, nil, "", err
	}
	switch rs.Type {
	case stack.TypeInstance:
		in, err := svc.Instances.Get(ctx, a, rs.ID)
		if err != nil {
			return gone(err)
		}
		live, attrs, status := instanceLive(in)
		return live, attrs, status, nil
	case stack.TypeVolume:
		v, err := svc.Volumes.Get(ctx, a, rs.ID)
		if err != nil {
			return gone(err)
		}
		if v.DeletedAt != nil {
			return stack.Live{Gone: true}, volumeAttrs(v), "deleted", nil
		}
		status = "available"
		if v.InstanceID != "" {
			status = "attached to " + v.InstanceID
		}
		return live, volumeAttrs(v), status, nil
	case stack.TypeAddress:
		ad, err := svc.Addresses.Get(ctx, a, rs.ID)
		if err != nil {
			return gone(err)
		}
		if ad.ReleasedAt != nil {
			return stack.Live{Gone: true}, addressAttrs(ad), "released", nil
		}
		return live, addressAttrs(ad), "allocated", nil
	case stack.TypeSpotRequest:
		r, err := svc.Spot.Get(ctx, a, rs.ID)
		if err != nil {
			return gone(err)
		}
		if r.State == cloud.SpotCancelled || r.State == cloud.SpotClosed {
			live.Gone = true
		}
		return live, spotAttrs(r), string(r.State), nil
	case stack.TypeGroup:
		g, err := svc.Groups.Get(ctx, a, rs.ID)
		if err != nil {
			return gone(err)
		}
		if g.State != cloud.GroupActive {
			live.Gone = true
			return live, groupAttrs(g), string(g.State), nil
		}
		// min and max are the tenant's; desired moves with the group's
		// policies, and is only the stack's when it has none.
		fields := []struct {
			name string
			v    int
		}{{"min", g.Min}, {"max", g.Max}}
		if len(g.Policies) == 0 {
			fields = append(fields, struct {
				name string
				v    int
			}{"desired", g.Desired})
		}
		for _, f := range fields {
			if old, ok := rs.Properties[f.name]; ok && !stack.Equal(old, f.v) {
				live.Changed = append(live.Changed, stack.FieldDiff{Path: "properties." + f.name, Old: old, New: f.v})
			}
		}
		return live, groupAttrs(g), fmt.Sprintf("%s, %d of %d..%d", g.State, g.Desired, g.Min, g.Max), nil
	case stack.TypePlacementGroup:
		g, err := svc.Placement.Get(ctx, a, rs.ID)
		if err != nil {
			return gone(err)
		}
		if g.DeletedAt != nil {
			return stack.Live{Gone: true}, placementAttrs(g), "deleted", nil
		}
		return live, placementAttrs(g), "active", nil
	case stack.TypeCommitment:
		c, err := svc.Commitments.Get(ctx, a, rs.ID)
		if err != nil {
			return gone(err)
		}
		status = "active"
		if !c.Active(s.now()) {
			status = "not in its term"
		}
		return live, map[string]any{"id": c.ID}, status, nil
	}
	return stack.Live{}, nil, "", fmt.Errorf("unknown resource type %q", rs.Type)
}

// deleteResource deletes a resource copy. done is false when it cannot go
// yet (a volume attached to an instance still terminating, a placement
// group with members): the engine tries again on its next round. A
// resource already gone is done.
func (s *Stacks) deleteResource(ctx context.Context, svc *Services, a Actor, rs *stack.ResourceState) (done bool, why string, err error) {
	var derr error
	switch rs.Type {
	case stack.TypeInstance:
		_, derr = svc.Instances.Act(ctx, a, rs.ID, Terminate, 0)
		if cloud.ErrorCode(derr) == cloud.Conflict {
			// Terminated already, or on its way: done either way.
			if in, gerr := svc.Instances.Get(ctx, a, rs.ID); gerr == nil && (in.State == cloud.Terminated || in.State == cloud.Terminating) {
				derr = nil
			}
		}
	case stack.TypeVolume:
		_, derr = svc.Volumes.Delete(ctx, a, rs.ID)
	case stack.TypeAddress:
		_, derr = svc.Addresses.Release(ctx, a, rs.ID)
	case stack.TypeSpotRequest:
		_, derr = svc.Spot.Cancel(ctx, a, rs.ID, true, 0)
		if cloud.ErrorCode(derr) == cloud.Conflict {
			if r, gerr := svc.Spot.Get(ctx, a, rs.ID); gerr == nil && (r.State == cloud.SpotCancelled || r.State == cloud.SpotClosed) {
				derr = nil
			}
		}
	case stack.TypeGroup:
		_, derr = svc.Groups.Delete(ctx, a, rs.ID, 0)
	case stack.TypePlacementGroup:
		derr = svc.Placement.Delete(ctx, a, rs.ID)
	case stack.TypeCommitment:
		return true, "", nil // never deleted: a contract runs to its end
	default:
		return false, "", fmt.Errorf("unknown resource type %q", rs.Type)
	}
	switch cloud.ErrorCode(derr) {
	case "":
		return true, "", nil
	case cloud.NotFound:
		return true, "", nil
	case cloud.Conflict:
		return false, derr.Error(), nil
	}
	return false, "", derr
}

// instanceLive is an instance's drift inputs, attributes and status.
func instanceLive(in *cloud.Instance) (live stack.Live, attrs map[string]any, status string) {
	switch in.State {
	case cloud.Terminated, cloud.Terminating, cloud.Failed:
		live.Gone = true
	case cloud.Stopped, cloud.Stopping:
		live.Stopped = true
	}
	return live, instanceAttrs(in), string(in.State)
}

func instanceAttrs(in *cloud.Instance) map[string]any {
	m := map[string]any{"id": in.ID, "state": string(in.State)}
	for k, v := range map[string]string{"name": in.Name, "zone": in.Zone, "host_id": in.HostID, "private_address": in.PrivateAddress} {
		if v != "" {
			m[k] = v
		}
	}
	return m
}

func volumeAttrs(v *cloud.Volume) map[string]any {
	m := map[string]any{"id": v.ID, "name": v.Name, "size_gib": v.SizeGiB}
	if v.Zone != "" {
		m["zone"] = v.Zone
	}
	return m
}

func addressAttrs(a *cloud.Address) map[string]any {
	return map[string]any{"id": a.ID, "address": a.IP}
}

func spotAttrs(r *cloud.SpotRequest) map[string]any {
	m := map[string]any{"id": r.ID}
	if r.Name != "" {
		m["name"] = r.Name
	}
	if r.InstanceID != "" {
		m["instance_id"] = r.InstanceID
	}
	return m
}

func groupAttrs(g *cloud.Group) map[string]any {
	return map[string]any{"id": g.ID, "name": g.Name}
}

func placementAttrs(g *cloud.PlacementGroup) map[string]any {
	return map[string]any{"id": g.ID, "name": g.Name, "strategy": string(g.Strategy)}
}

// updateGroup changes a group's mutable properties in place.
func (s *Stacks) updateGroup(ctx context.Context, svc *Services, a Actor, address, id string, props map[string]any) error {
	var body stackGroupBody
	if err := decodeProps(address, props, &body); err != nil {
		return err
	}
	patch := GroupPatch{Min: &body.Min, Max: &body.Max, Desired: body.Desired, Template: &body.Template,
		Policies: &body.Policies, Mixed: &body.Mixed, Timing: &body.Timing, BudgetPerHour: &body.BudgetPerHour,
		IdleRelease: body.IdleRelease}
	if body.IdleRelease == nil {
		patch.IdleRelease = &cloud.IdleRelease{}
	}
	if body.Policies == nil {
		empty := []cloud.ScalingPolicy{}
		patch.Policies = &empty
	}
	_, err := svc.Groups.Update(ctx, a, id, patch, 0)
	return stackField(address, err)
}
