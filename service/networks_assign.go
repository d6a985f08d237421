package service

import (
	"context"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/cloud"
)

// InstanceDNSNames are an instance's names in its network's DNS:
// NAME.NETWORK.internal when its name, lowercased, is a DNS label, and
// INSTANCE_ID.internal always.
func InstanceDNSNames(in *cloud.Instance, network string) []string {
	var out []string
	if name := strings.ToLower(in.Name); isDNSLabel(name) && network != "" {
		out = append(out, name+"."+network+".internal")
	}
	return append(out, in.ID+".internal")
}

// netIndex is what assignments need of their instances' networks, read
// once per call: the networks and subnets by ID and the public address
// associated with each instance.
type netIndex struct {
	networks map[string]*cloud.Network
	subnets  map[string]*cloud.Subnet
	public   map[string]string
}

// readNetIndex reads the networks and subnets of the instances of ins
// that have one (one listing each), and the public addresses of their
// tenants (one listing per tenant).
func readNetIndex(ctx context.Context, tx cloud.Tx, ins []*cloud.Instance) (*netIndex, error) {
	x := &netIndex{networks: map[string]*cloud.Network{}, subnets: map[string]*cloud.Subnet{}, public: map[string]string{}}
	nets, subs, tenants := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, in := range ins {
		if in.SubnetID != "" {
			nets[in.NetworkID], subs[in.SubnetID], tenants[in.TenantID] = true, true, true
		}
	}
	if len(subs) == 0 {
		return x, nil
	}
	ns, err := tx.ListNetworks(ctx, cloud.NetworkFilter{IDs: slices.Sorted(maps.Keys(nets))})
	if err != nil {
		return nil, err
	}
	for _, n := range ns {
		x.networks[n.ID] = n
	}
	ss, err := tx.ListSubnets(ctx, cloud.SubnetFilter{IDs: slices.Sorted(maps.Keys(subs))})
	if err != nil {
		return nil, err
	}
	for _, s := range ss {
		x.subnets[s.ID] = s
	}
	for _, t := range slices.Sorted(maps.Keys(tenants)) {
		as, err := tx.ListAddresses(ctx, t)
		if err != nil {
			return nil, err
		}
		for _, ad := range as {
			if ad.InstanceID != "" && ad.ReleasedAt == nil {
				x.public[ad.InstanceID] = ad.IP
			}
		}
	}
	return x, nil
}

// of is instance in's place on its network; nil for an instance without
// one (made before networks existed), or whose network or subnet is gone.
func (x *netIndex) of(in *cloud.Instance) *agentapi.InstanceNetwork {
	n, s := x.networks[in.NetworkID], x.subnets[in.SubnetID]
	if n == nil || s == nil || n.TenantID != in.TenantID || s.TenantID != in.TenantID {
		return nil
	}
	addr, err1 := netip.ParseAddr(in.PrivateAddress)
	p, err2 := netip.ParsePrefix(s.CIDR)
	if err1 != nil || err2 != nil || !addr.Is4() || !p.Addr().Is4() {
		return nil
	}
	return &agentapi.InstanceNetwork{NetworkID: n.ID, NetworkName: n.Name, VNI: n.VNI, CIDR: n.CIDR,
		SubnetID: s.ID, SubnetCIDR: s.CIDR, Gateway: SubnetGateway(p.String()), Address: addr.String(),
		MAC: InstanceMAC(addr.String()), SecurityGroups: slices.Clone(in.SecurityGroupIDs), PublicAddress: x.public[in.ID],
		DNSNames: InstanceDNSNames(in, n.Name)}
}
