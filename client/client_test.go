package client

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/cloud"
)

// TestErrors checks that the client turns every error response, including
// ones that are not the API's JSON, into *cloud.Error.
func TestErrors(t *testing.T) {
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/instances/i-404":
			http.Error(w, "no such thing", http.StatusNotFound)
		case "/v1/instances/i-409":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(409)
			w.Write([]byte(`{"code":"conflict","message":"stale","details":{"current_version":3}}`))
		default:
			http.Error(w, "<html>bad gateway</html>", http.StatusBadGateway)
		}
	}))
	defer proxy.Close()
	c := New(proxy.URL+"/", "tok", proxy.Client())
	ctx := context.Background()
	for _, tc := range []struct {
		desc string
		call func() error
		code cloud.Code
		ok   func(*cloud.Error) bool
	}{
		{"a plain-text 404", func() error { _, err := c.GetInstance(ctx, "i-404"); return err }, cloud.NotFound,
			func(ce *cloud.Error) bool { return strings.Contains(ce.Message, "no such thing") }},
		{"the API's 409", func() error { _, err := c.GetInstance(ctx, "i-409"); return err }, cloud.Conflict,
			func(ce *cloud.Error) bool { return ce.Details["current_version"] == 3.0 && ce.Message == "stale" }},
		{"a proxy's 502", func() error { _, err := c.Offerings(ctx); return err }, cloud.Internal,
			func(ce *cloud.Error) bool { return strings.Contains(ce.Message, "502") }},
	} {
		err := tc.call()
		var ce *cloud.Error
		if !errors.As(err, &ce) || ce.Code != tc.code || !tc.ok(ce) {
			t.Errorf("%s: %#v, want a *cloud.Error with code %s", tc.desc, err, tc.code)
		}
	}
}
