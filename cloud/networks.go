package cloud

import (
	"context"
	"time"
)

// Private networks (issue 19): a tenant's networks (VPCs), their subnets,
// and security groups. The rules that change them live in
// service.Networks; the data path is the agent's (agent/network).

// Network is a tenant's private address space: an IPv4 CIDR from /16 to
// /28. Different tenants' networks may use the same CIDR; each network
// has a cloud-wide unique VNI, its segment on the overlay, so that they
// never meet.
type Network struct {
	ID       string `json:"id"`
	TenantID string `json:"tenant_id"`
	// Name is unique among the tenant's networks; it is the network's
	// part of DNS names (NAME.NETWORK.internal).
	Name string `json:"name"`
	CIDR string `json:"cidr"`
	// VNI is the overlay segment, chosen by the store at CreateNetwork
	// (1 + the largest ever given; never reused).
	VNI uint32 `json:"vni"`
	// Default marks the tenant's default network, made on first use.
	Default bool              `json:"default,omitempty"`
	Tags    map[string]string `json:"tags,omitempty"`
	// IdempotencyKey makes a retried create return the first network.
	IdempotencyKey string    `json:"-"`
	Version        int64     `json:"version"`
	CreatedAt      time.Time `json:"created_at"`
}

// Subnet is a CIDR inside its network, in one zone. Instances get their
// private address from their subnet and keep it until they terminate.
type Subnet struct {
	ID        string `json:"id"`
	TenantID  string `json:"tenant_id"`
	NetworkID string `json:"network_id"`
	// Name is unique among the network's subnets.
	Name string `json:"name"`
	CIDR string `json:"cidr"`
	Zone string `json:"zone"`
	// Default marks the default subnet of a zone in the default network.
	Default bool `json:"default,omitempty"`
	// Cursor is the IPAM cursor: the offset in CIDR of the next address
	// to try. The service advances it as it gives addresses out, so that
	// a freed address is given again only after the rest of the subnet;
	// once the allocation has wrapped around the subnet's end, it is the
	// subnet's size plus that offset (service/networks_addr.go).
	Cursor         uint32            `json:"-"`
	Tags           map[string]string `json:"tags,omitempty"`
	IdempotencyKey string            `json:"-"`
	Version        int64             `json:"version"`
	CreatedAt      time.Time         `json:"created_at"`
}

// SecurityGroup is a stateful, allow-only firewall that instances of one
// network are members of (one to five groups each). Return traffic of an
// allowed flow is allowed.
type SecurityGroup struct {
	ID        string `json:"id"`
	TenantID  string `json:"tenant_id"`
	NetworkID string `json:"network_id"`
	// Name is unique among the network's groups ("default" is the
	// network's default group).
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Default marks the network's default group: all traffic among its
	// members, all egress.
	Default        bool              `json:"default,omitempty"`
	Ingress        []SecurityRule    `json:"ingress"`
	Egress         []SecurityRule    `json:"egress"`
	Tags           map[string]string `json:"tags,omitempty"`
	IdempotencyKey string            `json:"-"`
	Version        int64             `json:"version"`
	CreatedAt      time.Time         `json:"created_at"`
}

// Protocols of a SecurityRule.
const (
	ProtocolAll  = "all"
	ProtocolTCP  = "tcp"
	ProtocolUDP  = "udp"
	ProtocolICMP = "icmp"
)

// SecurityRule allows one kind of traffic: a protocol, a port range (TCP
// and UDP; both zero for all and ICMP) and a peer, either a CIDR or the
// members of a group of the same network (GroupID). The peer is the
// source of an ingress rule and the destination of an egress rule.
type SecurityRule struct {
	// ID names the rule within its group, for revoke ("sgr-...").
	ID          string `json:"id"`
	Protocol    string `json:"protocol"`
	FromPort    int    `json:"from_port,omitempty"`
	ToPort      int    `json:"to_port,omitempty"`
	CIDR        string `json:"cidr,omitempty"`
	GroupID     string `json:"group_id,omitempty"`
	Description string `json:"description,omitempty"`
	// Owner, when set, is the stack resource copy that made the rule (a
	// security_group_rule's, on a group the stack need not own): only it
	// deletes the rule, and a group's own rule list (a stack's
	// security_group) leaves it alone.
	Owner string `json:"owner,omitempty"`
}

// NetworkFilter selects networks, SubnetFilter subnets and
// SecurityGroupFilter security groups; zero fields match everything.
type NetworkFilter struct {
	TenantID string
	IDs      []string
}

type SubnetFilter struct {
	TenantID  string
	NetworkID string
	IDs       []string
}

type SecurityGroupFilter struct {
	TenantID  string
	NetworkID string
	IDs       []string
}

// NetworkTx is the part of Tx that keeps networks, subnets and security
// groups. Creates are Conflict when the name is taken in its scope, and,
// for a non-empty IdempotencyKey the tenant used before, Conflict with
// Details "existing_id" (the first resource; nothing written). Updates
// check Version as UpdateInstance does. Deletes are NotFound for a
// missing row; whether a resource is still in use is the service's rule.
type NetworkTx interface {
	CreateNetwork(ctx context.Context, n *Network) error
	GetNetwork(ctx context.Context, id string) (*Network, error)
	NetworkByKey(ctx context.Context, tenantID, key string) (*Network, error)
	// ListNetworks lists in ID order.
	ListNetworks(ctx context.Context, f NetworkFilter) ([]*Network, error)
	UpdateNetwork(ctx context.Context, n *Network) error
	DeleteNetwork(ctx context.Context, id string) error

	CreateSubnet(ctx context.Context, s *Subnet) error
	GetSubnet(ctx context.Context, id string) (*Subnet, error)
	SubnetByKey(ctx context.Context, tenantID, key string) (*Subnet, error)
	ListSubnets(ctx context.Context, f SubnetFilter) ([]*Subnet, error)
	UpdateSubnet(ctx context.Context, s *Subnet) error
	DeleteSubnet(ctx context.Context, id string) error

	CreateSecurityGroup(ctx context.Context, g *SecurityGroup) error
	GetSecurityGroup(ctx context.Context, id string) (*SecurityGroup, error)
	SecurityGroupByKey(ctx context.Context, tenantID, key string) (*SecurityGroup, error)
	ListSecurityGroups(ctx context.Context, f SecurityGroupFilter) ([]*SecurityGroup, error)
	UpdateSecurityGroup(ctx context.Context, g *SecurityGroup) error
	DeleteSecurityGroup(ctx context.Context, id string) error

	// ListSubnetAddresses lists the private addresses held in a subnet:
	// those of its instances that are not terminated, in no order. A
	// unique index keeps two such instances of one subnet from holding
	// one address.
	ListSubnetAddresses(ctx context.Context, subnetID string) ([]string, error)
}

// Owner is the tenant a network belongs to.
func (n *Network) Owner() string { return n.TenantID }

// Owner is the tenant a subnet belongs to.
func (s *Subnet) Owner() string { return s.TenantID }

// Owner is the tenant a security group belongs to.
func (g *SecurityGroup) Owner() string { return g.TenantID }
