package httpapi

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/gpucloud/gpucloud/cloud"
)

// keyDiffs collects how a create that reuses an idempotency key differs
// from the create that first used it, field by field.
type keyDiffs struct {
	fields []string
	descs  []string
}

// add records that the resource has was in field and the request asks
// for asked, both rendered for the message (strings quoted).
func (d *keyDiffs) add(field, was, asked string) {
	d.fields = append(d.fields, field)
	d.descs = append(d.descs, field+" "+asked+" where it has "+was)
}

// addString is add for string fields, quoted.
func (d *keyDiffs) addString(field, was, asked string) {
	if was != asked {
		d.add(field, quote(was), quote(asked))
	}
}

// err is nil when nothing differs, else the conflict of a key reused for a
// different create of what (e.g. "volume"), whose first create made
// existing: answering that one would hide the mistake. Its Details carry
// "existing_id" and the differing "fields".
func (d *keyDiffs) err(what, existing string, existingID any) error {
	if len(d.fields) == 0 {
		return nil
	}
	return &cloud.Error{Code: cloud.Conflict,
		Message: "the Idempotency-Key was used for " + what + " " + existing + " with another request: " +
			strings.Join(d.descs, ", ") + "; use a new key for a new " + what,
		Details: map[string]any{"existing_id": existingID, "fields": d.fields}}
}

// asKeyRace turns the store's idempotency Conflict (one whose Details
// carry a string "existing_id") of a keyed create into a keyRace, so that
// the handler answers the resource created first; other errors pass.
func asKeyRace(err error, key string) error {
	var ce *cloud.Error
	if key != "" && errors.As(err, &ce) && ce.Code == cloud.Conflict {
		if id, ok := ce.Details["existing_id"].(string); ok {
			return &keyRace{id: id}
		}
	}
	return err
}

// raceWinner finishes a create that may have lost a race on its
// Idempotency-Key: when err is a *keyRace, it reads, in a new
// transaction, the resource the winning call made (get) and checks it
// against this request (same); otherwise out and err pass unchanged.
func raceWinner[T any](s *api, ctx context.Context, out T, err error,
	get func(tx cloud.Tx, id string) (T, error), same func(T) error) (T, error) {
	var race *keyRace
	if !errors.As(err, &race) {
		return out, err
	}
	err = s.tx(ctx, func(tx cloud.Tx) error {
		var err error
		if out, err = get(tx, race.id); err != nil {
			return err
		}
		return same(out)
	})
	return out, err
}

// writeCreated answers a create: 201 with the resource's Location when
// this call created it, 200 when it answers an earlier call's (a retry).
func writeCreated(w http.ResponseWriter, created bool, location string, v any) {
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		if location != "" {
			w.Header().Set("Location", location)
		}
	}
	writeJSON(w, status, v)
}
