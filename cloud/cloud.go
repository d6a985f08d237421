// Package cloud holds gpucloud's rental domain: tenants, users and tokens,
// quotas, instances and their lifecycle, volumes, hosts as the control plane
// records them, allocations and the event trail, and the Store interface
// that persists them. It has no dependencies on a database or on HTTP:
// adapters (store/sqlite, store/postgres, httpapi) implement or use it.
package cloud

import (
	"encoding/json"
	"slices"
	"time"

	"github.com/gpucloud/gpucloud/fleet"
)

// Role is what a user may do.
type Role string

const (
	// RoleAdmin operates the cloud: hosts, tenants, quotas, prices.
	RoleAdmin Role = "admin"
	// RoleMember rents capacity inside its own tenant.
	RoleMember Role = "member"
	// RoleJoin is the role of join tokens: an admin creates one, and an
	// agent presents it once to join its host to the cloud. It opens no
	// other route.
	RoleJoin Role = "join"
	// RoleAgent is the role of an agent's credential: a token bound to one
	// host (Token.HostID) that opens the agent routes for that host only.
	RoleAgent Role = "agent"
	// RoleInvoke is the role of an endpoint key (EndpointKey): it calls
	// one endpoint's invoke routes (run, runsync, status, cancel, the
	// HTTP mode) and nothing else.
	RoleInvoke Role = "invoke"
)

// Tenant is an account that rents capacity and receives invoices.
type Tenant struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
}

// User belongs to one tenant (admins to the operator's tenant).
type User struct {
	ID        string    `json:"id"`
	TenantID  string    `json:"tenant_id"`
	Name      string    `json:"name"`
	Role      Role      `json:"role"`
	CreatedAt time.Time `json:"created_at"`
}

