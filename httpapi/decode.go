package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
)

// maxBodyBytes caps every request body. The largest legitimate body, an
// instance with its command and environment at their limits, is well under
// it.
const maxBodyBytes = 1 << 20

// decodeBody reads the request's JSON body into v. It rejects a body that
// is not application/json in UTF-8 without a content coding (checkBody),
// larger than maxBodyBytes, malformed, with fields v does not have, or
// followed by anything but white space; every rejection says what is
// wrong in words a person can act on.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	return decodeBodyLimit(w, r, v, maxBodyBytes)
}

// decodeBodyLimit is decodeBody with a body limit of its own, for the
// routes whose bodies may be larger than maxBodyBytes (a stack's
// template): the same checks and answers, with limit in the 413.
func decodeBodyLimit(w http.ResponseWriter, r *http.Request, v any, limit int64) error {
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		return &statusError{status: http.StatusUnsupportedMediaType, err: &cloud.Error{
			Code:    cloud.Invalid,
			Message: "request body must be JSON with Content-Type: application/json",
			Details: map[string]any{"content_type": r.Header.Get("Content-Type")}}}
	}
	if err := checkBody(w, r, params); err != nil {
		return err
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		if tooLarge(err) {
			return &statusError{status: http.StatusRequestEntityTooLarge, err: &cloud.Error{
				Code:    cloud.Invalid,
				Message: fmt.Sprintf("request body is larger than the limit of %d bytes", limit),
				Details: map[string]any{"limit_bytes": limit}}}
		}
		return fmt.Errorf("read request body: %w", err)
	}
	if err := checkUTF8(b); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return bodyError(err)
	}
	// A second value, or garbage, after the object is almost always a
	// client bug (two requests concatenated); refuse it rather than guess.
	if err := dec.Decode(&json.RawMessage{}); !errors.Is(err, io.EOF) {
		return invalid("malformed JSON: unexpected data after the JSON object")
	}
	return nil
}

// checkBody refuses, with 415, a request body the server would have to
// guess at: one with a Content-Encoding other than identity (the server
// decodes none, so a compressed body would be read as garbage; the answer
// says Accept-Encoding: identity), or whose Content-Type names a charset
// other than UTF-8 (the API's text is UTF-8 only). params are the
// Content-Type's parameters.
func checkBody(w http.ResponseWriter, r *http.Request, params map[string]string) error {
	for _, v := range r.Header.Values("Content-Encoding") {
		for _, coding := range strings.Split(v, ",") {
			if coding = strings.TrimSpace(coding); coding != "" && !strings.EqualFold(coding, "identity") {
				w.Header().Set("Accept-Encoding", "identity")
				return &statusError{status: http.StatusUnsupportedMediaType, err: &cloud.Error{
					Code:    cloud.Invalid,
					Message: fmt.Sprintf("Content-Encoding %s is not accepted: send the request body uncompressed, without Content-Encoding", service.Quote(coding)),
					Details: map[string]any{"content_encoding": coding}}}
			}
		}
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return &statusError{status: http.StatusUnsupportedMediaType, err: &cloud.Error{
			Code:    cloud.Invalid,
			Message: fmt.Sprintf("charset %s is not accepted: send the request body in UTF-8 (charset=utf-8, or no charset)", service.Quote(cs)),
			Details: map[string]any{"charset": cs}}}
	}
	return nil
}

// checkUTF8 refuses, with 415, a JSON body that is not valid UTF-8 (JSON
// is UTF-8 by definition, RFC 8259): a body in another charset sent
// without saying so is not read as a guess, with its bytes replaced.
func checkUTF8(b []byte) error {
	if utf8.Valid(b) {
		if bytes.HasPrefix(b, []byte("\uFEFF")) {
			return invalid("malformed JSON: the body starts with a byte order mark; send UTF-8 JSON without one")
		}
		return nil
	}
	off := 0
	for off < len(b) {
		r, n := utf8.DecodeRune(b[off:])
		if r == utf8.RuneError && n <= 1 {
			break
		}
		off += n
	}
	return &statusError{status: http.StatusUnsupportedMediaType, err: &cloud.Error{
		Code:    cloud.Invalid,
		Message: fmt.Sprintf("request body is not valid UTF-8 (byte %d): send JSON in UTF-8, whatever charset the data came in", off),
		Details: map[string]any{"charset": "utf-8", "offset": off}}}
}

// decodeOptionalBody is decodeBody for routes whose body may be left out:
// an empty body leaves v as it is.
func decodeOptionalBody(w http.ResponseWriter, r *http.Request, v any) error {
	if r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	return decodeBody(w, r, v)
}

func tooLarge(err error) bool {
	var mb *http.MaxBytesError
	return errors.As(err, &mb)
}

