// Package rest is the request machinery of gpucloud's Go clients of the
// /v1 API: package client (tenants and admins) and package agentapi (host
// agents) both send their calls through a rest.Client, so that requests
// are built, authenticated and answered the same way, and every error
// response becomes a *cloud.Error, in one place.
package rest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
)

// Client sends requests to one server with one bearer token. Every error
// response is returned as a *cloud.Error; transport failures are returned
// as they are (cloud.ErrorCode reports them as internal). A Client is safe
// for concurrent use.
type Client struct {
	base  string
	token string
	hc    *http.Client
	// cold holds back the requests sent while the first one over HTTPS
	// waits for its connection (firstconn.go).
	cold *firstConn
}

// New returns a client of the server at baseURL (e.g.
// "http://127.0.0.1:8080") that authenticates with token (none when
// empty). A nil hc uses http.DefaultClient.
func New(baseURL, token string, hc *http.Client) *Client {
	if hc == nil {
		hc = http.DefaultClient
	}
	return &Client{base: strings.TrimRight(baseURL, "/"), token: token, hc: hc, cold: &firstConn{open: make(chan struct{})}}
}

// maxErrorBody bounds how much of an error response the client reads.
const maxErrorBody = 64 << 10

// Call is one request: method and path (with query), optional JSON body
// and headers, and where to decode a 2xx answer.
type Call struct {
	Method, Path string
	Body         any
	Header       http.Header
	Out          any
	// Raw, when not nil, is sent as the body as it is, with Content-Type
	// RawType, instead of Body as JSON.
	Raw     []byte
	RawType string
}

// Do sends a JSON call and decodes its answer into k.Out. It returns the
// response headers and status for the few callers that need them.
func (c *Client) Do(ctx context.Context, k Call) (http.Header, int, error) {
	var body io.Reader
	if k.Body != nil {
		b, err := json.Marshal(k.Body)
		if err != nil {
			return nil, 0, fmt.Errorf("encode %s %s: %w", k.Method, k.Path, err)
		}
		body = bytes.NewReader(b)
	}
	if k.Raw != nil {
		body = bytes.NewReader(k.Raw)
	}
	req, err := c.NewRequest(ctx, k.Method, k.Path, body)
	if err != nil {
		return nil, 0, err
	}
	for name, vs := range k.Header {
		req.Header[name] = vs
	}
	switch {
	case k.Raw != nil:
		req.Header.Set("Content-Type", k.RawType)
	case k.Body != nil:
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.Send(req)
	if err != nil {
		if resp != nil {
			return resp.Header, resp.StatusCode, err
		}
		return nil, 0, err
	}
	defer resp.Body.Close()
	// A 204 has no body to decode: Out keeps its zero value (a server
	// from before an answer had a body answers so).
	if k.Out != nil && resp.StatusCode != http.StatusNoContent {
		if err := json.NewDecoder(resp.Body).Decode(k.Out); err != nil {
			return resp.Header, resp.StatusCode, fmt.Errorf("decode answer of %s %s: %w", k.Method, k.Path, err)
		}
	}
	return resp.Header, resp.StatusCode, nil
}

// NewRequest returns a request of method and path (with query) to the
// client's server, for callers that read an answer other than JSON; send
// it with Send.
func (c *Client) NewRequest(ctx context.Context, method, path string, body io.Reader) (*http.Request, error) {
	return http.NewRequestWithContext(ctx, method, c.base+path, body)
}

// Send sends req with the client's token. A 2xx answer is returned with
// its body open for the caller to read and close. Any other answer is
// returned with its body read and closed, and its error decoded into a
// *cloud.Error.
func (c *Client) Send(req *http.Request) (*http.Response, error) {
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if g := c.coldGate(req); g != nil {
		r, done, err := g.pass(req)
		if err != nil {
			return nil, err
		}
		defer done()
		req = r
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer resp.Body.Close()
		return resp, DecodeError(resp)
	}
	return resp, nil
}

// DecodeError reads an error response into a *cloud.Error. A body that is
// not the API's error shape (a proxy's page, say) keeps the status's code
// and shows the start of the body. A rate_limited error whose body does not
// say when to retry takes it from the Retry-After header (RetryAfter reads
// it back).
func DecodeError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	var e cloud.Error
	if json.Unmarshal(b, &e) != nil || e.Code == "" {
		msg := strings.TrimSpace(string(b))
		if len(msg) > 200 {
			msg = msg[:200] + "..."
		}
		e = cloud.Error{Code: CodeOfStatus(resp.StatusCode),
			Message: fmt.Sprintf("HTTP %d: %s", resp.StatusCode, msg),
			Details: map[string]any{"status": resp.StatusCode}}
	}
	if e.Code == cloud.RateLimited {
		if _, ok := e.Details[RetryAfterDetail]; !ok {
			// Retry-After is whole seconds here; an HTTP date (which
			// some proxies send) is left out rather than misread.
			if secs, err := strconv.Atoi(strings.TrimSpace(resp.Header.Get("Retry-After"))); err == nil && secs >= 0 {
				if e.Details == nil {
					e.Details = map[string]any{}
				}
				e.Details[RetryAfterDetail] = float64(secs)
			}
		}
	}
	return &e
}

