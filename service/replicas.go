package service

import (
	"context"
	"fmt"
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
// A live record of r's ID at another address is another replica under
// the same name (two servers started on one machine without
// --replica-name, whose default is the host's name): it answers conflict
// and writes nothing, so that the live one's record and routes stand; a
// replica that restarts at its address takes its record back at once,
// one that moved once the old record is past the TTL.
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
		cut := now.Add(-ttl)
		was, err := tx.ListReplicas(ctx, cut)
		if err != nil {
			return err
		}
		for _, p := range was {
			if p.ID == r.ID && p.Address != r.Address {
				return &cloud.Error{Code: cloud.Conflict,
					Message: fmt.Sprintf("another replica is live under the name %q, at %s (its last heartbeat %s): give each replica a name of its own (--replica-name)",
						r.ID, p.Address, p.HeartbeatAt.UTC().Format(time.RFC3339)),
					Details: map[string]any{"field": "id", "address": p.Address}}
			}
		}
		if err := tx.PutReplica(ctx, &r); err != nil {
			return err
		}
		if _, err := tx.DeleteReplicas(ctx, cut); err != nil {
			return err
		}
		live, err = tx.ListReplicas(ctx, cut)
		return err
	})
	return live, err
}

func replicaField(field, msg string) error {
	return &cloud.Error{Code: cloud.Invalid, Message: field + ": " + msg, Details: map[string]any{"field": field}}
}
