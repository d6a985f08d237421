// Package service holds gpucloud's domain services: every rule that
// changes state lives here once, over cloud.Tx, and is testable without
// HTTP. The /v1 handlers (httpapi), the web console (console), the
// controllers (controller) and the stack engine (stackengine) call these
// services; none of them re-implements a rule. A server builds the
// services once (New, in package controlplane) and hands the same
// *Services to all of them.
//
// Three layers:
//
//   - Functions over a cloud.Tx that other services compose inside their
//     own transactions: MoveInstance and MoveInstances (the one way an
//     instance changes state), CreateInstance (the one way an instance
//     comes to be), LaunchSpot, LaunchGroupMember, NoticeGroupMember,
//     NoticeSpotReclaim, DetachVolumes, EnforceQuota, Visible.
//   - The applies of the controllers' plans, each one re-checked
//     transaction: ApplySchedule, ApplyMarketPlan, ApplyGroupPlan. The
//     controllers plan over snapshots and write nothing themselves.
//   - Services (Instances, Volumes, ...) whose methods take an Actor,
//     run one transaction each, and decide tenancy: a member acts on its
//     own tenant only, and another tenant's resource answers exactly like a
//     missing one. They take and answer the api package's wire types.
package service

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"github.com/gpucloud/gpucloud/internal/imageref"
	"time"

	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
)

// Actor is who asks for a change: a user (admin or member of a tenant), a
// host's agent, or a controller.
type Actor struct {
	// ID names the actor in events: a user ID, "agent:<host>", or a
	// controller's name ("scheduler", "market", "health").
	ID       string
	TenantID string
	Role     cloud.Role
	// HostID is the host an agent speaks for.
	HostID string
	// EndpointID is the one endpoint an endpoint key's actor (role
	// invoke) may call; it sees no other.
	EndpointID string
}

// Admin reports whether the actor operates the cloud.
func (a Actor) Admin() bool { return a.Role == cloud.RoleAdmin }

// Sees reports whether the actor may see a resource of tenant: admins see
// every tenant's.
func (a Actor) Sees(tenant string) bool { return a.Admin() || a.TenantID == tenant }

// Controller is the actor of a control-plane controller: trusted, tenant
// of nothing, named in the events it writes.
func Controller(name string) Actor { return Actor{ID: name} }

// AgentActor is the actor of host's agent.
func AgentActor(host string) Actor {
	return Actor{ID: "agent:" + host, Role: cloud.RoleAgent, HostID: host}
}