// Token is an API credential. Only a hash of the secret is stored; the
// secret is shown once, when the token is created.
type Token struct {
	ID        string     `json:"id"`
	UserID    string     `json:"user_id"`
	TenantID  string     `json:"tenant_id"`
	Role      Role       `json:"role"`
	Name      string     `json:"name"`
	Hash      []byte     `json:"-"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
	// HostID binds an agent token (RoleAgent) to the host it speaks for;
	// empty for every other token.
	HostID string `json:"host_id,omitempty"`
	// MaxUses is how many joins a join token (RoleJoin) allows, and Uses
	// how many it has made (Tx.RecordTokenUse). A MaxUses of 0 allows
	// any number: every other token, and join tokens made before joins
	// were counted.
	MaxUses int `json:"max_uses,omitempty"`
	Uses    int `json:"uses,omitempty"`
}

// Quota caps what a tenant may hold at once, and how fast its users may
// call the API. Zero values mean no limit (for the request rate: the
// server's default).
type Quota struct {
	TenantID string `json:"tenant_id"`
	// Instances caps non-terminated instances.
	Instances int `json:"instances,omitempty"`
	// GPUs caps whole-GPU equivalents per canonical GPU model (MIG slices
	// count compute slices / 7, shares their fraction). A model listed
	// with 0 has no limit.
	GPUs map[string]float64 `json:"gpus,omitempty"`
	// GPUsPerModel caps whole-GPU equivalents of each model that GPUs
	// does not list.
	GPUsPerModel float64 `json:"gpus_per_model,omitempty"`
	// RequestsPerSecond and Burst are the token bucket of each of the
	// tenant's users (admins and members, not agent credentials): the
	// sustained rate and how many requests may come at once. Zero is the
	// server's default for the user's role.
	RequestsPerSecond int `json:"requests_per_second,omitempty"`
	Burst             int `json:"burst,omitempty"`
}

// State is an instance's lifecycle state.
type State string

// The lifecycle: pending -> scheduled -> starting -> running -> stopping ->
// stopped -> (pending again on start) ... -> terminated. An instance that
// holds an allocation is terminated through terminating, so that its GPUs
// are released only once the agent has stopped the workload. Failed and
// lost can happen while an instance holds an allocation. Every transition
// is recorded as an Event with a reason.
const (
	Pending   State = "pending"
	Scheduled State = "scheduled"
	Starting  State = "starting"
	Running   State = "running"
	// Paused: the workload is created and frozen (its container's
	// processes paused), holding its allocation: a serverless endpoint's
	// warm pool (docs/ENDPOINTS.md). It bills as running; it moves back
	// to running when resumed.
	Paused      State = "paused"
	Stopping    State = "stopping"
	Stopped     State = "stopped"
	Terminating State = "terminating"
	Terminated  State = "terminated"
	Failed      State = "failed"
	Lost        State = "lost"
)

// transitions lists the states each state may move to.
var transitions = map[State][]State{
	Pending:     {Scheduled, Stopped, Terminated, Failed},
	Scheduled:   {Starting, Pending, Stopping, Terminating, Failed, Lost},
	Starting:    {Running, Stopping, Terminating, Failed, Lost},
	Running:     {Paused, Stopping, Terminating, Failed, Lost},
	Paused:      {Running, Stopping, Terminating, Failed, Lost},
	Stopping:    {Stopped, Terminating, Failed, Lost},
	Terminating: {Terminated, Lost},
	Stopped:     {Pending, Terminated},
	Failed:      {Terminated},
	Lost:        {Pending, Terminated},
	Terminated:  nil,
}

// holding is the one list of the states in which an instance holds an
// allocation (capacity on a host that the scheduler counts).
var holding = []State{Scheduled, Starting, Running, Paused, Stopping, Terminating}

// HoldingStates are the states in which an instance holds an allocation.
// The caller gets its own copy.
func HoldingStates() []State { return slices.Clone(holding) }

// CanMove reports whether an instance may go from one state to another.
func CanMove(from, to State) bool {
	for _, s := range transitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

// Holds reports whether an instance in state s holds an allocation.
func (s State) Holds() bool { return slices.Contains(holding, s) }

// Instance is a rental: an offering, a workload, and where it runs.
type Instance struct {
	ID       string `json:"id"`
	TenantID string `json:"tenant_id"`
	Name     string `json:"name,omitempty"`
	Offering string `json:"offering"`
	State    State  `json:"state"`
	// Reason explains the state: the placement engine's per-reason host
	// counts while pending, the exit status when failed.
	Reason string `json:"reason,omitempty"`
	// Version increases with every update; writers send it back
	// (If-Match) so that two writers cannot silently overwrite each other.
	Version int64 `json:"version"`
	// IdempotencyKey makes create retries return the same instance.
	IdempotencyKey string `json:"-"`

	// Zones and Labels constrain placement beyond the offering.
	Zones  []string `json:"zones,omitempty"`
	Labels []string `json:"labels,omitempty"`
	// PlacementGroupID is the placement group the scheduler places the
	// instance in (empty: none).
	PlacementGroupID string `json:"placement_group,omitempty"`
	// Image is the OCI image the workload runs in, canonical
	// ("docker.io/library/python:3.12"); empty: the default image the
	// operator configured on the host.
	Image string `json:"image,omitempty"`
	// Command, Env and Volumes describe the workload the agent runs.
	Command []string          `json:"command,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	Volumes []string          `json:"volumes,omitempty"`
	Tags    map[string]string `json:"tags,omitempty"`

	// NetworkID and SubnetID are the instance's network and subnet, and
	// SecurityGroupIDs its security groups (one to five, of that
	// network), chosen at create (the tenant's default network, subnet
	// and group when the request names none).
	NetworkID        string   `json:"network_id,omitempty"`
	SubnetID         string   `json:"subnet_id,omitempty"`
	SecurityGroupIDs []string `json:"security_groups,omitempty"`
	// Publish lists the TCP ports inside the instance that its tenant
	// may open as HTTP through the server, at
	// /v1/instances/{id}/ports/{port}/ (docs/ACCESS.md, "Published HTTP
	// ports"). Fixed at create.
	Publish []int `json:"publish,omitempty"`
	// PublishKeepPrefix lists the published ports whose requests reach
	// the workload with their whole path, /v1/instances/{id}/ports/{port}/
	// included, rather than with the prefix removed: for servers that
	// serve under a base URL set to the prefix (Jupyter's
	// --ServerApp.base_url, TensorBoard's --path_prefix). Each is one of
	// Publish. Fixed at create.
	PublishKeepPrefix []int `json:"publish_keep_prefix,omitempty"`
	// PreferHosts lists host IDs the scheduler prefers for the instance,
	// the most preferred first, among hosts that fit it equally well
	// (placement.Request.Prefer: a tie-breaker, never more). An endpoint's
	// worker prefers the hosts where the endpoint's workers last ran,
	// which hold its image. Fixed at create.
	PreferHosts []string `json:"prefer_hosts,omitempty"`
	// PrivateAddress is the instance's address in its subnet, given at
	// create and kept across stop and start until it terminates (kept on
	// the record after that, as Zone is, but no longer held: another
	// instance may get it). Instances made before networks existed have
	// the address their agent reported.
	PrivateAddress string `json:"private_address,omitempty"`

	// HostID and Placement are set while the instance holds an allocation.
	HostID    string           `json:"host_id,omitempty"`
	Placement *fleet.Placement `json:"placement,omitempty"`
	// Zone is where the instance was last placed (kept after release, for
	// the usage ledger and the invoice).
	Zone string `json:"zone,omitempty"`

	// Market is on_demand (the default) or spot. A spot instance belongs
	// to SpotRequestID, may be reclaimed, and carries its Interruption
	// once one is announced.
	Market        Market        `json:"market"`
	SpotRequestID string        `json:"spot_request_id,omitempty"`
	Interruption  *Interruption `json:"interruption,omitempty"`

	// GroupID is the autoscaling group the instance belongs to (empty:
	// none); ScaleIn its scale-in protection and completion lock.
	GroupID string   `json:"group_id,omitempty"`
	ScaleIn *ScaleIn `json:"scale_in,omitempty"`

	// EndpointID is the serverless endpoint the instance is a worker of
	// (empty: none). Fixed at create; the usage ledger's compute entries
	// carry it, so that the invoice shows workers under their endpoint.
	EndpointID string `json:"endpoint_id,omitempty"`

	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Volume is persistent storage; it outlives the instances it is attached to.
type Volume struct {
	ID       string `json:"id"`
	TenantID string `json:"tenant_id"`
	Name     string `json:"name"`
	SizeGiB  int64  `json:"size_gib"`
	Zone     string `json:"zone,omitempty"`
	// Kind is VolumeBlock (one host, one instance at a time) or
	// VolumeShared (a directory on the operator's shared filesystem that
	// many instances on many hosts mount at once). Empty reads as block.
	Kind VolumeKind `json:"kind,omitempty"`
	// InstanceID is the one instance a block volume is attached to. A
	// shared volume leaves it empty: the instances that name it in their
	// Volumes are its attachments.
	InstanceID string `json:"instance_id,omitempty"`
	// Tags are the tenant's, and gpucloud's own (gpucloud:stack).
	Tags      map[string]string `json:"tags,omitempty"`
	CreatedAt time.Time         `json:"created_at"`
	DeletedAt *time.Time        `json:"deleted_at,omitempty"`
	// IdempotencyKey makes a retried create return the first volume
	// (unique per tenant; empty: not idempotent).
	IdempotencyKey string `json:"-"`
}

// VolumeKind says where a volume's data lives and who may mount it.
type VolumeKind string

// Volume kinds.
const (
	// VolumeBlock is a filesystem image on one host's disk, attached to
	// one instance at a time (the kind every volume had before kinds).
	VolumeBlock VolumeKind = "block"
	// VolumeShared is a directory on a filesystem every host mounts at the
	// same path (the agent's --shared-volume-dir), attachable to many
	// instances at once, read-write.
	VolumeShared VolumeKind = "shared"
)

// Shared reports whether v is a shared volume.
func (v *Volume) Shared() bool { return v.Kind == VolumeShared }

// Host is a GPU server as the control plane records it: its inventory as
// the agent reported it, and the operator's scheduling state.
type Host struct {
	ID    string          `json:"id"`
	State fleet.HostState `json:"state"`
	// Spec is the fleet description the scheduler places on (zone, rack,
	// labels, CPU, memory, GPUs with models, UUIDs, islands, MIG mode).
	Spec          fleet.Host `json:"spec"`
	LastHeartbeat time.Time  `json:"last_heartbeat"`
	Version       int64      `json:"version"`
}

// LogChunk is a piece of an instance's output log. Offsets count bytes
// from the first byte the instance ever wrote, so they stay valid when the
// store drops the oldest output to keep a log under its cap.
type LogChunk struct {
	// Data is the output from Start on.
	Data []byte
	// Start is the offset of Data's first byte: the offset asked for, or
	// First when the output there was dropped.
	Start int64
	// First is the offset of the oldest byte still kept.
	First int64
	// End is the offset just after the newest byte written.
	End int64
}

// EventKind groups events.
type EventKind string

// Event kinds written by more than one component. Every lifecycle move of
// an instance, whoever makes it (API, scheduler, agent report, health
// watcher), is an EventInstanceState event with From and To set, so that
// one filter finds them all.
const (
	EventInstanceCreated       EventKind = "instance.created"
	EventInstanceState         EventKind = "instance.state"
	EventInstanceUnschedulable EventKind = "instance.unschedulable"
	EventHostUnhealthy         EventKind = "host.unhealthy"
)

// Event is one entry of the audit trail: a state change, a placement
// decision, an operator action.
type Event struct {
	ID         int64           `json:"id"`
	Time       time.Time       `json:"time"`
	Kind       EventKind       `json:"kind"`
	TenantID   string          `json:"tenant_id,omitempty"`
	InstanceID string          `json:"instance_id,omitempty"`
	HostID     string          `json:"host_id,omitempty"`
	From       State           `json:"from,omitempty"`
	To         State           `json:"to,omitempty"`
	Reason     string          `json:"reason,omitempty"`
	Actor      string          `json:"actor,omitempty"`
	Details    json.RawMessage `json:"details,omitempty"`
}

// Owned is a resource that belongs to one tenant. Services use it to
// answer another tenant's resource exactly like a missing one.
type Owned interface{ Owner() string }

// Owner is the tenant an instance belongs to.
func (in *Instance) Owner() string { return in.TenantID }

// Owner is the tenant a volume belongs to.
func (v *Volume) Owner() string { return v.TenantID }
