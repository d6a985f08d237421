package agentapi

import (
	"context"
	"net/url"
	"strconv"
	"time"

	"github.com/gpucloud/gpucloud/internal/rest"
)

// The private networks as an agent sees them (issue 19). The server
// computes them from the tenants' networks, subnets, security groups and
// instances; the agent turns them into kernel objects (agent/network):
// an overlay segment per network, forwarding entries for the other hosts'
// instances, nftables rules for the security groups, DNS answers.

// InstanceNetwork is one instance's place on its network: what the agent
// needs to start it (Assignment.Network). Nil for instances made before
// networks existed.
type InstanceNetwork struct {
	NetworkID   string `json:"network_id"`
	NetworkName string `json:"network_name"`
	// VNI is the network's overlay segment, CIDR its address space.
	VNI  uint32 `json:"vni"`
	CIDR string `json:"cidr"`
	// SubnetID and SubnetCIDR are the instance's subnet; Gateway is the
	// subnet's first host address (the router every host of the network
	// answers as).
	SubnetID   string `json:"subnet_id"`
	SubnetCIDR string `json:"subnet_cidr"`
	Gateway    string `json:"gateway"`
	// Address is the instance's private address in its subnet, MAC its
	// interface's MAC (unique in the network).
	Address string `json:"address"`
	MAC     string `json:"mac"`
	// SecurityGroups are the instance's groups, whose rules are in the
	// host's NetworkView.
	SecurityGroups []string `json:"security_groups"`
	// PublicAddress is the public address associated with the instance
	// (empty: none); the host forwards it to Address through the groups.
	PublicAddress string `json:"public_address,omitempty"`
	// DNSNames are the instance's names in its network's DNS
	// ("NAME.NETWORK.internal", "i-....internal").
	DNSNames []string `json:"dns_names,omitempty"`
}

// NetworkView is the answer to GET /v1/agent/networks: every network that
// has an instance assigned to the agent's host (to run), with what the
// host needs to carry its traffic. Version changes whenever anything in
// it changes, so that an agent waits for the next change by sending the
// version it has.
type NetworkView struct {
	Version  string        `json:"version"`
	Networks []HostNetwork `json:"networks"`
}

// HostNetwork is one network as a host that carries it sees it.
type HostNetwork struct {
	ID       string `json:"id"`
	TenantID string `json:"tenant_id"`
	Name     string `json:"name"`
	VNI      uint32 `json:"vni"`
	CIDR     string `json:"cidr"`
	// Subnets are the network's subnets, each with its gateway.
	Subnets []NetworkSubnet `json:"subnets"`
	// Endpoints are the network's instances that hold an address and an
	// allocation (scheduled, starting, running, stopping), on any host:
	// the local ones and the remote ones the host programs forwarding
	// entries for. In instance ID order.
	Endpoints []Endpoint `json:"endpoints"`
	// SecurityGroups are the rules of every group a local endpoint is a
	// member of, with group peers resolved to their members' addresses.
	SecurityGroups []GroupRules `json:"security_groups"`
}

// NetworkSubnet is a subnet of a HostNetwork.
type NetworkSubnet struct {
	ID      string `json:"id"`
	CIDR    string `json:"cidr"`
	Gateway string `json:"gateway"`
}

// Endpoint is one instance on a network.
type Endpoint struct {
	InstanceID string `json:"instance_id"`
	// Name is the instance's name (empty: none); DNS answers
	// NAME.NETWORK.internal and INSTANCE_ID.internal for it.
	Name    string `json:"name,omitempty"`
	Address string `json:"address"`
	MAC     string `json:"mac"`
	// HostID is the host the instance is on and Underlay that host's
	// fabric address (fleet.Host.Underlay), where its overlay endpoint
	// listens; empty when the host reported none.
	HostID   string `json:"host_id"`
	Underlay string `json:"underlay,omitempty"`
	// SecurityGroups are the instance's groups.
	SecurityGroups []string `json:"security_groups"`
	// PublicAddress is the public address associated with the instance.
	PublicAddress string `json:"public_address,omitempty"`
}

// GroupRules is a security group's rules as a host applies them.
type GroupRules struct {
	ID      string     `json:"id"`
	Ingress []RuleSpec `json:"ingress"`
	Egress  []RuleSpec `json:"egress"`
}

// RuleSpec is one allow rule: a protocol (cloud.ProtocolAll, TCP, UDP or
// ICMP), a port range for TCP and UDP (both zero: every port), and the
// peers, as CIDRs: a rule's own CIDR, or the /32 of each member of the
// group it names (none: the group has no members with an address, and
// the rule allows nothing).
type RuleSpec struct {
	Protocol string   `json:"protocol"`
	FromPort int      `json:"from_port,omitempty"`
	ToPort   int      `json:"to_port,omitempty"`
	Peers    []string `json:"peers"`
}

// MaxNetworkWait bounds how long GET /v1/agent/networks waits for a
// change.
const MaxNetworkWait = 30 * time.Second

// Networks returns the host's NetworkView. With a version (one an earlier
// call returned) and a wait, the server answers when the view no longer
// has that version, or after wait (at most MaxNetworkWait) with the same
// view: an agent that calls again at once hears of a change within its
// round trip.
func (c *Client) Networks(ctx context.Context, version string, wait time.Duration) (*NetworkView, error) {
	q := url.Values{}
	if version != "" {
		q.Set("version", version)
	}
	if wait > 0 {
		q.Set("wait", strconv.FormatInt(wait.Milliseconds(), 10)+"ms")
	}
	path := "/v1/agent/networks"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var out NetworkView
	_, _, err := c.r.Do(ctx, rest.Call{Method: "GET", Path: path, Out: &out})
	return rest.NilOnErr(&out, err)
}
