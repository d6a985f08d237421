package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
)

// Store implements cloud.Store over a *sql.DB whose schema the dialect's
// migrations created. The backends embed it.
type Store struct {
	db *sql.DB
	d  Dialect
	// gate, when set, holds one slot per transaction running (see
	// LimitTx), and fleetGate likewise for the fleet's lane
	// (cloud.LaneFleet).
	gate      atomic.Pointer[chan struct{}]
	fleetGate atomic.Pointer[chan struct{}]
	// waiting counts the transactions waiting at either gate.
	waiting atomic.Int64
	// stmts holds the prepared statements when the dialect reuses them.
	stmts stmtCache
	// counts is what Counts returns.
	counts counters
}

// New returns a store over db. It takes ownership: Close closes db. When
// db caps its open connections, at most that many transactions run at once
// and the others wait in arrival order (see LimitTx).
func New(db *sql.DB, d Dialect) *Store {
	if d.Classify == nil {
		d.Classify = func(error) ErrClass { return Other }
	}
	s := &Store{db: db, d: d}
	s.LimitTx(db.Stats().MaxOpenConnections)
	return s
}

// LimitTx lets at most n transactions run at once (n <= 0: any number);
// the others wait their turn in arrival order, their retries included. It
// may be called at any time; transactions already waiting or running keep
// the limit they found.
//
// Limiting helps in two ways. Transactions that wait for a connection of a
// capped pool are served in random order (database/sql hands a freed
// connection to a random waiter), so that under load a few wait many times
// longer than the rest; waiting here first keeps the order. And on
// PostgreSQL, serializable transactions that run together abort each other
// for rows they never shared, because its predicate locks cover whole index
// pages: a few at a time commit more than many.
//
// The fleet's lane (transactions whose context asks for cloud.LaneFleet:
// the agents') has turns of its own besides, FleetTx(n) of them, so that
// a heartbeat never waits behind a queue of tenants' creates nor a create
// behind the fleet's. Where the database has one connection (SQLite) the
// two lanes take turns at it: each waits for at most the other's
// transaction in flight.
func (s *Store) LimitTx(n int) {
	if n <= 0 {
		s.gate.Store(nil)
		s.fleetGate.Store(nil)
		return
	}
	g := make(chan struct{}, n)
	f := make(chan struct{}, FleetTx(n))
	s.gate.Store(&g)
	s.fleetGate.Store(&f)
}

// FleetTx is how many transactions of the fleet's lane run at once beside
// n of the others: as many. (A quarter as many, two on PostgreSQL, made a
// queue of the lane itself at 5,000 agents: docs/BENCHMARKS.md, "Fleet
// scale".)
func FleetTx(n int) int { return n }

// Waiting is how many transactions wait for their turn (see LimitTx).
func (s *Store) Waiting() int { return int(s.waiting.Load()) }

// DB returns the underlying database, for tests and administration.
func (s *Store) DB() *sql.DB { return s.db }

// Dialect names the backend.
func (s *Store) Dialect() string { return s.d.Name }

// Close closes the database.
func (s *Store) Close() error {
	s.stmts.close()
	return s.db.Close()
}

// Tx runs fn in one transaction, as cloud.Store documents. When a statement
// or the commit loses a serialization race, fn is run again (after a short
// random wait, so that the racers do not collide again in lockstep) up to
// Dialect.Retries times, whatever fn returned: a transaction that lost a race
// is already doomed, and the retry is what makes it succeed. Any other error
// of fn is returned as is. Because fn may run more than once, it must not
// have effects outside the transaction (send requests, change shared
// memory) that a rerun would repeat. fn must not call Tx itself either: on
// SQLite the inner call would wait forever for the one connection the outer
// one holds.
func (s *Store) Tx(ctx context.Context, fn func(cloud.Tx) error) error {
	gate := &s.gate
	if cloud.LaneOf(ctx) == cloud.LaneFleet {
		gate = &s.fleetGate
	}
	if g := gate.Load(); g != nil {
		// Blocked senders on a channel are served first come, first
		// served.
		s.waiting.Add(1)
		select {
		case *g <- struct{}{}:
			s.waiting.Add(-1)
		case <-ctx.Done():
			s.waiting.Add(-1)
			return ctx.Err()
		}
		defer func() { <-*g }()
	}
	// Statements that ran unprepared are prepared once the transaction has
	// given back its connection (SQLite's only one) and before its turn at
	// the gate ends, so that later transactions reuse them.
	var missed []string
	if s.d.Prepare {
		defer func() { s.stmts.prepare(ctx, s.db, missed) }()
	}
	var lost error
	for attempt := 0; attempt <= s.d.Retries; attempt++ {
		if attempt > 0 {
			if err := sleep(ctx, backoff(attempt)); err != nil {
				return err
			}
		}
		err, retry := s.try(ctx, fn, &missed)
		if !retry {
			return err
		}
		lost = err
	}
	return &cloud.Error{
		Code: cloud.Conflict,
		Message: fmt.Sprintf("transaction lost %d races with concurrent transactions; try again (last: %v)",
			s.d.Retries+1, lost),
	}
}

