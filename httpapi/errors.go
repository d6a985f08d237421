package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/gpucloud/gpucloud/cloud"
)

// statusOf is the one table from error codes to HTTP statuses. Clients
// branch on the code in the body, never on the status.
//
// Three answers use another status than their code's, because HTTP has a
// more precise one and generic clients and proxies understand it: a body
// over the size limit is 413, a body that is not application/json (or not
// UTF-8, or has a content coding) is 415, and a method the path does not
// take is 405. Both quota_exceeded and rate_limited are 429; a
// rate_limited answer also carries Retry-After. All three carry the code
// invalid_argument (see statusError).
func statusOf(c cloud.Code) int {
	switch c {
	case cloud.Invalid:
		return http.StatusBadRequest
	case cloud.Unauthenticated:
		return http.StatusUnauthorized
	case cloud.PermissionDenied:
		return http.StatusForbidden
	case cloud.NotFound:
		return http.StatusNotFound
	case cloud.Conflict:
		return http.StatusConflict
	case cloud.QuotaExceeded, cloud.RateLimited:
		return http.StatusTooManyRequests
	case cloud.InsufficientCapacity, cloud.Unavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// statusError is a *cloud.Error answered with a status other than the one
// statusOf gives its code: one of the exceptions statusOf documents.
type statusError struct {
	err    *cloud.Error
	status int
}

func (e *statusError) Error() string { return e.err.Error() }
func (e *statusError) Unwrap() error { return e.err }

// errorBody is the JSON shape of every error response. Details is always
// present (an empty object when there are none), so that clients can index
// it without a nil check.
type errorBody struct {
	Code    cloud.Code     `json:"code"`
	Message string         `json:"message"`
	Details map[string]any `json:"details"`
}

// internalMessage is all a client learns about an internal error; the cause
// goes to the log only, since it may name tables, files or hosts.
const internalMessage = "internal error; the server log has the cause"

// writeError answers err. A *cloud.Error with a code other than internal
// is sent as it is; anything else is logged with the request and answered
// with a generic internal error.
func writeError(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	var se *statusError
	var ce *cloud.Error
	status := 0
	switch {
	case errors.As(err, &se):
		ce, status = se.err, se.status
	case errors.As(err, &ce):
		status = statusOf(ce.Code)
	}
	if ce == nil || ce.Code == cloud.Internal || ce.Code == "" {
		if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
			// Its client went away, or the server is stopping (an
			// agent's long poll at shutdown): nobody failed, and nobody
			// reads the answer.
			log.DebugContext(r.Context(), "request cancelled", "method", r.Method, "path", r.URL.Path)
			return
		}
		log.ErrorContext(r.Context(), "request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		ce, status = &cloud.Error{Code: cloud.Internal, Message: internalMessage}, http.StatusInternalServerError
	}
	body := errorBody{Code: ce.Code, Message: ce.Message, Details: ce.Details}
	if body.Details == nil {
		body.Details = map[string]any{}
	}
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="gpucloud"`)
	}
	if secs, ok := ce.Details[retryAfterDetail].(int); ok && ce.Code == cloud.RateLimited {
		w.Header().Set("Retry-After", strconv.Itoa(secs))
	}
	writeJSON(w, status, body)
}

// writeJSON sends v as the JSON body with the given status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	// Answers are a tenant's own data, and some carry a secret shown once
	// (a new token, a join token, an agent's credential): no cache, proxy
	// or browser may keep them. A handler that wants caching (an ETag'd
	// read) sets its own header first.
	if w.Header().Get("Cache-Control") == "" {
		w.Header().Set("Cache-Control", "no-store")
	}
	w.WriteHeader(status)
	// An error here means the client went away; there is nobody to tell.
	_ = json.NewEncoder(w).Encode(v)
}

// invalid, notFound and conflict are shorthands for the errors handlers
// return most.
func invalid(format string, args ...any) error { return cloud.Errorf(cloud.Invalid, format, args...) }
