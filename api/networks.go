package api

import "github.com/gpucloud/gpucloud/cloud"

// The wire types of private networks (issue 19): networks (VPCs), their
// subnets and security groups. The rules are service.Networks's.

// CreateNetworkRequest is the body of POST /v1/networks.
type CreateNetworkRequest struct {
	// Tenant is for admins, as in CreateInstanceRequest.
	Tenant string `json:"tenant,omitempty"`
	// Name is unique among the tenant's networks and is the network's
	// part of its instances' DNS names (NAME.NETWORK.internal): a DNS
	// label.
	Name string `json:"name"`
	// CIDR is the network's IPv4 address space, /16 to /28, in canonical
	// form ("10.0.0.0/16", not "10.0.0.1/16").
	CIDR string            `json:"cidr"`
	Tags map[string]string `json:"tags,omitempty"`
}

// NetworkList answers GET /v1/networks.
type NetworkList struct {
	Networks []*cloud.Network `json:"networks"`
}

// CreateSubnetRequest is the body of POST /v1/subnets.
type CreateSubnetRequest struct {
	// Tenant is for admins, as in CreateInstanceRequest.
	Tenant string `json:"tenant,omitempty"`
	// Network is the ID of one of the tenant's networks.
	Network string `json:"network"`
	// Name is unique among the network's subnets.
	Name string `json:"name"`
	// CIDR lies inside the network's, /16 to /28, and overlaps no other
	// subnet of the network.
	CIDR string `json:"cidr"`
	// Zone is the zone the subnet's instances are placed in.
	Zone string            `json:"zone"`
	Tags map[string]string `json:"tags,omitempty"`
}

// SubnetList answers GET /v1/subnets.
type SubnetList struct {
	Subnets []*cloud.Subnet `json:"subnets"`
}

// CreateSecurityGroupRequest is the body of POST /v1/security-groups. A
// new group has no rules: it allows nothing in and nothing out until
// rules are authorized.
type CreateSecurityGroupRequest struct {
	// Tenant is for admins, as in CreateInstanceRequest.
	Tenant string `json:"tenant,omitempty"`
	// Network is the ID of one of the tenant's networks.
	Network string `json:"network"`
	// Name is unique among the network's groups.
	Name        string            `json:"name"`
	Description string            `json:"description,omitempty"`
	Tags        map[string]string `json:"tags,omitempty"`
}

// SecurityGroupList answers GET /v1/security-groups.
type SecurityGroupList struct {
	SecurityGroups []*cloud.SecurityGroup `json:"security_groups"`
}

// Directions of a security group rule.
const (
	Ingress = "ingress"
	Egress  = "egress"
)

// AuthorizeRequest is the body of POST
// /v1/security-groups/{id}/authorize: one rule to add to the group.
type AuthorizeRequest struct {
	// Direction is ingress (Peer is the source) or egress (the
	// destination).
	Direction string `json:"direction"`
	// Protocol is all, tcp, udp or icmp.
	Protocol string `json:"protocol"`
	// FromPort and ToPort are the port range of tcp and udp (1 to
	// 65535); zero for all and icmp.
	FromPort int `json:"from_port,omitempty"`
	ToPort   int `json:"to_port,omitempty"`
	// The peer: exactly one of CIDR (IPv4, canonical) and Group (the ID
	// of a group of the same network).
	CIDR        string `json:"cidr,omitempty"`
	Group       string `json:"group,omitempty"`
	Description string `json:"description,omitempty"`
}

// RevokeRequest is the body of POST /v1/security-groups/{id}/revoke: a
// rule to remove, named by its ID ("sgr-...") or, without one, by the
// same fields that authorized it (the description is not compared).
type RevokeRequest struct {
	RuleID string `json:"rule_id,omitempty"`
	AuthorizeRequest
}

// SecurityGroupTemplate is the properties of a stack's security_group
// resource: the create body and the rules the group has. The stack keeps
// the group's rules as written, authorizing and revoking the difference
// (service.Networks.SetRules), so that a change to them updates the group
// in place.
type SecurityGroupTemplate struct {
	CreateSecurityGroupRequest
	// Ingress are the group's ingress rules; none when absent.
	Ingress []RuleTemplate `json:"ingress,omitempty"`
	// Egress are the group's egress rules; when absent, a new group's
	// default: all traffic to 0.0.0.0/0.
	Egress *[]RuleTemplate `json:"egress,omitempty"`
}

// RuleTemplate is one rule of a SecurityGroupTemplate, as
// AuthorizeRequest's fields, except that Group may be "self": the group
// the rule belongs to.
type RuleTemplate struct {
	Protocol    string `json:"protocol"`
	FromPort    int    `json:"from_port,omitempty"`
	ToPort      int    `json:"to_port,omitempty"`
	CIDR        string `json:"cidr,omitempty"`
	Group       string `json:"group,omitempty"`
	Description string `json:"description,omitempty"`
}

// RuleSelf is a RuleTemplate's Group naming the rule's own group.
const RuleSelf = "self"

// SecurityGroupRuleTemplate is the properties of a stack's
// security_group_rule resource: one rule, AuthorizeRequest's fields, on
// the security group SecurityGroup (its ID), which the stack need not
// own, as AWS::EC2::SecurityGroupIngress. The stack owns the rule only
// (cloud.SecurityRule.Owner): it deletes that rule and no other, and the
// group's own rule list, when a stack declares the group, leaves it alone.
// Its description changes in place; any other change replaces the rule.
type SecurityGroupRuleTemplate struct {
	SecurityGroup string `json:"security_group"`
	AuthorizeRequest
}
