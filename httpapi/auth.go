package httpapi

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"strings"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
)

// OperatorTenant is the ID (and name) of the tenant Bootstrap creates for
// the operator's admins.
const OperatorTenant = "operator"

// tokenPrefix starts every token, so that secret scanners and people can
// recognise one: "gpc_<token id>_<secret>".
const tokenPrefix = "gpc_"

// maxTokenLen bounds the Authorization header we hash; real tokens are
// about 70 characters.
const maxTokenLen = 256

// principal is who a request acts as, from its token.
type principal struct {
	UserID   string
	TenantID string
	Role     cloud.Role
	TokenID  string
	// HostID is the host an agent credential speaks for.
	HostID string
}

func (p principal) admin() bool { return p.Role == cloud.RoleAdmin }

// newID returns prefix followed by 16 random hex characters.
func newID(prefix string) string {
	var b [8]byte
	// crypto/rand.Read never fails (it crashes the program instead).
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// hashToken is what the store keeps of a token: SHA-256 of the whole token
// string. Tokens carry 256 random bits, so a fast hash is enough; a slow
// password hash would only slow every request down.
func hashToken(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

// newToken makes a token for user u with the given name and expiry, and
// returns it with its secret string. The token ID is hex, so the first "_"
// after the prefix ends it; the secret is base64url and may contain "_".
func newToken(u *cloud.User, name string, now time.Time, expires *time.Time) (*cloud.Token, string) {
	id := newID("tk-")
	var secret [32]byte
	_, _ = rand.Read(secret[:])
	full := tokenPrefix + id + "_" + base64.RawURLEncoding.EncodeToString(secret[:])
	return &cloud.Token{
		ID:        id,
		UserID:    u.ID,
		TenantID:  u.TenantID,
		Role:      u.Role,
		Name:      name,
		Hash:      hashToken(full),
		CreatedAt: now,
		ExpiresAt: expires,
	}, full
}

// unauthenticated is the one answer to a missing, malformed, unknown,
// revoked or expired token: telling them apart would help guessing.
func unauthenticated(msg string) error {
	return cloud.Errorf(cloud.Unauthenticated, "%s", msg)
}

// authenticate finds the principal of the request's bearer token.
func (s *api) authenticate(r *http.Request) (principal, error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return principal{}, unauthenticated("missing Authorization header; send Authorization: Bearer gpc_...")
	}
	scheme, tok, ok := strings.Cut(h, " ")
	tok = strings.TrimSpace(tok)
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return principal{}, unauthenticated("Authorization header must be \"Bearer <token>\"")
	}
	return s.lookupToken(r.Context(), tok)
}

// lookupToken finds the principal of a token string.
func (s *api) lookupToken(ctx context.Context, tok string) (principal, error) {
	if !strings.HasPrefix(tok, tokenPrefix) || len(tok) > maxTokenLen {
		return principal{}, unauthenticated("invalid, revoked or expired token")
	}
	now := s.now()
	if p, ok := s.tokens.get(tok, now); ok {
		return p, nil
	}
	var t *cloud.Token
	err := s.store.Tx(ctx, func(tx cloud.Tx) error {
		var err error
		t, err = tx.TokenByHash(ctx, hashToken(tok), now)
		return err
	})
	if cloud.IsNotFound(err) {
		return principal{}, unauthenticated("invalid, revoked or expired token")
	}
	if err != nil {
		return principal{}, err
	}
	p := principal{UserID: t.UserID, TenantID: t.TenantID, Role: t.Role, TokenID: t.ID, HostID: t.HostID}
	s.tokens.put(tok, p, t.ExpiresAt, now)
	return p, nil
}

// Bootstrap prepares an empty store for its first start: it creates the
// operator tenant, an admin user and an admin token, and returns the token
// string, which is not stored anywhere and must be shown to the operator
// now. On later starts, when the operator tenant exists, it returns
// created=false and no token. Two servers bootstrapping one store at once
// are safe: the one that loses the race sees created=false.
func Bootstrap(ctx context.Context, store cloud.Store, now time.Time) (adminToken string, created bool, err error) {
	err = store.Tx(ctx, func(tx cloud.Tx) error {
		adminToken, created = "", false
		if _, err := tx.GetTenant(ctx, OperatorTenant); err == nil {
			return nil
		} else if !cloud.IsNotFound(err) {
			return err
		}
		if err := tx.CreateTenant(ctx, &cloud.Tenant{ID: OperatorTenant, Name: OperatorTenant, CreatedAt: now}); err != nil {
			return err
		}
		u := &cloud.User{ID: newID("u-"), TenantID: OperatorTenant, Name: "admin", Role: cloud.RoleAdmin, CreatedAt: now}
		if err := tx.CreateUser(ctx, u); err != nil {
			return err
		}
		t, secret := newToken(u, "bootstrap", now, nil)
		if err := tx.CreateToken(ctx, t); err != nil {
			return err
		}
		adminToken, created = secret, true
		return nil
	})
	if cloud.IsConflict(err) {
		// Another server created the operator tenant between our read and
		// our insert: the store is bootstrapped, just not by us.
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	return adminToken, created, nil
}
