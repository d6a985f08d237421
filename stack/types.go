package stack

import "slices"

// Resource types a template may declare.
const (
	TypeInstance       = "instance"
	TypeSpotRequest    = "spot_request"
	TypeVolume         = "volume"
	TypeAddress        = "address"
	TypeGroup          = "group"
	TypePlacementGroup = "placement_group"
	TypeCommitment     = "commitment"
	TypeNetwork        = "network"
	TypeSubnet         = "subnet"
	TypeSecurityGroup  = "security_group"
	// TypeSecurityGroupRule is one rule on a group the stack need not
	// own; the stack owns the rule only.
	TypeSecurityGroupRule = "security_group_rule"
	// TypeEndpoint is a serverless endpoint (docs/ENDPOINTS.md).
	TypeEndpoint = "endpoint"
)

// TypeInfo describes one resource type: the attributes a reference may
// read from an applied copy (${RES.ATTR}), and the top-level properties
// that can change in place. A change to any other property replaces the
// resource.
type TypeInfo struct {
	Attributes []string
	Mutable    []string
	// Unique are the properties whose values no two live resources of
	// the type share: the name, and the scope it is unique in (a subnet's
	// and a security group's network). A copy's replacement is made
	// before the old copy goes, so a replacement that keeps all of them
	// would collide with the copy it replaces; Plan refuses it.
	Unique []string
}

// HasAttribute reports whether attr is one of the type's attributes.
func (t TypeInfo) HasAttribute(attr string) bool { return slices.Contains(t.Attributes, attr) }

// IsMutable reports whether the top-level property key updates in place.
func (t TypeInfo) IsMutable(key string) bool { return slices.Contains(t.Mutable, key) }

// Types lists the resource types by name. The properties of each are the
// fields of the API's create body for that type (api.CreateInstanceRequest,
// api.CreateSpotRequestRequest, api.CreateVolumeRequest,
// api.AllocateAddressRequest, api.CreateGroupRequest, the placement group
// create body, api.CreateCommitmentRequest, api.CreateNetworkRequest,
// api.CreateSubnetRequest, and for a security group
// api.SecurityGroupTemplate: the create body with its ingress and egress
// rules, which change in place; for a security group rule
// api.SecurityGroupRuleTemplate, whose description changes in place; its
// owner attribute is the copy's own mark on the rule; for an endpoint
// api.CreateEndpointRequest: its name and spec, of which what workers run
// (volumes included), the sizes, the warm pool, the times and the retries
// change in place). Callers must not
// modify it.
var Types = map[string]TypeInfo{
	TypeInstance:    {Attributes: []string{"id", "name", "zone", "state", "host_id", "private_address"}},
	TypeSpotRequest: {Attributes: []string{"id", "name", "instance_id"}},
	// A volume's shared_ids is [id] for a shared volume and [] for a
	// block one: what the other nodes of a stack list in their volumes,
	// so that they mount it exactly when they can.
	TypeVolume:         {Attributes: []string{"id", "name", "zone", "size_gib", "kind", "shared_ids"}},
	TypeAddress:        {Attributes: []string{"id", "address"}},
	TypeGroup:          {Attributes: []string{"id", "name"}, Mutable: []string{"min", "max", "desired", "template", "policies", "mixed", "timing", "budget_per_hour", "idle_release"}},
	TypePlacementGroup: {Attributes: []string{"id", "name", "strategy"}},
	TypeCommitment:     {Attributes: []string{"id"}},
	TypeNetwork:        {Attributes: []string{"id", "name", "cidr", "vni"}, Unique: []string{"name"}},
	TypeSubnet:         {Attributes: []string{"id", "name", "cidr", "zone"}, Unique: []string{"network", "name"}},
	TypeSecurityGroup:  {Attributes: []string{"id", "name"}, Mutable: []string{"ingress", "egress"}, Unique: []string{"network", "name"}},
	// A rule's replacement differs in what it allows, its group or its
	// direction (its description alone updates in place), so it never
	// collides with the rule it replaces.
	TypeSecurityGroupRule: {Attributes: []string{"id", "security_group", "direction", "owner"}, Mutable: []string{"description"}},
	// An endpoint's mode, port, health path, spot, zones and labels
	// replace it (the API does not change them); its name is unique
	// among the tenant's live endpoints, and one being deleted still
	// holds it. Its volumes (shared volume IDs, a stack volume's
	// ${VOL.id} among them) change in place: the workers roll over.
	TypeEndpoint: {Attributes: []string{"id", "name", "state"}, Unique: []string{"name"},
		Mutable: []string{"image", "command", "env", "volumes", "offerings", "min", "max", "concurrency",
			"idle_timeout_seconds", "timeout_seconds", "retries", "retention_seconds", "queue_wait_seconds", "warm"}},
}

// typeNames is the sorted list of type names, for messages.
func typeNames() []string {
	names := make([]string, 0, len(Types))
	for n := range Types {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
