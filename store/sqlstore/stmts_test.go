package sqlstore_test

import (
	"context"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/store/pgtest"
	"github.com/gpucloud/gpucloud/store/postgres"
	"github.com/gpucloud/gpucloud/store/sqlite"
	"github.com/gpucloud/gpucloud/store/sqlstore"
)

// getHost is a transaction that runs one statement, the same each time.
func getHost(ctx context.Context, st cloud.Store) error {
	return st.Tx(ctx, func(tx cloud.Tx) error {
		_, err := tx.GetHost(ctx, "h-none")
		if cloud.ErrorCode(err) == cloud.NotFound {
			return nil
		}
		return err
	})
}

// TestStatementsReusedSQLite: on SQLite the store prepares a statement once,
// after the second transaction that runs it, and the later ones reuse it;
// the counts tell one statement and one transaction per call.
func TestStatementsReusedSQLite(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	start := st.Counts()
	for i, want := range []sqlstore.Counts{
		{Begins: 1, Commits: 1, Statements: 1, Prepared: 0},
		{Begins: 2, Commits: 2, Statements: 2, Prepared: 1},
		{Begins: 3, Commits: 3, Statements: 3, Prepared: 1},
		{Begins: 4, Commits: 4, Statements: 4, Prepared: 1},
	} {
		if err := getHost(ctx, st); err != nil {
			t.Fatal(err)
		}
		got := st.Counts().Sub(start)
		if got.Open <= 0 {
			t.Errorf("after transaction %d: transactions open for %s", i+1, got.Open)
		}
		if got.Open = 0; got != want {
			t.Errorf("after transaction %d: counts %+v, want %+v", i+1, got, want)
		}
	}
}

// TestStatementsReusedPostgres: the store does not prepare statements on
// PostgreSQL, because pgx's database/sql driver already does: each
// connection prepares a query the first time it runs it and reuses that
// statement afterwards (pgx's QueryExecModeCacheStatement, its default).
// PostgreSQL's pg_prepared_statements shows it on the one connection.
func TestStatementsReusedPostgres(t *testing.T) {
	ctx := context.Background()
	st, err := postgres.Open(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	st.DB().SetMaxOpenConns(1)
	const runs = 3
	for i := 0; i < runs; i++ {
		if err := getHost(ctx, st); err != nil {
			t.Fatal(err)
		}
	}
	if got := st.Counts().Prepared; got != 0 {
		t.Errorf("the store prepared %d statements on PostgreSQL, want 0 (pgx does)", got)
	}
	rows, err := st.DB().QueryContext(ctx,
		"SELECT name, statement, generic_plans + custom_plans FROM pg_prepared_statements")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	found := 0
	for rows.Next() {
		var name, stmt string
		var plans int64
		if err := rows.Scan(&name, &stmt, &plans); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(stmt, "FROM hosts WHERE id = $1") {
			continue
		}
		found++
		if plans != runs {
			t.Errorf("prepared statement %s ran %d times, want %d", name, plans, runs)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if found != 1 {
		t.Errorf("the connection holds %d prepared statements of the query, want 1", found)
	}
}