// try runs fn once. retry reports that the transaction lost a race. The
// statements that fn ran unprepared are appended to *missed.
func (s *Store) try(ctx context.Context, fn func(cloud.Tx) error, missed *[]string) (err error, retry bool) {
	opts := s.d.TxOptions
	if cloud.IsolationOf(ctx) == cloud.ReadCommitted && opts != nil && opts.Isolation > sql.LevelReadCommitted {
		opts = &sql.TxOptions{Isolation: sql.LevelReadCommitted}
	}
	s.counts.begins.Add(1)
	sqlTx, err := s.db.BeginTx(ctx, opts)
	if err != nil {
		return internal("begin transaction", err), s.d.Classify(err) == Retry
	}
	t := &tx{s: s, q: sqlTx}
	committed := false
	opened := time.Now()
	defer func() {
		defer func() { s.counts.open.Add(int64(time.Since(opened))) }()
		t.done = true
		*missed = append(*missed, t.missed...)
		if !committed {
			s.counts.rollbacks.Add(1)
			// The error of a rollback is of no use: the transaction is
			// abandoned either way, and the database discards it when the
			// connection goes back to the pool or is closed.
			_ = sqlTx.Rollback()
		}
	}()
	ferr := fn(t)
	t.done = true
	if t.lost {
		return ferr, true
	}
	if ferr != nil {
		return ferr, false
	}
	s.counts.commits.Add(1)
	if err := sqlTx.Commit(); err != nil {
		// Commit also releases the transaction when it fails.
		committed = true
		if s.d.Classify(err) == Retry {
			return internal("commit", err), true
		}
		return internal("commit", err), false
	}
	committed = true
	return nil, false
}

// backoff is the wait before retry attempt n (1, 2, ...): a random time up
// to 5ms doubled per attempt (5, 10, 20, 40, 80ms), so that transactions that
// keep colliding spread out.
func backoff(attempt int) time.Duration {
	ceiling := 5 * time.Millisecond << (attempt - 1)
	return ceiling/4 + rand.N(ceiling*3/4)
}

func sleep(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// dbError is a store error with the driver error that caused it. The cloud
// code is found by errors.As through Unwrap, and the cause stays reachable
// for errors.Is (context.Canceled, for example).
type dbError struct {
	err   *cloud.Error
	cause error
}

func (e *dbError) Error() string   { return e.err.Error() }
func (e *dbError) Unwrap() []error { return []error{e.err, e.cause} }

// internal wraps an unexpected driver error.
func internal(op string, cause error) error {
	return &dbError{
		err:   &cloud.Error{Code: cloud.Internal, Message: "store: " + op + ": " + cause.Error()},
		cause: cause,
	}
}

// notFoundf, conflictf and invalidf build the plain *cloud.Error values of
// expected outcomes, which have no driver error behind them.
func notFoundf(format string, args ...any) error {
	return cloud.Errorf(cloud.NotFound, format, args...)
}

func conflictf(format string, args ...any) error {
	return cloud.Errorf(cloud.Conflict, format, args...)
}

func invalidf(format string, args ...any) error {
	return cloud.Errorf(cloud.Invalid, format, args...)
}

// tx implements cloud.Tx.
type tx struct {
	s *Store
	q *sql.Tx
	// done is set when fn returns; the tx must not be used after that.
	done bool
	// lost is set when a statement lost a serialization race: the
	// transaction is doomed (PostgreSQL aborted it), and Tx runs fn again.
	lost bool
	// stmts are the store's prepared statements bound to this transaction,
	// by query text (nil: it runs unprepared); missed are the queries that
	// ran unprepared.
	stmts  map[string]*sql.Stmt
	missed []string
}

var errDone = &cloud.Error{Code: cloud.Internal, Message: "store: transaction used after its function returned"}

// check refuses use of a finished transaction, which database/sql would
// otherwise report as a puzzling "transaction has already been committed".
func (t *tx) check() error {
	if t.done {
		return errDone
	}
	return nil
}

// fail turns a driver error into a store error and remembers a lost race.
func (t *tx) fail(op string, err error) error {
	switch t.s.d.Classify(err) {
	case Retry:
		t.lost = true
		return &dbError{
			err: &cloud.Error{Code: cloud.Conflict,
				Message: "store: " + op + ": lost a race with a concurrent transaction; the transaction is retried"},
			cause: err,
		}
	case Unique:
		return &dbError{err: cloud.Errorf(cloud.Conflict, "%s: already exists", op), cause: err}
	case ForeignKey:
		return &dbError{err: cloud.Errorf(cloud.Conflict, "%s: refers to a missing row", op), cause: err}
	}
	return internal(op, err)
}

func (t *tx) exec(ctx context.Context, op, query string, args ...any) (sql.Result, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	res, err := t.execSQL(ctx, query, args)
	if err != nil {
		return nil, t.fail(op, err)
	}
	return res, nil
}

// execN runs a statement and returns how many rows it changed.
func (t *tx) execN(ctx context.Context, op, query string, args ...any) (int64, error) {
	res, err := t.exec(ctx, op, query, args...)
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, t.fail(op, err)
	}
	return n, nil
}