// NewID returns prefix followed by 16 random hex characters: the one ID
// generator of every resource.
func NewID(prefix string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// ID prefixes of the resources services create.
const (
	TenantPrefix      = "tn-"
	UserPrefix        = "u-"
	TokenPrefix       = "tk-"
	HostPrefix        = "h-"
	InstancePrefix    = "i-"
	VolumePrefix      = "v-"
	AddressPrefix     = "eip-"
	CommitmentPrefix  = "cm-"
	SpotRequestPrefix = "sr-"
	GroupPrefix       = "asg-"
	PlacementPrefix   = "pg-"
	StackPrefix       = "stk-"
	// KeyPrefix is SSH public keys' (issue 20).
	KeyPrefix = "k-"
	// Networks (issue 19): networks, subnets, security groups and their
	// rules.
	NetworkPrefix       = "vpc-"
	SubnetPrefix        = "subnet-"
	SecurityGroupPrefix = "sg-"
	RulePrefix          = "sgr-"
	// DirectGrantPrefix is direct sessions' grants'.
	DirectGrantPrefix = "dg-"
)

// Options configures the services. The zero value uses the wall clock
// and the default catalog.
type Options struct {
	// NetworkChanges is the notifier of the agents' network views, fed by
	// the store st that New is given, which WatchNetworks must have
	// wrapped with it (the composition root wraps the store once, so that
	// the controllers' writes are noted too). Nil: New makes one and
	// wraps st itself.
	NetworkChanges *NetworkChanges
	// AssignmentChanges is the notifier of the agents' assignment
	// watches, fed likewise by the store st that WatchAssignments must
	// have wrapped with it. Nil: New makes one and wraps st itself.
	AssignmentChanges *AssignmentChanges
	// Now is the clock; tests pass a settable one.
	Now func() time.Time
	// StopGrace is how long an agent waits between SIGTERM and SIGKILL
	// when it stops an instance; DefaultStopGrace when zero.
	StopGrace time.Duration
	// AddressPool is the IPv4 block (CIDR) public addresses are allocated
	// from, lowest free address first; DefaultAddressPool when empty.
	AddressPool string
	// Availability, when set, answers what the fleet can do for each
	// offering (the leading scheduler's controller.Scheduler.Availability,
	// or nil on a replica that does not lead). Instances.Create refuses an
	// offering that no host could ever run; nil, or an offering missing
	// from the answer, means "unknown", and the create is accepted.
	Availability func() map[string]cloud.OfferingAvailability
	// DryRun, when set, places instances in order on a copy of the
	// leading scheduler's fleet, reserving nothing
	// (controller.Scheduler.DryRun); ok false (or nil) when this server
	// does not know. A stack's plan uses it to say whether it fits now.
	DryRun func(reqs []cloud.DryRunRequest) ([]cloud.DryRunResult, bool)
	// FleetSeen, when set, is how many hosts the fleet DryRun places on
	// holds (controller.Scheduler.SnapshotHosts: 0 before the scheduler's
	// first pass); ok false when this server has no fleet. While the store
	// has more hosts than that, the fleet is still starting, and a stack's
	// plan is unavailable rather than "does not fit".
	FleetSeen func() (hosts int, ok bool)
	// SignAgentCert, when set, signs an agent's TLS client certificate at
	// join from its certificate request (PEM), with hostID as the
	// certificate's common name, and returns it (PEM); a request it
	// refuses is an error wrapping pki.ErrBadCSR. A server that serves TLS
	// sets it to its CA's SignClient, and then every join must carry a
	// certificate request (Agents.Join). Nil: no client certificates (a
	// plain-HTTP server).
	SignAgentCert func(csrPEM []byte, hostID string) ([]byte, error)
	// AllowRegistries are the registries images may name although their
	// host is an internal address (loopback, link-local, private:
	// imageref.HostRule); empty refuses them all. Hosts apply the same
	// rules, and their own list, when they pull.
	AllowRegistries imageref.AllowList
	// SessionLimit is how many interactive sessions one user may have
	// open at once (DefaultSessionLimit when zero).
	SessionLimit int
	// Replica names this server replica in the session records, so that
	// at its start it closes only the sessions it left open
	// (Sessions.CloseLeftOpen); replicas that share a store need
	// distinct, stable names.
	Replica string
	// DirectAccess lets tenants copy files straight to the agents that
	// listen for it (Files.Grant; the server's --direct-access), and
	// SignDirectGrant signs a grant's payload for them
	// (pki.CA.SignToken for agentapi.DirectGrantPurpose). Grants are
	// refused unless both are set.
	DirectAccess    bool
	SignDirectGrant func(payload []byte) (string, error)
	// VerifyDirectGrant checks a grant's token against the cloud's CA
	// (pki.VerifyToken) and answers its payload: the agents' reports of
	// what their grants served carry the grants (Sessions.DirectReports).
	// Nil: reports are refused.
	VerifyDirectGrant func(token string) ([]byte, error)
	// HeartbeatInterval is how often agents are asked to heartbeat while
	// their host's inventory does not change (Agents.HeartbeatInterval;
	// the composition root asks for a sixth of its heartbeat timeout).
	// Zero: they are not asked, and heartbeat at their own interval.
	HeartbeatInterval time.Duration
	// CreateBatches is how many tenants' batches of creates are committed
	// at once (instances_batch.go); the others' creates wait and join
	// their tenant's next batch. Zero or less: any number, each tenant's
	// batch starting as soon as its last one ends
	// (DefaultCreateBatches says what the composition root picks).
	CreateBatches int
	// CreatesIdle, when set, is called each time the creates go idle
	// after some created an instance: a batch has ended, no tenant's
	// creates are running or waiting, and a batch since the last call
	// created an instance (refused creates, and retries answered with
	// the instance their key made, do not count). The
	// composition root kicks the leader's scheduler with it, so that a
	// lone create, or the last ones of a burst, are placed at once rather
	// than at its next tick; while creates keep coming, the scheduler
	// keeps its tick and places many in each step.
	CreatesIdle func()
}

// DefaultStopGrace is the stop grace period when Options.StopGrace is zero.
const DefaultStopGrace = 30 * time.Second

// DefaultAddressPool is the address pool when Options.AddressPool is
// empty: TEST-NET-3 (RFC 5737), which is never routed, so that a local
// cloud hands out addresses that cannot collide with real ones.
const DefaultAddressPool = "203.0.113.0/24"

// Services bundles the domain services over one store.
type Services struct {
	Instances   *Instances
	Volumes     *Volumes
	Addresses   *Addresses
	Commitments *Commitments
	Prices      *Prices
	Spot        *Spot
	Billing     *Billing
	Accounts    *Accounts
	Hosts       *Hosts
	Agents      *Agents
	Groups      *Groups
	Placement   *PlacementGroups
	Keys        *Keys
	Stacks      *Stacks
	Networks    *Networks
	Sessions    *Sessions
	Files       *Files
	Endpoints   *Endpoints
	Replicas    *Replicas
	// NetworkChanges wakes the agents waiting for their network views.
	NetworkChanges *NetworkChanges
	// AssignmentChanges wakes the agents waiting for their assignments.
	AssignmentChanges *AssignmentChanges
	base
}

// The services. Each has its methods in the file of its name.
type (
	// Volumes creates, lists, attaches and detaches volumes.
	Volumes struct{ base }
	// Addresses allocates, associates, disassociates and releases public
	// addresses.
	Addresses struct{ base }
	// Commitments creates and reads reservations and retainer plans.
	Commitments struct{ base }
	// Prices reads and versions the price book.
	Prices struct{ base }
	// Spot creates and cancels spot requests and reads pools and prices.
	Spot struct{ base }
	// Billing rates invoices and keeps budgets.
	Billing struct{ base }
	// Accounts keeps tenants, users, tokens and quotas.
	Accounts struct{ base }
	// Hosts keeps the operator's view of hosts: cordon, uncordon, drain.
	Hosts struct{ base }
	// Agents is the control plane's side of the agent protocol: join,
	// heartbeat, assignments, status reports and logs.
	Agents struct{ base }
	// Groups creates, reads, resizes and deletes autoscaling groups, and
	// takes the custom metrics tenants publish for them.
	Groups struct{ base }
	// PlacementGroups creates, reads and deletes placement groups.
	PlacementGroups struct{ base }
	// Keys imports, reads and deletes a tenant's SSH public keys.
	Keys struct{ base }
)

// base is what every service shares. It has no mutable state: all state
// is in the store.
type base struct {
	store cloud.Store
	cat   *catalog.Catalog
	now   func() time.Time
	opts  Options
	// beats is the group commit of heartbeats (heartbeats.go).
	beats *beatGroups
}

// New returns the services over st, validating against cat.
func New(st cloud.Store, cat *catalog.Catalog, opts Options) *Services {
	if cat == nil {
		cat = catalog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.StopGrace <= 0 {
		opts.StopGrace = DefaultStopGrace
	}
	if opts.AddressPool == "" {
		opts.AddressPool = DefaultAddressPool
	}
	if opts.NetworkChanges == nil {
		opts.NetworkChanges = NewNetworkChanges()
		st = WatchNetworks(st, opts.NetworkChanges)
	}
	if opts.AssignmentChanges == nil {
		opts.AssignmentChanges = NewAssignmentChanges()
		st = WatchAssignments(st, opts.AssignmentChanges)
	}
	b := base{store: st, cat: cat, now: opts.Now, opts: opts, beats: &beatGroups{}}
	svc := &Services{base: b, Instances: &Instances{base: b, creates: newCreateQueues(opts.CreateBatches, opts.CreatesIdle)}, Volumes: &Volumes{b}, Addresses: &Addresses{b},
		Commitments: &Commitments{b}, Prices: &Prices{b}, Spot: &Spot{b}, Billing: &Billing{b},
		Accounts: &Accounts{b}, Hosts: &Hosts{b}, Agents: &Agents{b}, Groups: &Groups{b},
		Placement: &PlacementGroups{b}, Keys: &Keys{b}, Networks: &Networks{b}, Sessions: &Sessions{b}, Files: &Files{base: b}, Endpoints: &Endpoints{b}, Replicas: &Replicas{b}, NetworkChanges: opts.NetworkChanges,
		AssignmentChanges: opts.AssignmentChanges}
	// A stack's plan and view read its resources through the services of
	// their types, these same ones.
	svc.Stacks = &Stacks{base: b, svc: svc}
	svc.Files.sessions = svc.Sessions
	return svc
}

// Availability answers what the fleet can do for each offering, or nil
// when this server does not know (Options.Availability).
func (b *base) Availability() map[string]cloud.OfferingAvailability {
	if b.opts.Availability == nil {
		return nil
	}
	return b.opts.Availability()
}

// Store is the store the services write.
func (b *base) Store() cloud.Store { return b.store }

// Catalog is the catalog the services validate against.
func (b *base) Catalog() *catalog.Catalog { return b.cat }

// Now is the services' clock.
func (b *base) Now() time.Time { return b.now() }

func (b *base) tx(ctx context.Context, fn func(cloud.Tx) error) error { return b.store.Tx(ctx, fn) }

// Visible reads a resource of the given kind that actor a may see: a
// missing one and another tenant's answer the same NotFound, so that IDs
// do not leak.
func Visible[T cloud.Owned](ctx context.Context, a Actor, kind, id string, get func(context.Context, string) (T, error)) (T, error) {
	v, err := get(ctx, id)
	if cloud.IsNotFound(err) || err == nil && !a.Sees(v.Owner()) {
		var zero T
		return zero, NotFound(kind, id)
	}
	return v, err
}

// Scope resolves the tenant a request acts on from what it asked for. A
// member may only name its own tenant; another answers not_found, like any
// other tenant's resource. An admin may name any existing tenant. When
// nothing is asked for, members get their own tenant and admins get dflt:
// their own tenant to create things, "" (every tenant) to list them.
func Scope(ctx context.Context, tx cloud.Tx, a Actor, asked, dflt string) (string, error) {
	if asked == "" {
		if !a.Admin() {
			return a.TenantID, nil
		}
		return dflt, nil
	}
	if !a.Admin() {
		if asked != a.TenantID {
			return "", NotFound("tenant", asked)
		}
		return asked, nil
	}
	if _, err := tx.GetTenant(ctx, asked); err != nil {
		if cloud.IsNotFound(err) {
			return "", NotFound("tenant", asked)
		}
		return "", err
	}
	return asked, nil
}
