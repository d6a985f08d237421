// Package pgtest gives tests a fresh PostgreSQL schema on the server named
// by GPUCLOUD_TEST_POSTGRES_URL (CI starts one with .ci/postgres.sh), and
// skips them, saying so, when none is configured.
package pgtest

import (
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"strings"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
)

// URL returns a connection URL whose connections use a new, uniquely named
// schema, dropped when the test ends. Its connections also carry the
// schema's name as their application_name, so that a test can find its
// own sessions in pg_stat_activity (and terminate them) without touching
// those of tests running beside it on the same server.
func URL(t testing.TB) string {
	t.Helper()
	base := os.Getenv("GPUCLOUD_TEST_POSTGRES_URL")
	if base == "" {
		t.Skip("GPUCLOUD_TEST_POSTGRES_URL not set: PostgreSQL tests skipped (CI sets it; see .ci/postgres.sh)")
	}
	admin, err := sql.Open("pgx", base)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 6)
	rand.Read(b)
	schema := "gpucloud_test_" + hex.EncodeToString(b)
	if _, err := admin.Exec("CREATE SCHEMA " + schema); err != nil {
		admin.Close()
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		if _, err := admin.Exec("DROP SCHEMA " + schema + " CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
		admin.Close()
	})
	if !strings.HasPrefix(base, "postgres://") && !strings.HasPrefix(base, "postgresql://") {
		return base + " search_path=" + schema + " application_name=" + schema
	}
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("GPUCLOUD_TEST_POSTGRES_URL: %v", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	q.Set("application_name", schema)
	u.RawQuery = q.Encode()
	return u.String()
}
