package postgres

import (
	"context"
	"crypto/sha256"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
)

// MaxPayload bounds a notification's payload: PostgreSQL refuses one of
// 8000 bytes or more.
const MaxPayload = 7900

// Notifier carries short messages among the replicas of one cloud over
// PostgreSQL's LISTEN/NOTIFY. Its channel is named after the topic and
// the store's schema, so that clouds (or tests) that share a database in
// schemas of their own never hear each other. A notification is
// delivered to every listener, the sender's own included, and is lost
// for a listener that is not connected when it is sent: listeners learn
// of their connection's ups and downs to make up for it.
type Notifier struct {
	s       *Store
	channel string
}

// Notifier returns the notifier of topic (lower-case letters and
// underscores) in this store's schema.
func (s *Store) Notifier(ctx context.Context, topic string) (*Notifier, error) {
	for _, r := range topic {
		if (r < 'a' || r > 'z') && r != '_' {
			return nil, fmt.Errorf("postgres: notifier topic %q: want lower-case letters and underscores", topic)
		}
	}
	var schema string
	if err := s.DB().QueryRowContext(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		return nil, fmt.Errorf("postgres: the schema of a notifier: %w", err)
	}
	sum := sha256.Sum256([]byte(schema))
	// At most 63 bytes, as every identifier.
	return &Notifier{s: s, channel: "gpucloud_" + topic + "_" + hex.EncodeToString(sum[:8])}, nil
}

// Channel is the channel's name.
func (n *Notifier) Channel() string { return n.channel }

// Notify sends payload (at most MaxPayload bytes) to every listener of
// the channel.
func (n *Notifier) Notify(ctx context.Context, payload string) error {
	if len(payload) > MaxPayload {
		return fmt.Errorf("postgres: a notification of %d bytes, over %d", len(payload), MaxPayload)
	}
	_, err := n.s.DB().ExecContext(ctx, `SELECT pg_notify($1, $2)`, n.channel, payload)
	return err
}

// Listen hands every notification of the channel to fn, in order, until
// ctx ends, on a connection of its own that it opens again (after 0.5 to
// 1 s, then up to 30 s apart while it fails) whenever it breaks. up is
// told true once the connection listens and false when it broke: what was
// sent in between is lost. fn and up run on Listen's goroutine.
func (n *Notifier) Listen(ctx context.Context, up func(bool), fn func(payload string)) {
	backoff := 500 * time.Millisecond
	for ctx.Err() == nil {
		listened, err := n.listenOnce(ctx, up, fn)
		if ctx.Err() != nil {
			return
		}
		if listened {
			backoff = 500 * time.Millisecond
		}
		_ = err // the caller learns of it through up(false); the next try says more
		wait := backoff + rand.N(backoff)
		backoff = min(2*backoff, 30*time.Second)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// listenOnce listens on one connection until it breaks or ctx ends; it
// answers whether the connection listened at all.
func (n *Notifier) listenOnce(ctx context.Context, up func(bool), fn func(string)) (listened bool, err error) {
	conn, err := n.s.DB().Conn(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	err = conn.Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("postgres: a connection of %T, not pgx's", dc)
		}
		pc := sc.Conn()
		if _, err := pc.Exec(ctx, `LISTEN "`+n.channel+`"`); err != nil {
			return err
		}
		listened = true
		up(true)
		for {
			nt, err := pc.WaitForNotification(ctx)
			if err != nil {
				return err
			}
			fn(nt.Payload)
		}
	})
	if listened {
		up(false)
	}
	// The connection listens (or broke): never back into the pool.
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	if errors.Is(err, driver.ErrBadConn) {
		err = nil
	}
	return listened, err
}
