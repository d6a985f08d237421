package sqlstore

import (
	"context"
	"database/sql"
	"sync"
	"sync/atomic"
	"time"
)

// maxStmts bounds how many distinct statements a store keeps prepared. The
// queries of this package are a fixed set, save those that list a variable
// number of values (IN (?, ?, ...)); past the bound, new ones run
// unprepared, as before, rather than grow the cache without end.
const maxStmts = 512

// stmtCache holds a store's prepared statements by query text (as sent to
// the driver, after rebind), for dialects with Prepare set.
//
// A statement is prepared on the database (database/sql's *sql.Stmt), and a
// transaction runs it through Tx.StmtContext, which reuses the driver
// statement already prepared on the transaction's connection, or prepares it
// there once: statements are parsed once per connection instead of once per
// call. A statement cannot be prepared on the database while a transaction
// holds the connection (SQLite has just one), so a query seen for the first
// time runs unprepared, and Tx prepares it after the transaction ends.
//
// Only a query missed twice is prepared: the scheduler's batched writes
// have texts that vary with the batch's size (VALUES (...), (...)), most
// of them seen once, and preparing those would only add work.
type stmtCache struct {
	mu sync.RWMutex
	m  map[string]*sql.Stmt
	// seen holds the queries missed once (at most maxSeen; then it starts
	// over).
	seen map[string]bool
}

// maxSeen bounds stmtCache.seen.
const maxSeen = 4096

// get returns the prepared statement for query, or nil.
func (c *stmtCache) get(query string) *sql.Stmt {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.m[query]
}

// prepare prepares the queries not yet in the cache that were missed
// before, while there is room.
// A query that fails to prepare is left out; it runs unprepared, and its
// error, if it has one, shows there.
func (c *stmtCache) prepare(ctx context.Context, db *sql.DB, queries []string) {
	for _, q := range queries {
		c.mu.Lock()
		_, have := c.m[q]
		full := len(c.m) >= maxStmts
		again := c.seen[q]
		if !have && !full && !again {
			if c.seen == nil || len(c.seen) >= maxSeen {
				c.seen = make(map[string]bool)
			}
			c.seen[q] = true
		}
		c.mu.Unlock()
		if have || full || !again {
			continue
		}
		st, err := db.PrepareContext(ctx, q)
		if err != nil {
			continue
		}
		c.mu.Lock()
		if _, have := c.m[q]; have || len(c.m) >= maxStmts {
			c.mu.Unlock()
			st.Close()
			continue
		}
		if c.m == nil {
			c.m = make(map[string]*sql.Stmt)
		}
		c.m[q] = st
		delete(c.seen, q)
		c.mu.Unlock()
	}
}

// len is how many statements are prepared.
func (c *stmtCache) len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.m)
}

// close closes the prepared statements.
func (c *stmtCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, st := range c.m {
		st.Close()
	}
	c.m = nil
}

// stmt returns the store's prepared statement for query (rebound) bound to
// this transaction, or nil when the query is to run as text: the dialect
// does not prepare, or the query has no statement yet (then it is noted in
// t.missed, for Tx to prepare). Either answer holds for the rest of the
// transaction.
func (t *tx) stmt(ctx context.Context, query string) *sql.Stmt {
	if !t.s.d.Prepare {
		return nil
	}
	if st, seen := t.stmts[query]; seen {
		return st
	}
	if t.stmts == nil {
		t.stmts = make(map[string]*sql.Stmt)
	}
	ps := t.s.stmts.get(query)
	if ps == nil {
		t.stmts[query] = nil
		t.missed = append(t.missed, query)
		return nil
	}
	// The statement bound to the transaction is closed with it; the
	// driver statement stays prepared on the connection.
	st := t.q.StmtContext(ctx, ps)
	t.stmts[query] = st
	return st
}

// execSQL runs a statement that returns no rows.
func (t *tx) execSQL(ctx context.Context, query string, args []any) (sql.Result, error) {
	t.s.counts.statements.Add(1)
	query = t.s.d.rebind(query)
	if st := t.stmt(ctx, query); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return t.q.ExecContext(ctx, query, args...)
}

// query runs a query.
func (t *tx) query(ctx context.Context, query string, args []any) (*sql.Rows, error) {
	t.s.counts.statements.Add(1)
	query = t.s.d.rebind(query)
	if st := t.stmt(ctx, query); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return t.q.QueryContext(ctx, query, args...)
}

// queryRow runs a query for at most one row.
func (t *tx) queryRow(ctx context.Context, query string, args []any) *sql.Row {
	t.s.counts.statements.Add(1)
	query = t.s.d.rebind(query)
	if st := t.stmt(ctx, query); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return t.q.QueryRowContext(ctx, query, args...)
}

// Counts are how many transactions and statements a store has run since it
// was opened; the differences between two readings tell what some work cost
// (the benchmarks and docs/BENCHMARKS.md use them). On PostgreSQL each is
// one round trip to the server, and a statement that the connection has not
// prepared yet costs one more (pgx prepares it first).
type Counts struct {
	// Begins counts transactions begun, retries included.
	Begins int64
	// Commits and Rollbacks count how they ended; a commit that failed
	// counts too.
	Commits, Rollbacks int64
	// Statements counts statements sent within transactions.
	Statements int64
	// Prepared is how many statements the store keeps prepared for reuse
	// now (see Dialect.Prepare; 0 on PostgreSQL, whose driver keeps its
	// own per connection).
	Prepared int64
	// Open is the time transactions held their connections, summed: from
	// the begin's answer to the commit's or rollback's. On SQLite, whose
	// one connection runs one transaction at a time, Open over a stretch of
	// wall time is how busy that connection was.
	Open time.Duration
}

// Sub returns c - o, the counts between two readings.
func (c Counts) Sub(o Counts) Counts {
	return Counts{
		Begins:     c.Begins - o.Begins,
		Commits:    c.Commits - o.Commits,
		Rollbacks:  c.Rollbacks - o.Rollbacks,
		Statements: c.Statements - o.Statements,
		Prepared:   c.Prepared - o.Prepared,
		Open:       c.Open - o.Open,
	}
}

type counters struct {
	begins, commits, rollbacks, statements atomic.Int64
	open                                   atomic.Int64 // nanoseconds
}

// Counts returns the store's counts so far.
func (s *Store) Counts() Counts {
	return Counts{
		Begins:     s.counts.begins.Load(),
		Commits:    s.counts.commits.Load(),
		Rollbacks:  s.counts.rollbacks.Load(),
		Statements: s.counts.statements.Load(),
		Prepared:   int64(s.stmts.len()),
		Open:       time.Duration(s.counts.open.Load()),
	}
}
