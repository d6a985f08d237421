package httpapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/internal/rest"
)

func TestStatusOf(t *testing.T) {
	for code, want := range map[cloud.Code]int{
		cloud.Invalid:              400,
		cloud.Unauthenticated:      401,
		cloud.PermissionDenied:     403,
		cloud.NotFound:             404,
		cloud.Conflict:             409,
		cloud.QuotaExceeded:        429,
		cloud.RateLimited:          429,
		cloud.InsufficientCapacity: 503,
		cloud.Internal:             500,
		"something new":            500,
	} {
		if got := statusOf(code); got != want {
			t.Errorf("statusOf(%s) = %d, want %d", code, got, want)
		}
		// A 429 without a body is taken for a proxy's rate limit; the
		// server's own carry their code.
		if want != 500 && code != cloud.QuotaExceeded && rest.CodeOfStatus(want) != code {
			t.Errorf("rest.CodeOfStatus(%d) = %s, want %s", want, rest.CodeOfStatus(want), code)
		}
	}
}

func TestOfferings(t *testing.T) {
	e := newEnv(t)
	os, err := e.globex.Offerings(context.Background())
	if err != nil || len(os) == 0 {
		t.Fatalf("offerings = %d, %v", len(os), err)
	}
	found := false
	for _, o := range os {
		found = found || o.Name == "h100.mig.3g.40gb" && o.MIGProfile == "3g.40gb"
	}
	if !found {
		t.Error("h100.mig.3g.40gb is not offered")
	}
	_, err = e.client("").Offerings(context.Background())
	wantCode(t, err, cloud.Unauthenticated)
}

func TestUnknownRouteAndMethod(t *testing.T) {
	e := newEnv(t)
	status, _, b := e.raw("GET", "/v1/nothing", e.acmeToken, nil, nil)
	if eb := decodeErr(t, b); status != 404 || eb.Code != cloud.NotFound {
		t.Errorf("unknown route: %d %s", status, b)
	}
	status, h, b := e.raw("PATCH", "/v1/instances/i-1", e.acmeToken, strings.NewReader(`{}`), nil)
	if eb := decodeErr(t, b); status != 405 || eb.Code != cloud.Invalid || h.Get("Allow") != "GET" {
		t.Errorf("wrong method: %d Allow %q %s", status, h.Get("Allow"), b)
	}
	status, h, b = e.raw("DELETE", "/v1/instances", e.acmeToken, nil, nil)
	if decodeErr(t, b); status != 405 || h.Get("Allow") != "POST, GET" {
		t.Errorf("wrong method on a collection: %d Allow %q %s", status, h.Get("Allow"), b)
	}
}

// TestInternalErrorsAreHidden closes the store under the server: the
// client sees a generic internal error, and the log has the cause.
func TestInternalErrorsAreHidden(t *testing.T) {
	e := newEnv(t)
	e.store.Close()
	status, _, b := e.raw("GET", "/v1/instances", e.acmeToken, nil, nil)
	eb := decodeErr(t, b)
	if status != 500 || eb.Code != cloud.Internal || eb.Message != internalMessage {
		t.Errorf("got %d %+v, want 500 with the generic message", status, eb)
	}
	if strings.Contains(string(b), "closed") || strings.Contains(string(b), "sql") {
		t.Errorf("response leaks the cause: %s", b)
	}
	if logs := e.logs.String(); !strings.Contains(logs, "request failed") || !strings.Contains(logs, "closed") {
		t.Errorf("log does not carry the cause: %s", logs)
	}
}

// TestCancelledRequestsAreNotErrors: a request whose context ended (its
// client went away, or the server is stopping under an agent's long poll)
// and whose handler returned context.Canceled is logged at debug, not as
// a failed request; the same error on a live request is still an error.
func TestCancelledRequestsAreNotErrors(t *testing.T) {
	for _, c := range []struct {
		name      string
		cancelled bool
		err       error
		want      string
	}{
		{"a cancelled request", true, fmt.Errorf("watch: %w", context.Canceled), "level=DEBUG msg=\"request cancelled\""},
		{"a live request's cancellation", false, fmt.Errorf("watch: %w", context.Canceled), "level=ERROR msg=\"request failed\""},
		{"a cancelled request's other error", true, errors.New("disk on fire"), "level=ERROR msg=\"request failed\""},
	} {
		t.Run(c.name, func(t *testing.T) {
			var logs strings.Builder
			log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			ctx, cancel := context.WithCancel(context.Background())
			if c.cancelled {
				cancel()
			} else {
				defer cancel()
			}
			r := httptest.NewRequest("GET", "/v1/agent/assignments", nil).WithContext(ctx)
			writeError(httptest.NewRecorder(), r, log, c.err)
			if !strings.Contains(logs.String(), c.want) {
				t.Errorf("logged %q, want %s", logs.String(), c.want)
			}
		})
	}
}

// TestSecretsAreNotCached: answers that carry a secret shown once (a new
// token, a new user's token, a join token) say Cache-Control: no-store.
func TestSecretsAreNotCached(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct{ path, body string }{
		{"/v1/tokens", `{"name":"ci"}`},
		{"/v1/join-tokens", `{"name":"rack"}`},
	} {
		req, _ := http.NewRequest("POST", e.srv.URL+c.path, strings.NewReader(c.body))
		req.Header.Set("Authorization", "Bearer "+e.adminToken)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated || resp.Header.Get("Cache-Control") != "no-store" {
			t.Errorf("POST %s: %d, Cache-Control %q", c.path, resp.StatusCode, resp.Header.Get("Cache-Control"))
		}
	}
}
