package client

import (
	"context"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/internal/rest"
)

// CreateNetwork creates a private network (VPC) with its default security
// group; idemKey as for CreateInstance.
func (c *Client) CreateNetwork(ctx context.Context, req api.CreateNetworkRequest, idemKey string) (*cloud.Network, error) {
	var out cloud.Network
	_, _, err := c.r.Do(ctx, rest.Call{Method: "POST", Path: "/v1/networks", Body: req, Header: idemHeader(idemKey), Out: &out})
	return rest.NilOnErr(&out, err)
}

// Networks lists networks: the caller's tenant's (its default network is
// made by the first listing), or for an admin one tenant's (tenant not
// empty) or every tenant's.
func (c *Client) Networks(ctx context.Context, tenant string) ([]*cloud.Network, error) {
	var out api.NetworkList
	_, _, err := c.r.Do(ctx, rest.Call{Method: "GET", Path: "/v1/networks" + rest.Query("tenant", tenant), Out: &out})
	return out.Networks, err
}

// GetNetwork reads a network.
func (c *Client) GetNetwork(ctx context.Context, id string) (*cloud.Network, error) {
	var out cloud.Network
	_, _, err := c.r.Do(ctx, rest.Call{Method: "GET", Path: rest.PathOf("networks", id), Out: &out})
	return rest.NilOnErr(&out, err)
}

// DeleteNetwork deletes a network that has no instances, with its
// subnets and security groups.
func (c *Client) DeleteNetwork(ctx context.Context, id string) error {
	_, _, err := c.r.Do(ctx, rest.Call{Method: "DELETE", Path: rest.PathOf("networks", id)})
	return err
}

// CreateSubnet creates a subnet; idemKey as for CreateInstance.
func (c *Client) CreateSubnet(ctx context.Context, req api.CreateSubnetRequest, idemKey string) (*cloud.Subnet, error) {
	var out cloud.Subnet
	_, _, err := c.r.Do(ctx, rest.Call{Method: "POST", Path: "/v1/subnets", Body: req, Header: idemHeader(idemKey), Out: &out})
	return rest.NilOnErr(&out, err)
}

// Subnets lists subnets as Networks lists networks; of one network when
// network is not empty.
func (c *Client) Subnets(ctx context.Context, tenant, network string) ([]*cloud.Subnet, error) {
	var out api.SubnetList
	_, _, err := c.r.Do(ctx, rest.Call{Method: "GET", Path: "/v1/subnets" + rest.Query("tenant", tenant, "network", network), Out: &out})
	return out.Subnets, err
}

// GetSubnet reads a subnet.
func (c *Client) GetSubnet(ctx context.Context, id string) (*cloud.Subnet, error) {
	var out cloud.Subnet
	_, _, err := c.r.Do(ctx, rest.Call{Method: "GET", Path: rest.PathOf("subnets", id), Out: &out})
	return rest.NilOnErr(&out, err)
}

// DeleteSubnet deletes a subnet that has no instances.
func (c *Client) DeleteSubnet(ctx context.Context, id string) error {
	_, _, err := c.r.Do(ctx, rest.Call{Method: "DELETE", Path: rest.PathOf("subnets", id)})
	return err
}

// CreateSecurityGroup creates a security group; idemKey as for
// CreateInstance.
func (c *Client) CreateSecurityGroup(ctx context.Context, req api.CreateSecurityGroupRequest, idemKey string) (*cloud.SecurityGroup, error) {
	var out cloud.SecurityGroup
	_, _, err := c.r.Do(ctx, rest.Call{Method: "POST", Path: "/v1/security-groups", Body: req, Header: idemHeader(idemKey), Out: &out})
	return rest.NilOnErr(&out, err)
}

// SecurityGroups lists security groups as Subnets lists subnets.
func (c *Client) SecurityGroups(ctx context.Context, tenant, network string) ([]*cloud.SecurityGroup, error) {
	var out api.SecurityGroupList
	_, _, err := c.r.Do(ctx, rest.Call{Method: "GET", Path: "/v1/security-groups" + rest.Query("tenant", tenant, "network", network), Out: &out})
	return out.SecurityGroups, err
}

// GetSecurityGroup reads a security group with its rules.
func (c *Client) GetSecurityGroup(ctx context.Context, id string) (*cloud.SecurityGroup, error) {
	var out cloud.SecurityGroup
	_, _, err := c.r.Do(ctx, rest.Call{Method: "GET", Path: rest.PathOf("security-groups", id), Out: &out})
	return rest.NilOnErr(&out, err)
}

// DeleteSecurityGroup deletes a security group that no instance is a
// member of and no other group's rule names.
func (c *Client) DeleteSecurityGroup(ctx context.Context, id string) error {
	_, _, err := c.r.Do(ctx, rest.Call{Method: "DELETE", Path: rest.PathOf("security-groups", id)})
	return err
}

// Authorize adds a rule to a security group and answers the group. A
// non-zero ifMatch is the group's version the caller saw; if the group
// changed since, the call is a conflict.
func (c *Client) Authorize(ctx context.Context, id string, req api.AuthorizeRequest, ifMatch int64) (*cloud.SecurityGroup, error) {
	var out cloud.SecurityGroup
	_, _, err := c.r.Do(ctx, rest.Call{Method: "POST", Path: rest.PathOf("security-groups", id, "authorize"), Body: req,
		Header: ifMatchHeader(ifMatch), Out: &out})
	return rest.NilOnErr(&out, err)
}

// Revoke removes a rule from a security group, named by its ID or by the
// fields that authorized it, and answers the group; ifMatch as for
// Authorize.
func (c *Client) Revoke(ctx context.Context, id string, req api.RevokeRequest, ifMatch int64) (*cloud.SecurityGroup, error) {
	var out cloud.SecurityGroup
	_, _, err := c.r.Do(ctx, rest.Call{Method: "POST", Path: rest.PathOf("security-groups", id, "revoke"), Body: req,
		Header: ifMatchHeader(ifMatch), Out: &out})
	return rest.NilOnErr(&out, err)
}
