package stackengine

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/stack"
)

// How the engine creates, changes and deletes each resource type: through
// the type's own service, as the API does, so that every rule (quotas,
// validation, the fleet's availability, idempotency, tenancy) is the
// API's. Reads are the services' (service.Stacks.Refresh).

// createResource creates one resource copy with the idempotency key key
// and answers its ID and attributes.
func createResource(ctx context.Context, svc *service.Services, a service.Actor, typ, address string, props map[string]any, key string) (string, map[string]any, error) {
	switch typ {
	case stack.TypeInstance:
		var spec api.CreateInstanceRequest
		if err := service.DecodeStackProps(address, props, &spec); err != nil {
			return "", nil, err
		}
		in, _, err := svc.Instances.Create(ctx, a, spec, key)
		if err != nil {
			return "", nil, service.StackFieldError(address, err)
		}
		return in.ID, service.ResourceAttrs(in), nil
	case stack.TypeVolume:
		var spec api.CreateVolumeRequest
		if err := service.DecodeStackProps(address, props, &spec); err != nil {
			return "", nil, err
		}
		v, _, err := svc.Volumes.Create(ctx, a, spec, key)
		if err != nil {
			return "", nil, service.StackFieldError(address, err)
		}
		return v.ID, service.ResourceAttrs(v), nil
	case stack.TypeAddress:
		var spec api.AllocateAddressRequest
		if err := service.DecodeStackProps(address, props, &spec); err != nil {
			return "", nil, err
		}
		ad, _, err := svc.Addresses.Allocate(ctx, a, spec, key)
		if err != nil {
			return "", nil, service.StackFieldError(address, err)
		}
		return ad.ID, service.ResourceAttrs(ad), nil
	case stack.TypeSpotRequest:
		var spec api.CreateSpotRequestRequest
		if err := service.DecodeStackProps(address, props, &spec); err != nil {
			return "", nil, err
		}
		r, _, err := svc.Spot.Create(ctx, a, spec, key)
		if err != nil {
			return "", nil, service.StackFieldError(address, err)
		}
		return r.ID, service.ResourceAttrs(r), nil
	case stack.TypeGroup:
		var body api.CreateGroupRequest
		if err := service.DecodeStackProps(address, props, &body); err != nil {
			return "", nil, err
		}
		g, _, err := svc.Groups.Create(ctx, a, body, key)
		if err != nil {
			return "", nil, service.StackFieldError(address, err)
		}
		return g.ID, service.ResourceAttrs(g), nil
	case stack.TypePlacementGroup:
		var spec api.CreatePlacementGroupRequest
		if err := service.DecodeStackProps(address, props, &spec); err != nil {
			return "", nil, err
		}
		g, _, err := svc.Placement.Create(ctx, a, spec, key)
		if err != nil {
			return "", nil, service.StackFieldError(address, err)
		}
		return g.ID, service.ResourceAttrs(g), nil
	case stack.TypeCommitment:
		var spec api.CreateCommitmentRequest
		if err := service.DecodeStackProps(address, props, &spec); err != nil {
			return "", nil, err
		}
		c, _, err := svc.Commitments.Create(ctx, a, spec, key)
		if err != nil {
			return "", nil, service.StackFieldError(address, err)
		}
		return c.ID, service.ResourceAttrs(c), nil
	case stack.TypeNetwork:
		var spec api.CreateNetworkRequest
		if err := service.DecodeStackProps(address, props, &spec); err != nil {
			return "", nil, err
		}
		n, _, err := svc.Networks.CreateNetwork(ctx, a, spec, key)
		if err != nil {
			return "", nil, service.StackFieldError(address, err)
		}
		return n.ID, service.ResourceAttrs(n), nil
	case stack.TypeSubnet:
		var spec api.CreateSubnetRequest
		if err := service.DecodeStackProps(address, props, &spec); err != nil {
			return "", nil, err
		}
		sub, _, err := svc.Networks.CreateSubnet(ctx, a, spec, key)
		if err != nil {
			return "", nil, service.StackFieldError(address, err)
		}
		return sub.ID, service.ResourceAttrs(sub), nil
	case stack.TypeSecurityGroup:
		// The group, then its rules: a create cut short between the two
		// is completed with the same key, which answers the group, and
		// setting its rules again is harmless.
		var t api.SecurityGroupTemplate
		if err := service.DecodeStackProps(address, props, &t); err != nil {
			return "", nil, err
		}
		g, _, err := svc.Networks.CreateSecurityGroup(ctx, a, t.CreateSecurityGroupRequest, key)
		if err != nil {
			return "", nil, service.StackFieldError(address, err)
		}
		if err := setGroupRules(ctx, svc, a, address, g.ID, &t); err != nil {
			return "", nil, err
		}
		return g.ID, service.ResourceAttrs(g), nil
	case stack.TypeSecurityGroupRule:
		// The key marks the rule as this copy's: a create cut short is
		// completed with the same key, which answers the rule it made.
		var t api.SecurityGroupRuleTemplate
		if err := service.DecodeStackProps(address, props, &t); err != nil {
			return "", nil, err
		}
		_, r, err := svc.Networks.AuthorizeOwned(ctx, a, t.SecurityGroup, t.AuthorizeRequest, key)
		if err != nil {
			return "", nil, service.StackFieldError(address, err)
		}
		return r.ID, service.RuleAttrs(t.SecurityGroup, t.Direction, r), nil
	case stack.TypeEndpoint:
		var body api.CreateEndpointRequest
		if err := service.DecodeStackProps(address, props, &body); err != nil {
			return "", nil, err
		}
		e, _, err := svc.Endpoints.Create(ctx, a, body, key)
		if err != nil {
			return "", nil, service.StackFieldError(address, err)
		}
		return e.ID, service.ResourceAttrs(e), nil
	}
	return "", nil, service.Field("resources."+address+".type", "%s is not a resource type", service.Quote(typ))
}

