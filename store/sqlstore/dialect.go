// Package sqlstore implements cloud.Store over database/sql for the two SQL
// backends, store/sqlite and store/postgres. It is their shared helper, not
// an API: everything that differs between the databases is in a Dialect
// value and in the per-dialect migrations (store/migrations), so that one
// implementation of every query serves both and they cannot drift apart.
//
// Times are stored in UTC with microsecond precision (PostgreSQL's
// timestamptz precision; SQLite stores fixed-width text). Writes normalize
// the caller's struct in place to exactly what was stored, so a value read
// back is reflect.DeepEqual to the one written, and equal (time.Time.Equal)
// to the original time truncated with t.Truncate(time.Microsecond).
package sqlstore

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ErrClass is what a driver error means to the store.
type ErrClass int

const (
	// Other is any error without a special meaning: Internal.
	Other ErrClass = iota
	// Unique is a unique or primary key violation: Conflict.
	Unique
	// ForeignKey is a reference to a missing row: Conflict.
	ForeignKey
	// Retry is a serialization failure or deadlock (or SQLite's BUSY): the
	// transaction lost a race and is run again.
	Retry
)

// Dialect is what differs between the SQL backends at run time. The rest of
// the differences live in the DDL of store/migrations: column types (BLOB vs
// bytea, TEXT vs timestamptz and json, AUTOINCREMENT vs bigserial). Two
// things one might expect here are not needed: both databases accept the
// same upsert (INSERT ... ON CONFLICT (col) DO UPDATE SET c = excluded.c,
// and ON CONFLICT DO NOTHING), and both drivers take []byte for blobs.
type Dialect struct {
	// Name is what Store.Dialect returns: "sqlite" or "postgres".
	Name string
	// Numbered selects PostgreSQL's $1, $2, ... placeholders; queries are
	// written with ? and rewritten once per call.
	Numbered bool
	// TextTime stores times as fixed-width UTC text (SQLite, which has no
	// time type) instead of passing time.Time to the driver (PostgreSQL).
	TextTime bool
	// TxOptions are passed to BeginTx (PostgreSQL: serializable).
	TxOptions *sql.TxOptions
	// Retries is how many times Tx runs fn again after a Retry error before
	// it gives up with a Conflict.
	Retries int
	// Classify tells what a driver error means.
	Classify func(error) ErrClass
	// Prepare keeps each statement prepared on the connection after its
	// first run and reuses it (see stmtCache), for drivers that otherwise
	// parse every query again: SQLite's. pgx needs none of it: its
	// database/sql driver already keeps a cache of prepared statements on
	// each connection (QueryExecModeCacheStatement, 512 statements).
	Prepare bool
}

// timeLayout is the text form of a time for SQLite: fixed width, so that
// string order is time order, and microseconds, so that both backends keep
// the same precision.
const timeLayout = "2006-01-02T15:04:05.000000Z"

// normTime is what the store keeps of a time: UTC, whole microseconds.
func normTime(t time.Time) time.Time {
	return t.UTC().Truncate(time.Microsecond)
}

// rebind rewrites ? placeholders for dialects that number them. No query of
// this package has a ? inside a string literal, so a plain scan is enough.
func (d *Dialect) rebind(q string) string {
	if !d.Numbered || !strings.Contains(q, "?") {
		return q
	}
	var b strings.Builder
	b.Grow(len(q) + 16)
	n := 0
	for i := 0; i < len(q); i++ {
		if q[i] == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(q[i])
	}
	return b.String()
}

// timeArg is the driver argument for a time that was already normalized.
func (d *Dialect) timeArg(t time.Time) any {
	if d.TextTime {
		return t.Format(timeLayout)
	}
	return t
}

// nullTimeArg is timeArg for optional times; nil is SQL NULL.
func (d *Dialect) nullTimeArg(t *time.Time) any {
	if t == nil {
		return nil
	}
	return d.timeArg(*t)
}

// timeCol scans a time column written by either dialect into *t as UTC.
type timeCol struct{ t *time.Time }

func (c timeCol) Scan(src any) error {
	t, err := parseTime(src)
	if err != nil {
		return err
	}
	*c.t = t
	return nil
}

// nullTimeCol scans an optional time column; NULL gives nil.
type nullTimeCol struct{ t **time.Time }

func (c nullTimeCol) Scan(src any) error {
	if src == nil {
		*c.t = nil
		return nil
	}
	t, err := parseTime(src)
	if err != nil {
		return err
	}
	*c.t = &t
	return nil
}

func parseTime(src any) (time.Time, error) {
	switch v := src.(type) {
	case time.Time:
		return v.UTC(), nil
	case string:
		return parseTimeText(v)
	case []byte:
		return parseTimeText(string(v))
	}
	return time.Time{}, fmt.Errorf("sqlstore: cannot scan %T into a time", src)
}

func parseTimeText(s string) (time.Time, error) {
	t, err := time.Parse(timeLayout, s)
	if err != nil {
		// Accept any RFC 3339 time, for rows written by hand.
		t, err = time.Parse(time.RFC3339Nano, s)
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("sqlstore: bad time %q: %w", s, err)
	}
	return t.UTC(), nil
}

// jsonArg encodes v as JSON text. A nil slice or map is stored as "null"
// and an empty one as "[]" or "{}", so both read back exactly as written.
func jsonArg(field string, v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", invalidf("%s: %v", field, err)
	}
	return string(b), nil
}

// jsonCol scans JSON text into v (a pointer); NULL leaves v as it is.
type jsonCol struct{ v any }

func (c jsonCol) Scan(src any) error {
	var b []byte
	switch s := src.(type) {
	case nil:
		return nil
	case string:
		b = []byte(s)
	case []byte:
		b = s
	default:
		return fmt.Errorf("sqlstore: cannot scan %T as JSON", src)
	}
	return json.Unmarshal(b, c.v)
}

// rawCol scans a JSON column into a json.RawMessage without reformatting;
// NULL gives nil. It copies, because drivers may reuse the source bytes.
type rawCol struct{ v *json.RawMessage }

func (c rawCol) Scan(src any) error {
	switch s := src.(type) {
	case nil:
		*c.v = nil
	case string:
		*c.v = json.RawMessage(s)
	case []byte:
		*c.v = append(json.RawMessage(nil), s...)
	default:
		return fmt.Errorf("sqlstore: cannot scan %T as JSON", src)
	}
	return nil
}

// nullStr maps "" to SQL NULL, for optional references (a volume's
// instance) whose foreign key must not point at an empty ID.
func nullStr(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// strCol scans a nullable text column; NULL gives "".
type strCol struct{ s *string }

func (c strCol) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*c.s = ""
	case string:
		*c.s = v
	case []byte:
		*c.s = string(v)
	default:
		return fmt.Errorf("sqlstore: cannot scan %T as text", src)
	}
	return nil
}
