package httpapi

import (
	"context"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
)

// TestRevokedTokenStopsAtOnce: a token that was just used (and so cached)
// stops working the moment it is revoked through the server.
func TestRevokedTokenStopsAtOnce(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	made, err := e.acme.CreateToken(ctx, api.CreateTokenRequest{Name: "ci"})
	if err != nil {
		t.Fatal(err)
	}
	c := e.client(made.Secret)
	if _, err := c.Offerings(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.acme.RevokeToken(ctx, made.Token.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Offerings(ctx); cloud.ErrorCode(err) != cloud.Unauthenticated {
		t.Fatalf("revoked token still works: %v", err)
	}
}

func TestTokenCacheExpiry(t *testing.T) {
	c := newTokenCache(time.Minute)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	exp := now.Add(10 * time.Second)
	c.put("a", principal{UserID: "u"}, &exp, now)
	if _, ok := c.get("a", now.Add(5*time.Second)); !ok {
		t.Fatal("fresh entry missing")
	}
	if _, ok := c.get("a", now.Add(11*time.Second)); ok {
		t.Fatal("entry outlived the token's expiry")
	}
	c.put("b", principal{}, nil, now)
	if _, ok := c.get("b", now.Add(2*time.Minute)); ok {
		t.Fatal("entry outlived the TTL")
	}
	if _, ok := newTokenCache(-1).get("b", now); ok {
		t.Fatal("disabled cache answered")
	}
}