// deleteResource deletes a resource copy. done is false when it cannot go
// yet (a volume attached to an instance still terminating, a placement
// group with members): the engine tries again on its next round. A
// resource already gone is done.
func deleteResource(ctx context.Context, svc *service.Services, a service.Actor, rs *stack.ResourceState) (done bool, why string, err error) {
	var derr error
	switch rs.Type {
	case stack.TypeInstance:
		_, derr = svc.Instances.Act(ctx, a, rs.ID, service.Terminate, 0)
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
	case stack.TypeNetwork:
		// The stack's subnets and groups in it went first (they depend
		// on it); its default group and any subnet or group made outside
		// the stack go with it. Instances in it are a conflict: wait.
		derr = svc.Networks.DeleteNetwork(ctx, a, rs.ID)
	case stack.TypeSubnet:
		derr = svc.Networks.DeleteSubnet(ctx, a, rs.ID)
	case stack.TypeSecurityGroup:
		derr = svc.Networks.DeleteSecurityGroup(ctx, a, rs.ID)
	case stack.TypeSecurityGroupRule:
		// Only the rule this copy made: another's, or one revoked since,
		// answers not_found, and is left alone.
		group, owner := service.RuleRef(rs)
		derr = svc.Networks.RevokeOwned(ctx, a, group, rs.ID, owner)
	case stack.TypeEndpoint:
		// Deleting: its controller terminates the workers, then marks it
		// deleted; the stack need not wait for that (a deleting endpoint
		// is gone for the stack), and a retry of one deleting already is
		// answered as the first.
		_, derr = svc.Endpoints.Delete(ctx, a, rs.ID)
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

// updateResource changes a copy's mutable properties in place: a
// group's sizes, template and policies, a security group's rules, a
// security group rule's description, an endpoint's workers' spec, sizes
// and times. old is the copy as applied.
func updateResource(ctx context.Context, svc *service.Services, a service.Actor, typ, address string, old *stack.ResourceState, props map[string]any) error {
	id := old.ID
	switch typ {
	case stack.TypeSecurityGroupRule:
		var t api.SecurityGroupRuleTemplate
		if err := service.DecodeStackProps(address, props, &t); err != nil {
			return err
		}
		group, owner := service.RuleRef(old)
		return service.StackFieldError(address, svc.Networks.DescribeOwned(ctx, a, group, id, owner, t.Description))
	case stack.TypeGroup:
		return updateGroup(ctx, svc, a, address, id, props)
	case stack.TypeSecurityGroup:
		var t api.SecurityGroupTemplate
		if err := service.DecodeStackProps(address, props, &t); err != nil {
			return err
		}
		return setGroupRules(ctx, svc, a, address, id, &t)
	case stack.TypeEndpoint:
		return updateEndpoint(ctx, svc, a, address, id, props)
	}
	return fmt.Errorf("%s: a %s does not change in place", address, typ)
}

// setGroupRules makes security group id's rules those of t, authorizing
// and revoking the difference.
func setGroupRules(ctx context.Context, svc *service.Services, a service.Actor, address, id string, t *api.SecurityGroupTemplate) error {
	ingress, egress := service.GroupRules(t, id)
	_, err := svc.Networks.SetRules(ctx, a, id, ingress, egress)
	return service.StackFieldError(address, err)
}

// updateGroup changes a group's mutable properties in place.
func updateGroup(ctx context.Context, svc *service.Services, a service.Actor, address, id string, props map[string]any) error {
	var body api.CreateGroupRequest
	if err := service.DecodeStackProps(address, props, &body); err != nil {
		return err
	}
	patch := api.UpdateGroupRequest{Min: &body.Min, Max: &body.Max, Desired: body.Desired, Template: &body.Template,
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
	return service.StackFieldError(address, err)
}

// updateEndpoint sets every mutable property of an endpoint to the
// template's (stack.Types' Mutable for it): one left out of the
// template goes back to the API's default, as it would at a create. The
// command, the environment and the volumes are sent only when they differ
// from the endpoint's (none and empty are the same): the API counts []
// against none as a change of what workers run, and would roll them over;
// and volumes sent are checked again, which one deleted since the
// endpoint took it would fail although the template did not change them.
func updateEndpoint(ctx context.Context, svc *service.Services, a service.Actor, address, id string, props map[string]any) error {
	var body api.CreateEndpointRequest
	if err := service.DecodeStackProps(address, props, &body); err != nil {
		return err
	}
	cur, err := svc.Endpoints.Get(ctx, a, id)
	if err != nil {
		return err
	}
	s := body.EndpointSpec
	// Zero is the default for the sizes and times (Update fills it in as
	// Create does), except max: the API refuses 0 there.
	if s.Max == 0 {
		s.Max = max(service.DefaultEndpointMax, s.Min)
	}
	patch := api.UpdateEndpointRequest{Image: &s.Image, Offerings: &s.Offerings,
		Min: &s.Min, Max: &s.Max, Concurrency: &s.Concurrency, IdleTimeoutSeconds: &s.IdleTimeoutSeconds,
		TimeoutSeconds: &s.TimeoutSeconds, Retries: &s.Retries, RetentionSeconds: &s.RetentionSeconds,
		QueueWaitSeconds: &s.QueueWaitSeconds, Warm: &s.Warm}
	if !slices.Equal(s.Command, cur.Spec.Command) {
		command := s.Command
		if command == nil {
			command = []string{}
		}
		patch.Command = &command
	}
	if !slices.Equal(s.Volumes, cur.Spec.Volumes) {
		volumes := s.Volumes
		if volumes == nil {
			volumes = []string{}
		}
		patch.Volumes = &volumes
	}
	if !maps.Equal(s.Env, cur.Spec.Env) {
		env := s.Env
		if env == nil {
			env = map[string]string{}
		}
		patch.Env = &env
	}
	_, err = svc.Endpoints.Update(ctx, a, id, patch, 0)
	return service.StackFieldError(address, err)
}
