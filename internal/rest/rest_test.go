package rest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
)

// TestDecodeRateLimited: a 429 becomes a *cloud.Error whose code is the
// body's, or rate_limited for a bare one (a proxy's), and RetryAfter reads
// the wait from the body or, when the body has none, from Retry-After.
func TestDecodeRateLimited(t *testing.T) {
	for _, c := range []struct {
		name       string
		status     int
		retryAfter string
		body       string
		code       cloud.Code
		wait       time.Duration
		hasWait    bool
	}{
		{"the server's rate_limited", 429, "3", `{"code":"rate_limited","message":"slow down","details":{"retry_after_seconds":3}}`,
			cloud.RateLimited, 3 * time.Second, true},
		{"the body's wait wins over the header", 429, "9", `{"code":"rate_limited","message":"m","details":{"retry_after_seconds":2}}`,
			cloud.RateLimited, 2 * time.Second, true},
		{"a body without the wait takes the header's", 429, "4", `{"code":"rate_limited","message":"m"}`,
			cloud.RateLimited, 4 * time.Second, true},
		{"a proxy's bare 429", 429, "7", `Too Many Requests`, cloud.RateLimited, 7 * time.Second, true},
		{"an HTTP date is not misread", 429, "Wed, 21 Oct 2015 07:28:00 GMT", `busy`, cloud.RateLimited, 0, false},
		{"quota_exceeded is no rate limit", 429, "", `{"code":"quota_exceeded","message":"m","details":{"limit":1}}`,
			cloud.QuotaExceeded, 0, false},
		{"another error", 404, "5", `{"code":"not_found","message":"m"}`, cloud.NotFound, 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp := &http.Response{StatusCode: c.status, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(c.body))}
			if c.retryAfter != "" {
				resp.Header.Set("Retry-After", c.retryAfter)
			}
			err := DecodeError(resp)
			var ce *cloud.Error
			if !errors.As(err, &ce) || ce.Code != c.code {
				t.Fatalf("DecodeError = %#v, want code %s", err, c.code)
			}
			wait, ok := RetryAfter(fmt.Errorf("wrapped: %w", err))
			if ok != c.hasWait || wait != c.wait {
				t.Errorf("RetryAfter = %v, %v; want %v, %v", wait, ok, c.wait, c.hasWait)
			}
		})
	}
	if _, ok := RetryAfter(errors.New("connection refused")); ok {
		t.Error("RetryAfter of a transport error says to wait")
	}
}

// TestDoNoContent: a 204 answers nothing to decode, so Out keeps its zero
// value and the call succeeds; a 200 is decoded into Out.
func TestDoNoContent(t *testing.T) {
	status := http.StatusNoContent
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if status == http.StatusNoContent {
			w.WriteHeader(status)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"n": 7}`))
	}))
	defer srv.Close()
	c := New(srv.URL, "", srv.Client())
	var out struct{ N int }
	if _, code, err := c.Do(context.Background(), Call{Method: "POST", Path: "/", Out: &out}); err != nil || code != http.StatusNoContent || out.N != 0 {
		t.Fatalf("204: %d, %+v, %v", code, out, err)
	}
	status = http.StatusOK
	if _, _, err := c.Do(context.Background(), Call{Method: "POST", Path: "/", Out: &out}); err != nil || out.N != 7 {
		t.Fatalf("200: %+v, %v", out, err)
	}
}
