// Package migrations holds the schema of the SQL stores as goose migrations,
// one directory per dialect (sqlite/, postgres/), embedded in the binary so
// that a store brings its database up to date when it opens, with no files
// to ship beside the binary.
//
// A new migration is a new file NNNNN_what.sql in both directories (goose
// format: "-- +goose Up" / "-- +goose Down"); a released migration is never
// edited, because databases that already applied it would not run it again.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"

	"github.com/pressly/goose/v3"
)

//go:embed sqlite/*.sql postgres/*.sql
var files embed.FS

// Dialects maps the store's dialect names to goose's.
var dialects = map[string]goose.Dialect{
	"sqlite":   goose.DialectSQLite3,
	"postgres": goose.DialectPostgres,
}

// FS returns the migrations of one dialect ("sqlite" or "postgres").
func FS(dialect string) (fs.FS, error) {
	if _, ok := dialects[dialect]; !ok {
		return nil, fmt.Errorf("migrations: unknown dialect %q", dialect)
	}
	return fs.Sub(files, dialect)
}

// Up applies the migrations of dialect that db has not applied yet and
// returns how many it applied. It does not lock: callers that may migrate
// one database from several processes at once take a lock around it (the
// PostgreSQL store holds an advisory lock).
func Up(ctx context.Context, db *sql.DB, dialect string) (int, error) {
	fsys, err := FS(dialect)
	if err != nil {
		return 0, err
	}
	// The provider is local (no goose globals), ignores Go migrations that
	// other packages might register globally, and stays quiet: a store that
	// opens should not write to the process's log.
	p, err := goose.NewProvider(dialects[dialect], db, fsys,
		goose.WithDisableGlobalRegistry(true),
		goose.WithLogger(goose.NopLogger()),
	)
	if err != nil {
		return 0, fmt.Errorf("migrations: %w", err)
	}
	res, err := p.Up(ctx)
	if err != nil {
		return len(res), fmt.Errorf("migrations: %w", err)
	}
	return len(res), nil
}