// bodyError turns an encoding/json error into an invalid_argument error
// that names the problem and, where known, the field or byte offset.
func bodyError(err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case tooLarge(err):
		return &statusError{status: http.StatusRequestEntityTooLarge, err: &cloud.Error{
			Code:    cloud.Invalid,
			Message: fmt.Sprintf("request body is larger than the limit of %d bytes", maxBodyBytes),
			Details: map[string]any{"limit_bytes": maxBodyBytes}}}
	case errors.Is(err, io.EOF):
		return invalid("request body is empty; send a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return invalid("malformed JSON: the body ends in the middle of a value")
	case errors.As(err, &syn):
		return &cloud.Error{Code: cloud.Invalid,
			Message: fmt.Sprintf("malformed JSON at byte %d: %s", syn.Offset, syn.Error()),
			Details: map[string]any{"offset": syn.Offset}}
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			return invalid("request body must be a JSON object, not a JSON %s", typ.Value)
		}
		return &cloud.Error{Code: cloud.Invalid,
			Message: fmt.Sprintf("field %q must be %s, not a JSON %s", field, jsonKind(typ.Type.Kind().String()), typ.Value),
			Details: map[string]any{"field": field}}
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		// encoding/json has no typed error for this; the message is stable.
		name := strings.TrimPrefix(err.Error(), "json: unknown field ")
		name, _ = strconv.Unquote(name)
		return &cloud.Error{Code: cloud.Invalid,
			Message: fmt.Sprintf("unknown field %q in request body", name),
			Details: map[string]any{"field": name}}
	}
	return invalid("malformed JSON: %v", err)
}

// jsonKind names a Go kind the way a JSON user thinks of it.
func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "a string"
	case "bool":
		return "true or false"
	case "slice", "array":
		return "an array"
	case "map", "struct":
		return "an object"
	case "float32", "float64":
		return "a number"
	}
	if strings.HasPrefix(goKind, "int") || strings.HasPrefix(goKind, "uint") {
		return "an integer"
	}
	return "a " + goKind
}

// ifMatch parses the optional If-Match header: a version, as the ETag
// carries it ("7", quoted) or bare (7). Zero means the header is absent.
func ifMatch(r *http.Request) (int64, error) {
	h := strings.TrimSpace(r.Header.Get("If-Match"))
	if h == "" {
		return 0, nil
	}
	h = strings.TrimPrefix(h, "W/")
	h = strings.Trim(h, `"`)
	v, err := strconv.ParseInt(h, 10, 64)
	if err != nil || v < 1 {
		return 0, invalid("If-Match must be a version as the ETag gives it, e.g. \"3\"; got %s", service.Quote(r.Header.Get("If-Match")))
	}
	return v, nil
}

// Paging bounds for list routes.
const (
	defaultLimit = 100
	maxLimit     = 1000
)

// queryLimit parses ?limit: 1..maxLimit, defaultLimit when absent.
func queryLimit(r *http.Request) (int, error) {
	s := r.URL.Query().Get("limit")
	if s == "" {
		return defaultLimit, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > maxLimit {
		return 0, invalid("limit must be an integer in 1..%d, got %s", maxLimit, service.Quote(s))
	}
	return n, nil
}

// queryAfterInt parses an integer ?after cursor (events); 0 when absent.
func queryAfterInt(r *http.Request) (int64, error) {
	s := r.URL.Query().Get("after")
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, invalid("after must be the next value of a previous page, got %s", service.Quote(s))
	}
	return n, nil
}

// answerByID calls a service method on the resource the path's {id} names
// and answers 200 with what it returns: the whole body of most GET, POST
// action and DELETE handlers.
func answerByID[T any](w http.ResponseWriter, r *http.Request, p principal, call func(context.Context, service.Actor, string) (T, error)) error {
	v, err := call(r.Context(), p.actor(), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, v)
	return nil
}

// answerDelete calls a service's delete of the path's {id} and answers
// 204.
func answerDelete(w http.ResponseWriter, r *http.Request, p principal, call func(context.Context, service.Actor, string) error) error {
	if err := call(r.Context(), p.actor(), r.PathValue("id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// answerCreate decodes a create request into req, takes its tenant from
// the body or ?tenant (the two must agree), calls the service's create
// with the Idempotency-Key and answers 201 with the new resource's
// location, or 200 with what a retry under the same key answers.
func answerCreate[Req, T any](w http.ResponseWriter, r *http.Request, p principal, req *Req, tenant *string,
	call func(context.Context, service.Actor, Req, string) (T, bool, error), location func(T) string) error {
	if err := decodeBody(w, r, req); err != nil {
		return err
	}
	t, err := bodyOrQueryTenant(r, *tenant)
	if err != nil {
		return err
	}
	*tenant = t
	v, created, err := call(r.Context(), p.actor(), *req, r.Header.Get("Idempotency-Key"))
	if err != nil {
		return err
	}
	writeCreated(w, created, location(v), v)
	return nil
}
