package service

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
)

// Every tenant has a default network, made on first need (an instance
// created without a subnet, or a listing of the tenant's networks), as on
// AWS: named "default", CIDR DefaultNetworkCIDR, with one default subnet
// over the whole network whose zone is "" (any zone: it does not
// constrain placement, so that creates without network flags place
// exactly as they did before networks existed), and the default security
// group every network has (all traffic among its members, all egress).
// Its making writes no events: as on AWS, where the default network is
// there from the start, it is not something the tenant did.

// DefaultName names the default network, its default subnet, and every
// network's default security group.
const DefaultName = "default"

// DefaultNetworkCIDR is the address space of every tenant's default
// network, and of its default subnet.
const DefaultNetworkCIDR = "172.31.0.0/16"

// networkRetries bounds how often a transaction that lost a race on a
// network (the tenant's default network made meanwhile, a subnet's
// address given meanwhile) is run again.
const networkRetries = 5

// errNetworkRace restarts a transaction that lost a race on a network.
var errNetworkRace = errors.New("a concurrent change to the network; retry")

// retryNetwork runs fn in a transaction, again when it lost a race on a
// network (errNetworkRace), at most networkRetries times.
func (b *base) retryNetwork(ctx context.Context, fn func(cloud.Tx) error) error {
	var err error
	for range networkRetries {
		if err = b.tx(ctx, fn); !errors.Is(err, errNetworkRace) {
			return err
		}
	}
	return &cloud.Error{Code: cloud.Conflict, Message: "concurrent creates on the same network kept racing; retry"}
}

// raced turns the store's conflict of a write that a concurrent
// transaction made first into errNetworkRace; other errors pass.
func raced(err error) error {
	if cloud.IsConflict(err) {
		return errors.Join(errNetworkRace, err)
	}
	return err
}

// ensureDefaultNetwork answers tenant's default subnet, making the
// default network, subnet and group when the tenant has none. Of two
// concurrent first makes, one commits: the tenant's quota lock (when the
// tenant has a quota) makes them take turns, and otherwise the loser's
// write conflicts on the network's name and its transaction is run again
// (errNetworkRace; retryNetwork).
func ensureDefaultNetwork(ctx context.Context, tx cloud.Tx, tenant, actor string, now time.Time) (*cloud.Subnet, error) {
	if sub, err := defaultSubnet(ctx, tx, tenant); sub != nil || err != nil {
		return sub, err
	}
	if _, err := tx.LockQuota(ctx, tenant); err != nil && !cloud.IsNotFound(err) {
		return nil, err
	}
	if sub, err := defaultSubnet(ctx, tx, tenant); sub != nil || err != nil {
		return sub, err
	}
	ns, err := tx.ListNetworks(ctx, cloud.NetworkFilter{TenantID: tenant})
	if err != nil {
		return nil, err
	}
	// A network named "default" that is not the default network cannot
	// be: CreateNetwork reserves the name.
	var n *cloud.Network
	for _, o := range ns {
		if o.Default {
			n = o
		}
	}
	if n == nil {
		n = &cloud.Network{ID: NewID(NetworkPrefix), TenantID: tenant, Name: DefaultName, CIDR: DefaultNetworkCIDR,
			Default: true, CreatedAt: now}
		if err := createNetwork(ctx, tx, n, actor, false); err != nil {
			return nil, raced(err)
		}
	}
	sub := &cloud.Subnet{ID: NewID(SubnetPrefix), TenantID: tenant, NetworkID: n.ID, Name: DefaultName, CIDR: n.CIDR,
		Default: true, CreatedAt: now}
	if err := createSubnet(ctx, tx, sub, actor, false); err != nil {
		return nil, raced(err)
	}
	return sub, nil
}

// defaultSubnet reads tenant's default subnet; nil when it has none.
func defaultSubnet(ctx context.Context, tx cloud.Tx, tenant string) (*cloud.Subnet, error) {
	subs, err := tx.ListSubnets(ctx, cloud.SubnetFilter{TenantID: tenant})
	if err != nil {
		return nil, err
	}
	for _, s := range subs {
		if s.Default {
			return s, nil
		}
	}
	return nil, nil
}

// DefaultGroupID is the ID of network id's default security group: "sg-"
// and the network ID's part after "vpc-", so that an instance create
// knows it without reading the network's groups. The default group goes
// with its network only (DeleteSecurityGroup refuses it), so it exists
// while the network does.
func DefaultGroupID(network string) string {
	return SecurityGroupPrefix + strings.TrimPrefix(network, NetworkPrefix)
}

// createSubnet writes subnet s, and its event when record is set.
func createSubnet(ctx context.Context, tx cloud.Tx, s *cloud.Subnet, actor string, record bool) error {
	if err := tx.CreateSubnet(ctx, s); err != nil || !record {
		return err
	}
	zone := s.Zone
	if zone == "" {
		zone = "any zone"
	}
	return tx.AppendEvent(ctx, &cloud.Event{Time: s.CreatedAt, Kind: EventSubnetCreated, TenantID: s.TenantID, Actor: actor,
		Reason: "subnet " + s.ID + " (" + s.Name + ", " + s.CIDR + ", " + zone + ") created in network " + s.NetworkID})
}
