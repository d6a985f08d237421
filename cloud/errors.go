package cloud

import (
	"errors"
	"fmt"
)

// Code is a stable error code of the API. httpapi maps each to one HTTP
// status in a single table; clients branch on the code, never on messages.
type Code string

// The codes. RateLimited answers a request over its credential's request
// rate, or from an address with too many failed authentications; the
// server did nothing, and its details carry retry_after_seconds (the API
// also sends it as the Retry-After header): the same request may succeed
// after that wait.
const (
	Invalid              Code = "invalid_argument"
	NotFound             Code = "not_found"
	Conflict             Code = "conflict"
	QuotaExceeded        Code = "quota_exceeded"
	RateLimited          Code = "rate_limited"
	InsufficientCapacity Code = "insufficient_capacity"
	// Unavailable: a dependency of the request is not reachable now
	// (e.g. the instance's host agent is not connected to this replica);
	// the same request may succeed later.
	Unavailable      Code = "unavailable"
	Unauthenticated  Code = "unauthenticated"
	PermissionDenied Code = "permission_denied"
	Internal         Code = "internal"
)

// Error is the one error shape of the domain and the API:
// {code, message, details}.
type Error struct {
	Code    Code           `json:"code"`
	Message string         `json:"message"`
	Details map[string]any `json:"details,omitempty"`
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// Errorf returns an *Error with a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the code of err: the Code of an *Error in its chain,
// Internal for any other error, "" for nil.
func ErrorCode(err error) Code {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return Internal
}

// IsNotFound and IsConflict are shorthands for the codes callers branch on.
func IsNotFound(err error) bool { return ErrorCode(err) == NotFound }
func IsConflict(err error) bool { return ErrorCode(err) == Conflict }
