package controlplane

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/gpucloud/gpucloud/cloud"
)

// lockQuery takes the advisory lock the replicas compete for. The key
// names the schema, so deployments (and tests) sharing one PostgreSQL
// server in different schemas do not compete with each other.
const lockQuery = "SELECT pg_try_advisory_lock(hashtext('gpucloud-leader:' || current_schema()))"

type leaderState struct {
	mu sync.Mutex
	on bool
	// terms counts the times this replica became leader.
	terms int
}

func (l *leaderState) set(v bool) {
	l.mu.Lock()
	if v && !l.on {
		l.terms++
	}
	l.on = v
	l.mu.Unlock()
}

func (l *leaderState) termCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.terms
}

func (l *leaderState) get() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.on
}

// campaign runs lead while this replica is the leader, until ctx ends. On
// SQLite there is one server process, which always leads. On PostgreSQL the
// leader holds a session-level advisory lock on a dedicated connection: if
// the connection drops (the replica died or lost the database), the lock
// goes with it and another replica takes over; a replica that loses its
// connection stops its controllers at once.
func campaign(ctx context.Context, cfg Config, st cloud.Store, state *leaderState, lead func(context.Context)) {
	if st.Dialect() != "postgres" {
		state.set(true)
		lead(ctx)
		state.set(false)
		return
	}
	for ctx.Err() == nil {
		conn, err := pgx.Connect(ctx, cfg.DB)
		if err != nil {
			cfg.Log.Warn("leader election: cannot connect", "err", err)
			sleep(ctx, time.Second)
			continue
		}
		var got bool
		if err := conn.QueryRow(ctx, lockQuery).Scan(&got); err != nil || !got {
			conn.Close(context.Background())
			sleep(ctx, time.Second)
			continue
		}
		cfg.Log.Info("leader election: this replica leads")
		leadCtx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			state.set(true)
			lead(leadCtx)
			state.set(false)
		}()
		// Watch the connection: losing it means losing the lock.
		for leadCtx.Err() == nil {
			sleep(leadCtx, time.Second)
			if leadCtx.Err() == nil && conn.Ping(leadCtx) != nil {
				cfg.Log.Warn("leader election: lost the database connection; stepping down")
				break
			}
		}
		stop()
		<-done
		conn.Close(context.Background())
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