// get runs a query for one row and scans it into dest; no row gives the
// error missing returns.
func (t *tx) get(ctx context.Context, op string, missing func() error, query string, args []any, dest ...any) error {
	if err := t.check(); err != nil {
		return err
	}
	err := t.queryRow(ctx, query, args).Scan(dest...)
	if errors.Is(err, sql.ErrNoRows) {
		return missing()
	}
	if err != nil {
		return t.fail(op, err)
	}
	return nil
}

// exists reports whether a query returns a row.
func (t *tx) exists(ctx context.Context, op, query string, args ...any) (bool, error) {
	var one int
	found := true
	err := t.get(ctx, op, func() error { found = false; return nil }, query, args, &one)
	return found, err
}

// scanner is a *sql.Row or *sql.Rows.
type scanner interface{ Scan(dest ...any) error }

// list runs a query and scans each row with scan. It returns an empty,
// non-nil slice when nothing matches, so that API responses show [] rather
// than null.
func list[T any](ctx context.Context, t *tx, op, query string, args []any, scan func(scanner) (*T, error)) ([]*T, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	rows, err := t.query(ctx, query, args)
	if err != nil {
		return nil, t.fail(op, err)
	}
	defer rows.Close()
	out := []*T{}
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, t.fail(op, err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, t.fail(op, err)
	}
	return out, nil
}

// one runs a query for one row and scans it with scan.
func one[T any](ctx context.Context, t *tx, op string, missing func() error, query string, args []any, scan func(scanner) (*T, error)) (*T, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	v, err := scan(t.queryRow(ctx, query, args))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, missing()
	}
	if err != nil {
		return nil, t.fail(op, err)
	}
	return v, nil
}

// mustExist returns NotFound unless the row that a new row refers to exists.
// Checking first, instead of letting the foreign key fail, gives a clear
// message and keeps the transaction usable: PostgreSQL aborts a transaction
// on any failed statement, SQLite does not, and callers must see one
// behaviour.
func (t *tx) mustExist(ctx context.Context, table, what, id string) error {
	ok, err := t.exists(ctx, "find "+what+" "+id, "SELECT 1 FROM "+table+" WHERE id = ?", id)
	if err != nil {
		return err
	}
	if !ok {
		return notFoundf("%s %s not found", what, id)
	}
	return nil
}

// page appends the AfterID and Limit clauses of a list query.
func page(q string, args []any, limit int) (string, []any, error) {
	return pageOrdered(q, args, limit, "id")
}

// pageOrdered is page in the order given (an ORDER BY list).
func pageOrdered(q string, args []any, limit int, order string) (string, []any, error) {
	if limit < 0 {
		return "", nil, invalidf("limit %d is negative", limit)
	}
	q += " ORDER BY " + order
	if limit > 0 {
		q += " LIMIT ?"
		args = append(args, limit)
	}
	return q, args, nil
}

// where joins conditions into a WHERE clause.
func where(conds []string) string {
	if len(conds) == 0 {
		return ""
	}
	return " WHERE " + strings.Join(conds, " AND ")
}
