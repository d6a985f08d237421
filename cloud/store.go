package cloud

import (
	"context"
	"time"

	"github.com/gpucloud/gpucloud/fleet"
)

// Store persists the domain. Implementations: store/sqlite (embedded, the
// default) and store/postgres (production; several server replicas share
// one). Both run the same conformance suite (store/storetest) over real
// connections.
//
// Every read and write happens inside Tx, so that a controller can commit an
// allocation and the state change that goes with it atomically. Errors are
// *Error values: NotFound for a missing row, Conflict for a duplicate or a
// stale version; anything else is Internal.
type Store interface {
	// Tx runs fn in one serializable transaction and commits when fn returns
	// nil; any error from fn rolls everything back and is returned as is.
	// A transaction that loses a serialization race is retried a few times
	// before Tx returns a Conflict.
	Tx(ctx context.Context, fn func(Tx) error) error
	// Dialect names the backend: "sqlite" or "postgres".
	Dialect() string
	Close() error
}

// Tx is one transaction's view of the store. It is not safe for concurrent
// use and is invalid after fn returns.
type Tx interface {
	BillingTx
	EndpointTx
	GroupTx
	KeyTx
	NetworkTx
	PlacementGroupTx
	ReplicaTx
	SessionTx
	StackTx
	VolumeHostTx

	CreateTenant(ctx context.Context, t *Tenant) error // Conflict if the ID or name exists
	GetTenant(ctx context.Context, id string) (*Tenant, error)
	ListTenants(ctx context.Context) ([]*Tenant, error)

	CreateUser(ctx context.Context, u *User) error
	GetUser(ctx context.Context, id string) (*User, error)

	// CreateToken stores a token; only its Hash is kept.
	CreateToken(ctx context.Context, t *Token) error
	// TokenByHash finds a live (not revoked, not expired at now) token.
	TokenByHash(ctx context.Context, hash []byte, now time.Time) (*Token, error)
	// ListTokens lists a tenant's tokens in ID order, every tenant's when
	// tenantID is empty.
	ListTokens(ctx context.Context, tenantID string) ([]*Token, error)
	RevokeToken(ctx context.Context, id string, at time.Time) error
	// RecordTokenUse counts one use of a live (not revoked, not expired at
	// now) token and answers it with the use counted. A token that has
	// made its MaxUses uses answers Conflict and stays as it was; a
	// missing, revoked or expired one NotFound. Of concurrent
	// transactions that race for a token's last use, one commits.
	RecordTokenUse(ctx context.Context, id string, now time.Time) (*Token, error)

	// CreateClusterSecret stores a secret of the cloud itself (its CA)
	// under name, once: Conflict when the name is taken, so that of two
	// replicas starting together one wins and the other reads its value.
	// ClusterSecret reads one back; NotFound when there is none.
	// UpdateClusterSecret replaces a secret's value only when it still is
	// old (compare and swap: Conflict when it is not, NotFound when there
	// is no such secret), so that replicas rewriting it together (the CA
	// key's encryption at start) cannot both write.
	CreateClusterSecret(ctx context.Context, name string, value []byte, at time.Time) error
	UpdateClusterSecret(ctx context.Context, name string, old, value []byte) error
	ClusterSecret(ctx context.Context, name string) ([]byte, error)

	PutQuota(ctx context.Context, q *Quota) error // upsert
	GetQuota(ctx context.Context, tenantID string) (*Quota, error)
	// LockQuota is GetQuota that also writes the quota's row (changing
	// nothing), so that until this transaction ends another that locks or
	// writes the row waits, and then sees this one's writes (read
	// committed) or fails to serialize (serializable): creates of one
	// tenant count its instances in turn, at any isolation.
	LockQuota(ctx context.Context, tenantID string) (*Quota, error)

	// CreateInstance inserts an instance with Version 1. If the tenant
	// already has an instance with the same non-empty IdempotencyKey, it
	// returns that instance and a Conflict error whose Details carry
	// "existing_id".
	CreateInstance(ctx context.Context, in *Instance) error
	// CreateInstances inserts several instances as CreateInstance would,
	// in a few statements rather than a few per instance. When one cannot
	// be inserted it answers CreateInstance's error for the first such
	// one, and the caller must abandon the transaction: the others may
	// have been written.
	CreateInstances(ctx context.Context, ins []*Instance) error
	GetInstance(ctx context.Context, id string) (*Instance, error)
	InstanceByKey(ctx context.Context, tenantID, key string) (*Instance, error)
	// InstancesByKeys finds, in one read, the instances a tenant created
	// with any of keys; a key that names none (and the empty key) is
	// absent from the answer, which is in no particular order.
	InstancesByKeys(ctx context.Context, tenantID string, keys []string) ([]*Instance, error)
	ListInstances(ctx context.Context, f InstanceFilter) ([]*Instance, error)
	// InstanceIDs returns the IDs of the instances ListInstances(f) would
	// return, in the same order, without reading the rest of their rows:
	// what a controller needs to know which instances are in a state.
	InstanceIDs(ctx context.Context, f InstanceFilter) ([]string, error)
	// InstanceVersions returns the ID and version of the instances
	// ListInstances(f) would return, in ID order: a reader that caches
	// instances re-reads (InstanceFilter.IDs) only the changed ones.
	InstanceVersions(ctx context.Context, f InstanceFilter) ([]RowVersion, error)
	// UpdateInstance writes in if the stored version equals in.Version,
	// and increments in.Version; otherwise it returns Conflict and changes
	// nothing.
	UpdateInstance(ctx context.Context, in *Instance) error
	// UpdateInstances writes several instances as UpdateInstance would,
	// in a few statements rather than one per instance: each one whose
	// stored version equals its Version is written and has its Version
	// incremented; the others, stale or missing, are left unchanged and
	// their IDs returned, in the order given. An ID given twice is
	// Invalid.
	UpdateInstances(ctx context.Context, ins []*Instance) (stale []string, err error)
	// UpdateInstanceStates is UpdateInstances for what a lifecycle move
	// changes (service.MoveInstances): of each instance it writes only
	// State, Reason, HostID, Placement, Zone, Interruption and UpdatedAt,
	// and bumps the version, leaving the rest of the row as stored. The scheduler's batches write a few columns a
	// row instead of every one.
	UpdateInstanceStates(ctx context.Context, ins []*Instance) (stale []string, err error)

	// PutHost inserts a host, or updates it when host.Version matches the
	// stored one (then increments it); Conflict otherwise. The scheduler
	// bumps a host's version in the same transaction as the allocation it
	// commits, so two schedulers can never both commit onto one host state.
	PutHost(ctx context.Context, h *Host) error
	GetHost(ctx context.Context, id string) (*Host, error)
	ListHosts(ctx context.Context) ([]*Host, error)
	// ListSilentHosts lists the hosts that are not unhealthy and whose
	// LastHeartbeat is before before, in ID order: what the heartbeat
	// watcher marks, without reading every host.
	ListSilentHosts(ctx context.Context, before time.Time) ([]*Host, error)
	// ListHostVersions lists every host's ID and version, in ID order,
	// without their specs: what a scheduler compares with the fleet it
	// built to read only the hosts that joined since.
	ListHostVersions(ctx context.Context) ([]RowVersion, error)
	// Heartbeat sets a host's LastHeartbeat to at and changes nothing
	// else, its version included: a heartbeat that reports nothing new
	// must not make the scheduler rebuild its fleet. NotFound for a
	// missing host.
	Heartbeat(ctx context.Context, hostID string, at time.Time) error
	// StampHeartbeats does what Heartbeat does for every host of hostIDs
	// that exists and is not unhealthy (a heartbeat heals an unhealthy
	// host, which is more than a stamp), in a few statements however many
	// they are, and answers the IDs it stamped, in no order; the others
	// are missing or unhealthy.
	StampHeartbeats(ctx context.Context, hostIDs []string, at time.Time) ([]string, error)
	// BumpHosts increments the version of every host in versions (host ID
	// to the version the caller read) and changes nothing else; when any
	// of them is stale or missing it changes none of them, and returns a
	// Conflict whose Details carry the stored version, or NotFound, for the
	// first such host in ID order. The scheduler commits allocations onto
	// host states with it, as it would with PutHost, without rewriting the
	// specs.
	BumpHosts(ctx context.Context, versions map[string]int64) error
	// HostStamp summarizes the hosts without reading their specs, so that
	// a controller can tell cheaply whether any host changed (see
	// HostStamp).
	HostStamp(ctx context.Context) (HostStamp, error)
	// CountInstances counts the instances by state, offering, market and
	// tenant, and CountHosts the hosts by state, each in one aggregate
	// query (the metrics read them at every scrape, never the rows). Only
	// groups with at least one member are returned, in the order of their
	// fields.
	CountInstances(ctx context.Context) ([]InstanceCount, error)
	CountHosts(ctx context.Context) ([]HostCount, error)
	// CountTenantInstances is CountInstances for one tenant's instances
	// (what a quota counts, without reading the rows), in the same order.
	CountTenantInstances(ctx context.Context, tenantID string) ([]InstanceCount, error)

	// CreateVolume inserts a volume (and appends its usage On). If the
	// tenant already has a volume with the same non-empty IdempotencyKey,
	// it writes nothing (no second usage On), sets *v to that volume and
	// returns a Conflict error whose Details carry "existing_id".
	CreateVolume(ctx context.Context, v *Volume) error
	GetVolume(ctx context.Context, id string) (*Volume, error)
	// VolumeByKey finds the tenant's volume created with a non-empty
	// idempotency key; NotFound when there is none.
	VolumeByKey(ctx context.Context, tenantID, key string) (*Volume, error)
	// ListVolumes lists a tenant's volumes (deleted ones too) in ID order,
	// every tenant's when tenantID is empty.
	ListVolumes(ctx context.Context, tenantID string) ([]*Volume, error)
	UpdateVolume(ctx context.Context, v *Volume) error

	// AppendLog appends data to an instance's output log and returns the
	// log's end offset (see LogChunk). It keeps the newest keep bytes
	// (keep > 0) and drops older output, even when data alone is larger.
	// Appending nothing changes nothing. NotFound for a missing instance.
	AppendLog(ctx context.Context, instanceID string, data []byte, keep int64) (end int64, err error)
	// ReadLog returns at most max bytes (max > 0) of an instance's log
	// from offset on, or from the oldest kept byte when the output at
	// offset was dropped. An offset past the end is Invalid; a missing
	// instance is NotFound.
	ReadLog(ctx context.Context, instanceID string, offset int64, max int) (*LogChunk, error)

	// AppendEvent adds to the audit trail and sets e.ID (increasing).
	AppendEvent(ctx context.Context, e *Event) error
	// AppendEvents appends several events, as AppendEvent would one after
	// the other, in a few statements rather than one per event.
	AppendEvents(ctx context.Context, es []*Event) error
	ListEvents(ctx context.Context, f EventFilter) ([]*Event, error)
}

