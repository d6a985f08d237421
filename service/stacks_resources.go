package service

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/stack"
)

// How a stack's resource copies are checked and read: through each type's
// own service, as the API does, so that every rule (quotas, validation,
// idempotency, tenancy) is the API's. The stack engine creates, changes
// and deletes them the same way (package stackengine).

// decodeProps decodes a copy's resolved properties into a create body,
// refusing unknown fields and a tenant (a stack creates in its own
// tenant), with errors that name the resource copy.
func DecodeStackProps(address string, props map[string]any, dst any) error {
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
		var spec api.CreateInstanceRequest
		if err := DecodeStackProps(c.Address, props, &spec); err != nil || !known {
			return err
		}
		_, err := CheckInstanceSpec(s.cat, &spec)
		if err == nil {
			err = s.checkRegistry("image", spec.Image)
		}
		return StackFieldError(c.Address, err)
	case stack.TypeVolume:
		var spec api.CreateVolumeRequest
		if err := DecodeStackProps(c.Address, props, &spec); err != nil || !known {
			return err
		}
		return StackFieldError(c.Address, CheckVolumeSpec(&spec))
	case stack.TypeAddress:
		var spec api.AllocateAddressRequest
		return DecodeStackProps(c.Address, props, &spec)
	case stack.TypeSpotRequest:
		var spec api.CreateSpotRequestRequest
		if err := DecodeStackProps(c.Address, props, &spec); err != nil || !known {
			return err
		}
		err := CheckSpotRequestSpec(s.cat, &spec)
		if err == nil {
			err = s.checkRegistry("image", spec.Image)
		}
		return StackFieldError(c.Address, err)
	case stack.TypeGroup:
		var body api.CreateGroupRequest
		if err := DecodeStackProps(c.Address, props, &body); err != nil || !known {
			return err
		}
		err := CheckGroupSpec(s.cat, &body)
		if err == nil {
			err = s.checkRegistry("template.image", body.Template.Image)
		}
		return StackFieldError(c.Address, err)
	case stack.TypePlacementGroup:
		var spec api.CreatePlacementGroupRequest
		if err := DecodeStackProps(c.Address, props, &spec); err != nil || !known {
			return err
		}
		return StackFieldError(c.Address, CheckPlacementGroupSpec(&spec))
	case stack.TypeCommitment:
		var spec api.CreateCommitmentRequest
		return DecodeStackProps(c.Address, props, &spec)
	case stack.TypeNetwork:
		var spec api.CreateNetworkRequest
		if err := DecodeStackProps(c.Address, props, &spec); err != nil || !known {
			return err
		}
		return StackFieldError(c.Address, CheckNetworkSpec(&spec))
	case stack.TypeSubnet:
		// Its network is most often the stack's own, known only after
		// apply: the rest is checked all the same.
		var spec api.CreateSubnetRequest
		if err := DecodeStackProps(c.Address, props, &spec); err != nil || !unknownOnly(c.Properties, "network") {
			return err
		}
		if spec.Network == "" && !known {
			spec.Network = unknownNetwork
		}
		return StackFieldError(c.Address, CheckSubnetSpec(&spec))
	case stack.TypeSecurityGroup:
		var t api.SecurityGroupTemplate
		if err := DecodeStackProps(c.Address, props, &t); err != nil || !unknownOnly(c.Properties, "network") {
			return err
		}
		if t.Network == "" && !known {
			t.Network = unknownNetwork
		}
		return StackFieldError(c.Address, CheckSecurityGroupTemplate(&t))
	case stack.TypeSecurityGroupRule:
		return checkRuleProps(c.Address, c.Properties, props, known)
	case stack.TypeEndpoint:
		return s.checkEndpointProps(c.Address, props, known)
	}
	return Field("resources."+c.Address+".type", "%s is not a resource type", Quote(c.Type))
}

// unknownNetwork stands for a network ID known only after apply, while a
// subnet or security group is checked.
const unknownNetwork = NetworkPrefix + "unknown"

// unknownOnly reports whether every top-level property of props whose
// value is not known yet is one of keys.
func unknownOnly(props map[string]any, keys ...string) bool {
	for k, v := range props {
		if hasUnknown(v) && !slices.Contains(keys, k) {
			return false
		}
	}
	return true
}

// StackFieldError puts a copy's address in front of a field error's field.
func StackFieldError(address string, err error) error {
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
		live, status := groupLive(g, rs)
		return live, groupAttrs(g), status, nil
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
	case stack.TypeNetwork, stack.TypeSubnet, stack.TypeSecurityGroup, stack.TypeSecurityGroupRule:
		l, attrs, status, err := readNetworkResource(ctx, svc, a, rs)
		if err != nil {
			return gone(err)
		}
		return l, attrs, status, nil
	case stack.TypeEndpoint:
		l, attrs, status, err := readEndpoint(ctx, svc, a, rs)
		if err != nil {
			return gone(err)
		}
		return l, attrs, status, nil
	}
	return stack.Live{}, nil, "", fmt.Errorf("unknown resource type %q", rs.Type)
}

// groupLive is a group's drift inputs and status. Its min and max are the
// tenant's; its desired size moves with the group's policies, and is only
// the stack's when it has none.
func groupLive(g *cloud.Group, rs *stack.ResourceState) (live stack.Live, status string) {
	if g.State != cloud.GroupActive {
		return stack.Live{Gone: true}, string(g.State)
	}
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
	return live, fmt.Sprintf("%s, %d of %d..%d", g.State, g.Desired, g.Min, g.Max)
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

// ResourceAttrs are the attributes a stack's template can reference of a
// resource its copy made (an instance, volume, address, spot request,
// group, placement group, network, subnet, security group or endpoint; a
// commitment's ID): what the engine records
// after a create.
func ResourceAttrs(v any) map[string]any {
	switch r := v.(type) {
	case *cloud.Instance:
		return instanceAttrs(r)
	case *cloud.Volume:
		return volumeAttrs(r)
	case *cloud.Address:
		return addressAttrs(r)
	case *cloud.SpotRequest:
		return spotAttrs(r)
	case *cloud.Group:
		return groupAttrs(r)
	case *cloud.PlacementGroup:
		return placementAttrs(r)
	case *cloud.Commitment:
		return map[string]any{"id": r.ID}
	case *cloud.Network:
		return networkAttrs(r)
	case *cloud.Subnet:
		return subnetAttrs(r)
	case *cloud.SecurityGroup:
		return securityGroupAttrs(r)
	case *cloud.Endpoint:
		return endpointAttrs(r)
	}
	return nil
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
	if v.Kind != "" {
		m["kind"] = string(v.Kind)
	}
	// The volumes every node of a stack may list: a block volume goes on
	// one instance only.
	m["shared_ids"] = []any{}
	if v.Shared() {
		m["shared_ids"] = []any{v.ID}
	}
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
