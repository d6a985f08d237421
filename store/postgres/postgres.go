// Package postgres is the production store: cloud.Store on PostgreSQL
// through pgx's database/sql driver, for several server replicas sharing one
// database.
//
// Transactions run at SERIALIZABLE isolation, so that a controller's
// read-check-write (quota, capacity, versions) behaves as if it ran alone.
// PostgreSQL enforces that by aborting one of two conflicting transactions
// with a serialization failure (SQLSTATE 40001) or a deadlock (40P01); Tx
// then runs the function again, up to Retries times with a random wait, and
// returns a cloud Conflict if it keeps losing.
//
// Times are timestamptz: UTC, microsecond precision (see store/sqlstore).
//
// Tests run against the server named by GPUCLOUD_TEST_POSTGRES_URL, each in
// a schema of its own, and skip when it is unset. To run them locally:
//
//	bash -c '. .ci/postgres.sh && go test ./store/postgres'
//
// which starts a throwaway server for the length of the command, or
//
//	GPUCLOUD_TEST_POSTGRES_URL=postgres://user@localhost/db go test ./store/postgres
//
// with any server where that user may create schemas.
package postgres

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/store/migrations"
	"github.com/gpucloud/gpucloud/store/sqlstore"
)

// Store is the PostgreSQL store.
type Store struct {
	*sqlstore.Store
}

var _ cloud.Store = (*Store)(nil)

// Retries is how many times Tx reruns a transaction that lost a
// serialization race before it returns a Conflict.
const Retries = 5

// DefaultMaxTx is how many transactions a store runs at once by default.
const DefaultMaxTx = 8

// Open connects to the database at url (postgres://user@host:port/db?...;
// any parameter pgx does not know, such as search_path, is sent to the
// server as a session setting) and applies pending migrations to the
// current schema, the first one of search_path.
func Open(ctx context.Context, url string) (*Store, error) {
	db, err := sql.Open("pgx", url)
	if err != nil {
		return nil, fmt.Errorf("postgres: open: %w", err)
	}
	// database/sql keeps only 2 idle connections by default, so a burst of
	// concurrent transactions would open and close connections, each costing
	// a round trip of authentication. The cap on open connections is left to
	// the server's max_connections; DB() allows tuning both.
	db.SetMaxIdleConns(16)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("postgres: connect: %w", err)
	}
	if err := migrate(ctx, db); err != nil {
		db.Close()
		return nil, fmt.Errorf("postgres: %w", err)
	}
	warm(ctx, db, DefaultMaxTx+sqlstore.FleetTx(DefaultMaxTx))
	st := &Store{sqlstore.New(db, dialect)}
	// Serializable transactions abort each other when many run at once
	// (creates lock pages of the idempotency index); eight at a time, in
	// arrival order, gave the best throughput and tail latency in the
	// control-plane benchmark (docs/BENCHMARKS.md). Since then the
	// tenants' create batches have a bound of their own, two at once
	// (service.Options.CreateBatches), which beat narrowing this gate to
	// two or three ("Create batches at once"). LimitTx changes it.
	st.LimitTx(DefaultMaxTx)
	return st, nil
}

// warm opens n connections at once and has each plan a query over the
// tables that creates, placements and agents use, so that the first
// requests after a start do not each wait for a connection, a server
// process and its catalog caches: in the control-plane benchmark a cold
// pool made the first 64 creates 3 to 5 times slower than the rest.
// Failures are ignored; a connection that fails is opened again on use.
func warm(ctx context.Context, db *sql.DB, n int) {
	conns := make([]*sql.Conn, n)
	var wg sync.WaitGroup
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := db.Conn(ctx)
			if err != nil {
				return
			}
			conns[i] = c
			_, _ = c.ExecContext(ctx, "SELECT 1 FROM instances, quotas, events, subnets, networks, tenants, tokens, hosts WHERE false")
		}()
	}
	wg.Wait()
	for _, c := range conns {
		if c != nil {
			_ = c.Close() // back to the pool, which keeps it (SetMaxIdleConns)
		}
	}
}

// migrate applies the migrations while holding an advisory lock named after
// the schema, so that replicas starting together do not both create the
// tables: the second waits, then finds nothing left to apply. The lock is
// tied to a session (one pooled connection held meanwhile), so a crashed
// replica cannot leave it taken. pg_advisory_lock blocks rather than polls,
// and schemas do not wait for each other.
func migrate(ctx context.Context, db *sql.DB) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	var schema sql.NullString
	if err := conn.QueryRowContext(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
		return fmt.Errorf("find schema: %w", err)
	}
	if !schema.Valid {
		return errors.New("no schema to migrate: the schemas of search_path do not exist")
	}
	const key = "SELECT hashtextextended('gpucloud.store.migrations:' || $1, 0)"
	if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_lock(("+key+"))", schema.String); err != nil {
		return fmt.Errorf("lock schema %s for migrations: %w", schema.String, err)
	}
	_, err = migrations.Up(ctx, db, "postgres")
	// Unlock with a fresh context: the migration's may be cancelled. If
	// unlocking fails, the connection is discarded rather than returned to
	// the pool, since closing the session is what releases a session lock;
	// a pooled connection still holding it would block every later Open.
	_, uerr := conn.ExecContext(context.Background(), "SELECT pg_advisory_unlock(("+key+"))", schema.String)
	if uerr != nil {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		if err == nil {
			err = fmt.Errorf("unlock schema %s after migrations: %w", schema.String, uerr)
		}
	}
	return err
}

var dialect = sqlstore.Dialect{
	Name:      "postgres",
	Numbered:  true,
	TxOptions: &sql.TxOptions{Isolation: sql.LevelSerializable},
	Retries:   Retries,
	Classify:  classify,
}

func classify(err error) sqlstore.ErrClass {
	var e *pgconn.PgError
	if !errors.As(err, &e) {
		return sqlstore.Other
	}
	switch e.Code {
	case "23505": // unique_violation
		return sqlstore.Unique
	case "23503": // foreign_key_violation
		return sqlstore.ForeignKey
	case "40001", "40P01": // serialization_failure, deadlock_detected
		return sqlstore.Retry
	}
	return sqlstore.Other
}
