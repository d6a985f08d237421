package service

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/cloud"
)

// endpointStates are the states in which an instance of a network is an
// endpoint of it: it holds an allocation, and so its address, on a host
// that carries its traffic.
var endpointStates = []cloud.State{cloud.Scheduled, cloud.Starting, cloud.Running, cloud.Paused, cloud.Stopping}

// NetworkView is what a's host must carry (agentapi.NetworkView): every
// network with an instance assigned to the host to run, with its subnets,
// its endpoints on every host, and the resolved rules of the security
// groups of the host's own endpoints. Networks carries the IDs of the
// networks in the view, for NetworkChanges.Wait.
func (s *Agents) NetworkView(ctx context.Context, a Actor) (view *agentapi.NetworkView, networks []string, err error) {
	if err := agentOnly(a); err != nil {
		return nil, nil, err
	}
	view = &agentapi.NetworkView{Networks: []agentapi.HostNetwork{}}
	err = s.tx(ctx, func(tx cloud.Tx) error {
		local, err := tx.ListInstances(ctx, cloud.InstanceFilter{HostID: a.HostID, States: endpointStates})
		if err != nil {
			return err
		}
		for _, in := range local {
			if in.NetworkID != "" && !slices.Contains(networks, in.NetworkID) {
				networks = append(networks, in.NetworkID)
			}
		}
		slices.Sort(networks)
		if len(networks) == 0 {
			return nil
		}
		r := viewReader{tx: tx, hosts: map[string]string{}, public: map[string]string{}}
		for _, id := range networks {
			hn, err := r.network(ctx, id, a.HostID)
			if err != nil {
				return err
			}
			view.Networks = append(view.Networks, *hn)
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	b, err := json.Marshal(view.Networks)
	if err != nil {
		return nil, nil, err
	}
	sum := sha256.Sum256(b)
	view.Version = hex.EncodeToString(sum[:12])
	return view, networks, nil
}

// viewReader reads the networks of a view in one transaction, with the
// hosts' underlays and the tenants' public addresses read once.
type viewReader struct {
	tx     cloud.Tx
	hosts  map[string]string // host ID -> underlay
	public map[string]string // instance ID -> public address
	read   map[string]bool   // tenants whose addresses are read
}

func (r *viewReader) underlay(ctx context.Context, hostID string) (string, error) {
	if u, ok := r.hosts[hostID]; ok {
		return u, nil
	}
	h, err := r.tx.GetHost(ctx, hostID)
	if cloud.ErrorCode(err) == cloud.NotFound {
		r.hosts[hostID] = ""
		return "", nil
	}
	if err != nil {
		return "", err
	}
	r.hosts[hostID] = h.Spec.Underlay
	return h.Spec.Underlay, nil
}

func (r *viewReader) publicOf(ctx context.Context, tenant, instance string) (string, error) {
	if r.read == nil {
		r.read = map[string]bool{}
	}
	if !r.read[tenant] {
		r.read[tenant] = true
		as, err := r.tx.ListAddresses(ctx, tenant)
		if err != nil {
			return "", err
		}
		for _, ad := range as {
			if ad.InstanceID != "" && ad.ReleasedAt == nil {
				r.public[ad.InstanceID] = ad.IP
			}
		}
	}
	return r.public[instance], nil
}

// network reads one network as host sees it.
func (r *viewReader) network(ctx context.Context, id, host string) (*agentapi.HostNetwork, error) {
	n, err := r.tx.GetNetwork(ctx, id)
	if err != nil {
		return nil, err
	}
	hn := &agentapi.HostNetwork{ID: n.ID, TenantID: n.TenantID, Name: n.Name, VNI: n.VNI, CIDR: n.CIDR,
		Subnets: []agentapi.NetworkSubnet{}, Endpoints: []agentapi.Endpoint{}, SecurityGroups: []agentapi.GroupRules{}}
	subnets, err := r.tx.ListSubnets(ctx, cloud.SubnetFilter{TenantID: n.TenantID, NetworkID: n.ID})
	if err != nil {
		return nil, err
	}
	for _, sn := range subnets {
		hn.Subnets = append(hn.Subnets, agentapi.NetworkSubnet{ID: sn.ID, CIDR: sn.CIDR, Gateway: SubnetGateway(sn.CIDR)})
	}
	ins, err := r.tx.ListInstances(ctx, cloud.InstanceFilter{TenantID: n.TenantID, NetworkID: n.ID, States: endpointStates})
	if err != nil {
		return nil, err
	}
	members := map[string][]string{} // group -> member /32s
	mine := map[string]bool{}        // groups of the host's endpoints
	for _, in := range ins {
		if in.PrivateAddress == "" || in.HostID == "" {
			continue
		}
		u, err := r.underlay(ctx, in.HostID)
		if err != nil {
			return nil, err
		}
		pub, err := r.publicOf(ctx, in.TenantID, in.ID)
		if err != nil {
			return nil, err
		}
		hn.Endpoints = append(hn.Endpoints, agentapi.Endpoint{InstanceID: in.ID, Name: in.Name, Address: in.PrivateAddress,
			MAC: InstanceMAC(in.PrivateAddress), HostID: in.HostID, Underlay: u,
			SecurityGroups: slices.Clone(in.SecurityGroupIDs), PublicAddress: pub})
		for _, g := range in.SecurityGroupIDs {
			members[g] = append(members[g], in.PrivateAddress+"/32")
			if in.HostID == host {
				mine[g] = true
			}
		}
	}
	slices.SortFunc(hn.Endpoints, func(a, b agentapi.Endpoint) int { return strings.Compare(a.InstanceID, b.InstanceID) })
	groups, err := r.tx.ListSecurityGroups(ctx, cloud.SecurityGroupFilter{TenantID: n.TenantID, NetworkID: n.ID})
	if err != nil {
		return nil, err
	}
	for _, g := range groups {
		if !mine[g.ID] {
			continue
		}
		hn.SecurityGroups = append(hn.SecurityGroups, agentapi.GroupRules{ID: g.ID,
			Ingress: ruleSpecs(g.Ingress, members), Egress: ruleSpecs(g.Egress, members)})
	}
	return hn, nil
}

// ruleSpecs resolves a group's rules for a host: a group peer becomes its
// members' /32s, sorted.
func ruleSpecs(rules []cloud.SecurityRule, members map[string][]string) []agentapi.RuleSpec {
	out := make([]agentapi.RuleSpec, 0, len(rules))
	for _, r := range rules {
		spec := agentapi.RuleSpec{Protocol: r.Protocol, FromPort: r.FromPort, ToPort: r.ToPort, Peers: []string{}}
		if r.GroupID != "" {
			spec.Peers = append(spec.Peers, members[r.GroupID]...)
			slices.Sort(spec.Peers)
		} else if r.CIDR != "" {
			spec.Peers = append(spec.Peers, r.CIDR)
		}
		out = append(out, spec)
	}
	return out
}

// SubnetGateway is a subnet's gateway: its first host address ("" for a
// CIDR that does not parse).
func SubnetGateway(cidr string) string {
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return ""
	}
	return p.Masked().Addr().Next().String()
}

// InstanceMAC is the MAC of an instance's interface on its network:
// locally administered, 02:00 followed by its IPv4 address, so unique in
// its network ("" for an address that does not parse).
func InstanceMAC(addr string) string {
	a, err := netip.ParseAddr(addr)
	if err != nil || !a.Is4() {
		return ""
	}
	b := a.As4()
	return fmt.Sprintf("02:00:%02x:%02x:%02x:%02x", b[0], b[1], b[2], b[3])
}