// HostStamp summarizes the hosts: how many there are and the sum of their
// versions. PutHost and BumpHosts change it and Heartbeat does not. Hosts are
// never deleted and their versions only grow, so two equal stamps mean that
// no host was added or changed in between: the count fixes the set of
// hosts, and a version that grew would raise the sum.
type HostStamp struct {
	Hosts      int
	VersionSum int64
}

// InstanceCount is how many instances share a state, an offering, a
// market and a tenant (Tx.CountInstances).
type InstanceCount struct {
	State    State
	Offering string
	Market   Market
	TenantID string
	Count    int
}

// HostCount is how many hosts are in a state (Tx.CountHosts).
type HostCount struct {
	State fleet.HostState
	Count int
}

// InstanceFilter selects instances; zero fields match everything.
type InstanceFilter struct {
	TenantID string
	States   []State
	HostID   string
	Offering string
	// Name selects the instances of that exact name.
	Name string
	// Market selects on-demand or spot instances; SpotRequestID the
	// launches of one spot request.
	Market        Market
	SpotRequestID string
	// Interrupted selects instances that carry an Interruption (a reclaim
	// notice or a rebalance recommendation).
	Interrupted bool
	// GroupID selects the members of one group; InGroup the members of
	// any group.
	GroupID string
	InGroup bool
	// PlacementGroupID selects the members of one placement group.
	PlacementGroupID string
	// NetworkID, SubnetID and SecurityGroupID select the instances of a
	// network, of a subnet, and the members of a security group.
	NetworkID       string
	SubnetID        string
	SecurityGroupID string
	// IDs selects these instances (none: any).
	IDs []string
	// Limit caps the result (0 = no cap); AfterID pages by ID order.
	Limit   int
	AfterID string
	// NewestFirst orders by creation, newest first (then by ID,
	// descending); AfterID then pages after that instance in this order,
	// and is looked up within TenantID when it is set (another tenant's
	// instance matches nothing, and tells nothing of its creation).
	NewestFirst bool
}