// RetryAfterDetail is the detail of a rate_limited error that says how
// many seconds to wait before the same request may succeed.
const RetryAfterDetail = "retry_after_seconds"

// RetryAfter is how long a rate_limited error asks the caller to wait, and
// false for any other error or one that does not say.
func RetryAfter(err error) (time.Duration, bool) {
	var e *cloud.Error
	if !errors.As(err, &e) || e.Code != cloud.RateLimited {
		return 0, false
	}
	switch v := e.Details[RetryAfterDetail].(type) {
	case float64:
		if v >= 0 && v < 1e9 {
			return time.Duration(v * float64(time.Second)), true
		}
	case int:
		if v >= 0 {
			return time.Duration(v) * time.Second, true
		}
	}
	return 0, false
}

// CodeOfStatus maps a status back to a code: the inverse of the server's
// table from codes to statuses, for a response that carries no error body,
// e.g. from a proxy in front of the server.
func CodeOfStatus(status int) cloud.Code {
	switch status {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge,
		http.StatusUnsupportedMediaType, http.StatusMethodNotAllowed:
		return cloud.Invalid
	case http.StatusUnauthorized:
		return cloud.Unauthenticated
	case http.StatusForbidden:
		return cloud.PermissionDenied
	case http.StatusNotFound:
		return cloud.NotFound
	case http.StatusConflict, http.StatusPreconditionFailed:
		return cloud.Conflict
	case http.StatusTooManyRequests:
		// The server's own 429s carry their code (quota_exceeded or
		// rate_limited) in the body; a bare one is a proxy's rate limit.
		return cloud.RateLimited
	case http.StatusServiceUnavailable:
		return cloud.InsufficientCapacity
	}
	return cloud.Internal
}

// Query builds "?k=v&..." from pairs, leaving out empty values.
func Query(pairs ...string) string {
	v := url.Values{}
	for i := 0; i+1 < len(pairs); i += 2 {
		if pairs[i+1] != "" {
			v.Set(pairs[i], pairs[i+1])
		}
	}
	if len(v) == 0 {
		return ""
	}
	return "?" + v.Encode()
}

// PathOf joins escaped path segments under /v1/.
func PathOf(parts ...string) string {
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return "/v1/" + strings.Join(parts, "/")
}

// NilOnErr returns v, or nil when err is set, so that callers never see a
// half-filled value next to an error.
func NilOnErr[T any](v *T, err error) (*T, error) {
	if err != nil {
		return nil, err
	}
	return v, nil
}

// URL is the absolute address of path (with query) on the client's server.
func (c *Client) URL(path string) string { return c.base + path }
