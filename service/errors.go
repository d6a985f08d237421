package service

import (
	"encoding/json"
	"fmt"

	"github.com/gpucloud/gpucloud/cloud"
)

// Field builds the invalid_argument error of one request field; its
// details name the field so that a client can point at it.
func Field(name, format string, args ...any) error {
	return &cloud.Error{Code: cloud.Invalid,
		Message: name + ": " + fmt.Sprintf(format, args...),
		Details: map[string]any{"field": name}}
}

// NotFound is the error of a missing resource, and of another tenant's:
// the two answer alike so that IDs do not leak.
func NotFound(kind, id string) error {
	return &cloud.Error{Code: cloud.NotFound, Message: kind + " " + Quote(id) + " not found",
		Details: map[string]any{"kind": kind, "id": id}}
}

// Quote quotes s for a message, cutting it short so that a hostile ID
// cannot blow up an error response or a log line.
func Quote(s string) string {
	const max = 80
	if len(s) > max {
		s = s[:max] + "..."
	}
	b, _ := json.Marshal(s)
	return string(b)
}

// IllegalMove is the conflict of a state change cloud.CanMove forbids.
func IllegalMove(id string, from, to cloud.State, hint string) error {
	msg := "instance " + Quote(id) + " cannot go from " + string(from) + " to " + string(to)
	if hint != "" {
		msg += ": " + hint
	}
	return &cloud.Error{Code: cloud.Conflict, Message: msg,
		Details: map[string]any{"from": from, "to": to}}
}

// CheckVersion compares the version a writer read (If-Match; 0: none)
// with the current one: a stale version is a conflict, so that two
// writers cannot silently overwrite each other.
func CheckVersion(kind, id string, want, have int64) error {
	if want == 0 || want == have {
		return nil
	}
	return &cloud.Error{Code: cloud.Conflict,
		Message: fmt.Sprintf("%s %s changed: If-Match is version %d, the current version is %d; read it again and retry", kind, Quote(id), want, have),
		Details: map[string]any{"expected_version": want, "current_version": have}}
}
