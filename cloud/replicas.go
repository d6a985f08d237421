package cloud

import (
	"context"
	"time"
)

// Replica is one server replica as it records itself in the store
// (docs/CONTROL_PLANE.md, "Several replicas"): the address its peers reach
// it at, when it started and last wrote its heartbeat, its serverless
// gateway's load (opaque JSON, which the gateway reads and writes), and
// the hosts whose agents hold a session control channel to it.
type Replica struct {
	ID          string
	Address     string
	StartedAt   time.Time
	HeartbeatAt time.Time
	Load        string
	Hosts       []ReplicaHost
}

// ReplicaHost is a host whose agent holds its control channel to a
// replica, since the time the channel opened.
type ReplicaHost struct {
	HostID string
	Since  time.Time
}

// ReplicaTx keeps the replica registry.
type ReplicaTx interface {
	// PutReplica writes r's row (inserting it, or replacing the one of
	// its ID: address, heartbeat, load; StartedAt is kept from the first
	// write) and replaces its hosts with r.Hosts.
	PutReplica(ctx context.Context, r *Replica) error
	// ListReplicas lists the replicas whose heartbeat is at or after
	// since, with their hosts (in host ID order), in ID order.
	ListReplicas(ctx context.Context, since time.Time) ([]*Replica, error)
	// DeleteReplicas removes the replicas whose heartbeat is before
	// before, with their hosts, and answers how many it removed.
	DeleteReplicas(ctx context.Context, before time.Time) (int, error)
}
