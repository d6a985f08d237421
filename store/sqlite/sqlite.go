// Package sqlite is the embedded store: cloud.Store on SQLite through the
// pure-Go modernc.org/sqlite driver, so the single gpucloud binary needs no
// database server and builds with CGO_ENABLED=0.
//
// SQLite allows one writer at a time. Every transaction may write (Tx cannot
// know in advance), so the store runs one transaction at a time: the pool has
// a single connection, and transactions begin with BEGIN IMMEDIATE, which
// takes the write lock up front. A deferred BEGIN could instead fail halfway
// with SQLITE_BUSY when a read transaction tries to become a write one,
// which no waiting fixes; with IMMEDIATE, other processes using the same file
// wait up to the busy timeout instead. WAL journaling lets such processes
// read while the server writes.
//
// Times are fixed-width UTC text with microseconds (see store/sqlstore), so
// they read back equal to t.Truncate(time.Microsecond).
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/store/migrations"
	"github.com/gpucloud/gpucloud/store/sqlstore"
)

// Store is the SQLite store.
type Store struct {
	*sqlstore.Store
}

var _ cloud.Store = (*Store)(nil)

// BusyTimeoutMS is how long a transaction waits for another process's write
// lock on the same database file before it fails.
const BusyTimeoutMS = 10000

// Open opens (creating if needed) the database at path and applies pending
// migrations. path "" or ":memory:" opens a private in-memory database, gone
// when the store is closed; tests use it. A path may carry extra driver
// parameters after "?".
func Open(ctx context.Context, path string) (*Store, error) {
	memory := path == "" || path == ":memory:"
	if memory {
		path = ":memory:"
	}
	params := []string{
		"_txlock=immediate",
		fmt.Sprintf("_pragma=busy_timeout(%d)", BusyTimeoutMS),
		"_pragma=foreign_keys(1)",
	}
	if !memory {
		params = append(params, "_pragma=journal_mode(WAL)")
	}
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	db, err := sql.Open("sqlite", path+sep+strings.Join(params, "&"))
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	// One connection: it serializes transactions (see the package comment),
	// and an in-memory database exists only inside its connection, so the
	// pool must neither open a second one nor close the first.
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	if err := check(ctx, db, memory); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	if _, err := migrations.Up(ctx, db, "sqlite"); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	return &Store{sqlstore.New(db, dialect)}, nil
}

// check verifies that the connection settings took effect: a pragma that
// SQLite does not know is silently ignored, and a store without foreign keys
// or WAL would still work, just not as documented.
func check(ctx context.Context, db *sql.DB, memory bool) error {
	var fk int
	if err := db.QueryRowContext(ctx, "PRAGMA foreign_keys").Scan(&fk); err != nil {
		return err
	}
	if fk != 1 {
		return errors.New("foreign keys are not enabled")
	}
	if memory {
		return nil
	}
	var mode string
	if err := db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return err
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("journal mode is %q, not WAL", mode)
	}
	return nil
}

var dialect = sqlstore.Dialect{
	Name:     "sqlite",
	TextTime: true,
	// Transactions do not race inside one process; a retry only helps when
	// another process held the file longer than the busy timeout.
	Retries:  5,
	Classify: classify,
	// modernc.org/sqlite parses a query again on every call that is not
	// made on a prepared statement.
	Prepare: true,
}

func classify(err error) sqlstore.ErrClass {
	var e *sqlite.Error
	if !errors.As(err, &e) {
		return sqlstore.Other
	}
	switch e.Code() {
	case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
		return sqlstore.Unique
	case sqlite3.SQLITE_CONSTRAINT_FOREIGNKEY:
		return sqlstore.ForeignKey
	}
	// Extended result codes keep the primary code in the low byte.
	switch e.Code() & 0xff {
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
		return sqlstore.Retry
	}
	return sqlstore.Other
}
