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
)

// TypeInfo describes one resource type: the attributes a reference may
// read from an applied copy (${RES.ATTR}), and the top-level properties
// that can change in place. A change to any other property replaces the
// resource.
type TypeInfo struct {
	Attributes []string
	Mutable    []string
}

// HasAttribute reports whether attr is one of the type's attributes.
func (t TypeInfo) HasAttribute(attr string) bool { return slices.Contains(t.Attributes, attr) }

// IsMutable reports whether the top-level property key updates in place.
func (t TypeInfo) IsMutable(key string) bool { return slices.Contains(t.Mutable, key) }

// Types lists the resource types by name. The properties of each are the
// fields of the API's create body for that type (api.CreateInstanceRequest,
// api.CreateSpotRequestRequest, api.CreateVolumeRequest,
// api.AllocateAddressRequest, api.CreateGroupRequest, the placement group
// create body and api.CreateCommitmentRequest). Callers must not modify it.
var Types = map[string]TypeInfo{
	TypeInstance:       {Attributes: []string{"id", "name", "zone", "state", "host_id", "private_address"}},
	TypeSpotRequest:    {Attributes: []string{"id", "name", "instance_id"}},
	TypeVolume:         {Attributes: []string{"id", "name", "zone", "size_gib"}},
	TypeAddress:        {Attributes: []string{"id", "address"}},
	TypeGroup:          {Attributes: []string{"id", "name"}, Mutable: []string{"min", "max", "desired", "template", "policies", "mixed", "timing", "budget_per_hour", "idle_release"}},
	TypePlacementGroup: {Attributes: []string{"id", "name", "strategy"}},
	TypeCommitment:     {Attributes: []string{"id"}},
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