// EventFilter selects events in ID order; zero fields match everything.
type EventFilter struct {
	TenantID   string
	InstanceID string
	HostID     string
	// Kinds selects events of any of these kinds (none: every kind).
	Kinds []EventKind
	// Since selects events whose Time is at or after it (zero: any time).
	Since   time.Time
	AfterID int64
	Limit   int
}

// Isolation asks a Store for a transaction isolation level through the
// context passed to Tx.
type Isolation uint8

const (
	// IsolationDefault is the store's own level (serializable on
	// PostgreSQL; SQLite runs one transaction at a time anyway).
	IsolationDefault Isolation = iota
	// ReadCommitted is for transactions whose correctness rests only on
	// unique constraints and version checks, never on a decision taken
	// from rows that another transaction could change meanwhile (such as a
	// quota count). It spares them the aborts serializable transactions
	// suffer under contention. Stores that cannot lower isolation ignore it.
	ReadCommitted
)

type isolationKey struct{}

// WithIsolation returns ctx asking for isolation level l.
func WithIsolation(ctx context.Context, l Isolation) context.Context {
	return context.WithValue(ctx, isolationKey{}, l)
}

// IsolationOf returns the isolation level ctx asks for.
func IsolationOf(ctx context.Context) Isolation {
	l, _ := ctx.Value(isolationKey{}).(Isolation)
	return l
}

// Lane is the queue a transaction waits in for its turn at a store that
// limits how many run at once, asked for through the context passed to
// Tx. Each lane has turns of its own, so that one never waits behind the
// other's queue.
type Lane uint8

const (
	// LaneDefault is the tenants', the controllers' and everything else's.
	LaneDefault Lane = iota
	// LaneFleet is the agents' protocol: heartbeats, assignment watches,
	// status reports, and the look-ups of their credentials. At thousands
	// of hosts it is a steady load that must never wait behind a burst of
	// tenants' creates, nor hold them up (issue 26).
	LaneFleet
)

type laneKey struct{}

// WithLane returns ctx asking for lane l.
func WithLane(ctx context.Context, l Lane) context.Context {
	return context.WithValue(ctx, laneKey{}, l)
}

// LaneOf returns the lane ctx asks for.
func LaneOf(ctx context.Context) Lane {
	l, _ := ctx.Value(laneKey{}).(Lane)
	return l
}

// RowVersion is a row's ID and version: what a reader that caches rows
// compares to re-read only the rows that changed.
type RowVersion struct {
	ID      string
	Version int64
}
