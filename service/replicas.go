package service

import (
	"context"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
)

// Replicas is the registry of server replicas (docs/CONTROL_PLANE.md,
// "Several replicas"): each replica writes its record every
// DefaultReplicaHeartbeat, with the address its peers reach it at, the
// hosts whose agents hold a control channel to it and its gateway's
// load, and reads the live ones back in the same transaction. A replica
// whose record is older than the TTL is gone: it is left out of the
// answer and its row is deleted.
type Replicas struct{ base }

// The registry's timing.
const (
	DefaultReplicaHeartbeat = 2 * time.Second
	DefaultReplicaTTL       = 10 * time.Second
)

// Heartbeat writes r (its heartbeat now, on the services' clock), deletes
// the replicas whose last heartbeat is older than ttl
// (DefaultReplicaTTL when not positive), and answers the live replicas,
// r among them, in ID order. r needs an ID and an address
// (invalid_argument naming the field otherwise, and nothing is written).
func (s *Replicas) Heartbeat(ctx context.Context, r cloud.Replica, ttl time.Duration) ([]*cloud.Replica, error) {
	switch {
	case r.ID == "":
		return nil, replicaField("id", "a replica needs an ID (--replica-name)")
	case r.Address == "":
		return nil, replicaField("address", "replica "+r.ID+" needs the address its peers reach it at (--replica-address)")
	}
	if ttl <= 0 {
		ttl = DefaultReplicaTTL
	}
	now := s.now()
	r.HeartbeatAt = now
	if r.StartedAt.IsZero() {
		r.StartedAt = now
	}
	var live []*cloud.Replica
	err := s.store.Tx(ctx, func(tx cloud.Tx) error {
		if err := tx.PutReplica(ctx, &r); err != nil {
			return err
		}
		cut := now.Add(-ttl)
		if _, err := tx.DeleteReplicas(ctx, cut); err != nil {
			return err
		}
		var err error
		live, err = tx.ListReplicas(ctx, cut)
		return err
	})
	return live, err
}

func replicaField(field, msg string) error {
	return &cloud.Error{Code: cloud.Invalid, Message: field + ": " + msg, Details: map[string]any{"field": field}}
}
