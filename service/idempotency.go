package service

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"

	"github.com/gpucloud/gpucloud/cloud"
)

// Idempotent creates: a create that carries an idempotency key and finds
// the key already used answers the resource the first create made, when
// the two requests agree on every field the caller sent; otherwise it is a
// Conflict whose details name the differing fields. Answering the first
// resource for a different request would hide the caller's mistake.

// KeyDiffs collects how a create that reuses an idempotency key differs
// from the create that first used it, field by field.
type KeyDiffs struct {
	fields []string
	descs  []string
}

// Add records that the resource has was in field and the request asks
// for asked, both rendered for the message (strings quoted).
func (d *KeyDiffs) Add(field, was, asked string) {
	d.fields = append(d.fields, field)
	d.descs = append(d.descs, field+" "+asked+" where it has "+was)
}

// String compares a string field.
func (d *KeyDiffs) String(field, was, asked string) {
	if was != asked {
		d.Add(field, Quote(was), Quote(asked))
	}
}

// Strings compares a list field; the order matters.
func (d *KeyDiffs) Strings(field string, was, asked []string) {
	if !slices.Equal(was, asked) {
		d.Add(field, render(was), render(asked))
	}
}

// Map compares a map field.
func (d *KeyDiffs) Map(field string, was, asked map[string]string) {
	if !maps.Equal(was, asked) {
		d.Add(field, render(was), render(asked))
	}
}

// Value compares any comparable field, rendered as JSON.
func Value[T comparable](d *KeyDiffs, field string, was, asked T) {
	if was != asked {
		d.Add(field, render(was), render(asked))
	}
}

// render shows a value in a message, as JSON cut short.
func render(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return "?"
	}
	s := string(b)
	if len(s) > 80 {
		s = s[:80] + "..."
	}
	return s
}

// Fields are the names of the differing fields, in the order compared.
func (d *KeyDiffs) Fields() []string { return d.fields }

// Err is nil when nothing differs, else the conflict of a key reused for
// a different create of what (e.g. "volume"), whose first create made
// existing. Its Details carry "existing_id" and the differing "fields".
func (d *KeyDiffs) Err(what, existing string) error {
	if len(d.fields) == 0 {
		return nil
	}
	return &cloud.Error{Code: cloud.Conflict,
		Message: "the Idempotency-Key was used for " + what + " " + existing + " with another request: " +
			strings.Join(d.descs, ", ") + "; use a new key for a new " + what,
		Details: map[string]any{"existing_id": existing, "fields": d.fields}}
}

// prior answers a keyed create's first question: did the tenant already
// make a resource with this key? find looks the key up in the store (its
// NotFound means no); when there is one, it is returned with found set and
// err is same's verdict on this request against it (nil: a retry, answered
// with the first resource; a Conflict naming the differing fields). An
// empty key finds nothing.
func prior[T any](key string, find func(key string) (*T, error), same func(*T) error) (old *T, found bool, err error) {
	if key == "" {
		return nil, false, nil
	}
	old, err = find(key)
	if cloud.IsNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return old, true, same(old)
}

// keyRace is returned from a create transaction that lost an idempotency
// race: the store found the key taken by a resource created meanwhile.
type keyRace struct{ id string }

func (k *keyRace) Error() string { return "idempotency key taken by " + k.id }

// asKeyRace turns the store's idempotency Conflict (one whose Details
// carry a string "existing_id") of a keyed create into a keyRace, so that
// the create answers the resource created first; other errors pass.
func asKeyRace(err error, key string) error {
	var ce *cloud.Error
	if key != "" && errors.As(err, &ce) && ce.Code == cloud.Conflict {
		if id, ok := ce.Details["existing_id"].(string); ok {
			return &keyRace{id: id}
		}
	}
	return err
}

// settleRace finishes a create that may have lost a race on its
// idempotency key: when err is a *keyRace, it reads, in a new
// transaction, the resource the winning call made (get) and checks it
// against this request (same); otherwise out and err pass unchanged.
func settleRace[T any](ctx context.Context, st cloud.Store, out T, err error,
	get func(tx cloud.Tx, id string) (T, error), same func(T) error) (T, error) {
	var race *keyRace
	if !errors.As(err, &race) {
		return out, err
	}
	err = st.Tx(ctx, func(tx cloud.Tx) error {
		var err error
		if out, err = get(tx, race.id); err != nil {
			return err
		}
		return same(out)
	})
	return out, err
}
