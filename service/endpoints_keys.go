package service

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
)

// Endpoint keys (docs/ENDPOINTS.md, "Endpoint keys"): credentials a
// tenant makes for one of its endpoints, to call it from apps. A key is
// "gpc_ek-<id>_<secret>": the server finds its row by the ID and compares
// the SHA-256 of the whole string with the stored hash in constant time.
// The key opens its endpoint's invoke routes (run, runsync, status,
// cancel, the HTTP mode) as an actor of role invoke, and nothing else.
// Checking a request's key, caching that check (at most a second) and the
// key's request bucket are the transport's business (httpapi).

// EndpointKeyPrefix is endpoint keys' ID prefix.
const EndpointKeyPrefix = "ek-"

// Endpoint key limits and defaults: a key's request rate (per second) and
// burst.
const (
	MaxKeysPerEndpoint = 20
	DefaultKeyRate     = 100
	DefaultKeyBurst    = 200
	MaxKeyRate         = 1000
	MaxKeyBurst        = 2000
)

// Event kinds of endpoint keys.
const (
	EventEndpointKeyCreated cloud.EventKind = "endpoint.key.created"
	EventEndpointKeyRevoked cloud.EventKind = "endpoint.key.revoked"
)

// KeyActor is the actor of endpoint key k: it acts in k's tenant, on k's
// endpoint only.
func KeyActor(k *cloud.EndpointKey) Actor {
	return Actor{ID: k.ID, TenantID: k.TenantID, Role: cloud.RoleInvoke, EndpointID: k.EndpointID}
}

// endpointUsers refuses actors that are not a tenant's users (endpoint
// keys among them): only users manage endpoints and their keys.
func endpointUsers(a Actor, what string) error {
	if a.Role == cloud.RoleInvoke {
		return &cloud.Error{Code: cloud.PermissionDenied,
			Message: what + " is for users' tokens; an endpoint key only calls its endpoint (run, runsync, status, cancel, the HTTP mode)",
			Details: map[string]any{"role": a.Role}}
	}
	return nil
}

// CheckKeyLimits fills in a key's rate and burst defaults and checks them:
// the rate 1 to MaxKeyRate (default DefaultKeyRate), the burst 1 to
// MaxKeyBurst (default twice the rate, at most MaxKeyBurst).
func CheckKeyLimits(req *api.CreateEndpointKeyRequest) error {
	if req.Rate == 0 {
		req.Rate = DefaultKeyRate
	}
	if req.Rate < 1 || req.Rate > MaxKeyRate {
		return Field("rate", "%d requests per second is out of range 1..%d", req.Rate, MaxKeyRate)
	}
	if req.Burst == 0 {
		req.Burst = min(2*req.Rate, MaxKeyBurst)
	}
	if req.Burst < 1 || req.Burst > MaxKeyBurst {
		return Field("burst", "%d requests at once is out of range 1..%d", req.Burst, MaxKeyBurst)
	}
	return nil
}

// CreateKey makes a key for endpoint ref and answers it with its secret,
// which is shown this once. key makes a retry answer the first key
// (without its secret: the server keeps only its hash); the same key with
// another request is a conflict naming the fields.
func (s *Endpoints) CreateKey(ctx context.Context, a Actor, ref string, req api.CreateEndpointKeyRequest, key string) (out api.CreatedEndpointKey, created bool, err error) {
	if err := endpointUsers(a, "making endpoint keys"); err != nil {
		return out, false, err
	}
	if err := CheckIdempotencyKey(key); err != nil {
		return out, false, err
	}
	if err := CheckName("name", req.Name, true); err != nil {
		return out, false, err
	}
	if err := CheckKeyLimits(&req); err != nil {
		return out, false, err
	}
	same := func(k *cloud.EndpointKey) error {
		var d KeyDiffs
		d.String("name", k.Name, req.Name)
		Value(&d, "rate", k.Rate, req.Rate)
		Value(&d, "burst", k.Burst, req.Burst)
		return d.Err("endpoint key", k.ID)
	}
	var first *cloud.EndpointKey
	err = s.tx(ctx, func(tx cloud.Tx) error {
		out, created, first = api.CreatedEndpointKey{}, false, nil
		e, err := lookupEndpoint(ctx, tx, a, ref)
		if err != nil {
			return err
		}
		if e.State != cloud.EndpointActive {
			return &cloud.Error{Code: cloud.Conflict, Message: "endpoint " + e.Name + " is " + string(e.State) + "; keys are made for active endpoints",
				Details: map[string]any{"state": e.State}}
		}
		if old, found, err := prior(key, func(k string) (*cloud.EndpointKey, error) { return endpointKeyByIdem(ctx, tx, e, k) }, same); found || err != nil {
			first = old
			return err
		}
		live, err := tx.ListEndpointKeys(ctx, e.TenantID, e.ID, false)
		if err != nil {
			return err
		}
		if len(live) >= MaxKeysPerEndpoint {
			return &cloud.Error{Code: cloud.QuotaExceeded,
				Message: fmt.Sprintf("endpoint key limit reached: endpoint %s holds %d of %d keys (revoked ones do not count)", e.Name, len(live), MaxKeysPerEndpoint),
				Details: map[string]any{"resource": "endpoint_keys", "limit": MaxKeysPerEndpoint, "used": len(live), "requested": 1}}
		}
		k, secret := newEndpointKey(e, req.Name, req.Rate, req.Burst, key, s.now())
		if err := tx.CreateEndpointKey(ctx, k); err != nil {
			return asKeyRace(err, key)
		}
		if err := keyEvent(ctx, tx, k, EventEndpointKeyCreated, a.ID, k.CreatedAt,
			fmt.Sprintf("endpoint key %s (%s) made for endpoint %s: %d requests/s, bursts of %d", k.ID, k.Name, e.Name, k.Rate, k.Burst)); err != nil {
			return err
		}
		out, created = api.CreatedEndpointKey{Key: k, Secret: secret}, true
		return nil
	})
	if !created && err == nil && first != nil {
		return api.CreatedEndpointKey{Key: first}, false, nil
	}
	if !created {
		first, err = settleRace(ctx, s.store, first, err, func(tx cloud.Tx, id string) (*cloud.EndpointKey, error) { return tx.GetEndpointKey(ctx, id) }, same)
		if err != nil {
			return api.CreatedEndpointKey{}, false, err
		}
		return api.CreatedEndpointKey{Key: first}, false, nil
	}
	return out, err == nil, err
}

// newEndpointKey makes a key of endpoint e and its key string. The ID is
// hex, so the first "_" after "gpc_" ends it; the secret is base64url of
// 256 random bits.
func newEndpointKey(e *cloud.Endpoint, name string, rate, burst int, idem string, now time.Time) (*cloud.EndpointKey, string) {
	id := NewID(EndpointKeyPrefix)
	var secret [32]byte
	_, _ = rand.Read(secret[:])
	full := SecretPrefix + id + "_" + base64.RawURLEncoding.EncodeToString(secret[:])
	return &cloud.EndpointKey{ID: id, TenantID: e.TenantID, EndpointID: e.ID, Name: name, Hash: HashToken(full),
		Rate: rate, Burst: burst, IdempotencyKey: idem, CreatedAt: now}, full
}

// endpointKeyByIdem finds endpoint e's key made with idempotency key idem.
func endpointKeyByIdem(ctx context.Context, tx cloud.Tx, e *cloud.Endpoint, idem string) (*cloud.EndpointKey, error) {
	ks, err := tx.ListEndpointKeys(ctx, e.TenantID, e.ID, true)
	if err != nil {
		return nil, err
	}
	for _, k := range ks {
		if k.IdempotencyKey == idem {
			return k, nil
		}
	}
	return nil, NotFound("endpoint key", idem)
}

func keyEvent(ctx context.Context, tx cloud.Tx, k *cloud.EndpointKey, kind cloud.EventKind, actor string, at time.Time, reason string) error {
	details, err := json.Marshal(map[string]any{"endpoint_id": k.EndpointID, "key_id": k.ID, "key": k.Name})
	if err != nil {
		return err
	}
	return tx.AppendEvent(ctx, &cloud.Event{Time: at, Kind: kind, TenantID: k.TenantID, Actor: actor, Reason: reason, Details: details})
}

// Keys lists endpoint ref's keys (never their secrets), revoked ones too
// when all is set.
func (s *Endpoints) Keys(ctx context.Context, a Actor, ref string, all bool) ([]*cloud.EndpointKey, error) {
	if err := endpointUsers(a, "listing endpoint keys"); err != nil {
		return nil, err
	}
	var out []*cloud.EndpointKey
	err := s.tx(ctx, func(tx cloud.Tx) error {
		e, err := lookupEndpoint(ctx, tx, a, ref)
		if err != nil {
			return err
		}
		out, err = tx.ListEndpointKeys(ctx, e.TenantID, e.ID, all)
		return err
	})
	return out, err
}

// RevokeKey revokes key id of endpoint ref: from then on it opens
// nothing (a server that cached it trusts it for at most a second more,
// httpapi's key cache). Revoking a revoked key answers it as it is. A key
// of another endpoint or tenant answers like a missing one.
func (s *Endpoints) RevokeKey(ctx context.Context, a Actor, ref, id string) (*cloud.EndpointKey, error) {
	if err := endpointUsers(a, "revoking endpoint keys"); err != nil {
		return nil, err
	}
	var out *cloud.EndpointKey
	err := s.tx(ctx, func(tx cloud.Tx) error {
		e, err := lookupEndpoint(ctx, tx, a, ref)
		if err != nil {
			return err
		}
		k, err := Visible(ctx, a, "endpoint key", id, tx.GetEndpointKey)
		if err != nil {
			return err
		}
		if k.EndpointID != e.ID {
			return NotFound("endpoint key", id)
		}
		out = k
		if k.RevokedAt != nil {
			return nil
		}
		now := s.now()
		if err := tx.RevokeEndpointKey(ctx, k.ID, now); err != nil {
			return err
		}
		if out, err = tx.GetEndpointKey(ctx, k.ID); err != nil {
			return err
		}
		return keyEvent(ctx, tx, k, EventEndpointKeyRevoked, a.ID, now, fmt.Sprintf("endpoint key %s (%s) of endpoint %s revoked", k.ID, k.Name, e.Name))
	})
	return out, err
}

// keyTouchEvery is how stale a key's LastUsedAt may get: KeyOf writes it
// at most this often per key.
const keyTouchEvery = time.Minute

// IsEndpointKey reports whether secret has the form of an endpoint key
// ("gpc_ek-…"), as opposed to a user's or an agent's token.
func IsEndpointKey(secret string) bool {
	return strings.HasPrefix(secret, SecretPrefix+EndpointKeyPrefix)
}

// KeyOf finds the live key whose string is secret, with its endpoint: how
// a request's endpoint key is authenticated. A malformed, unknown or
// revoked key, and one whose endpoint is deleted, is NotFound; the caller
// answers all of them alike. It records the key's use (LastUsedAt) when
// the record is older than a minute.
func (s *Endpoints) KeyOf(ctx context.Context, secret string) (*cloud.EndpointKey, error) {
	gone := NotFound("endpoint key", "")
	rest, ok := strings.CutPrefix(secret, SecretPrefix)
	if !ok {
		return nil, gone
	}
	id, _, ok := strings.Cut(rest, "_")
	if !ok || !strings.HasPrefix(id, EndpointKeyPrefix) || len(id) > 64 {
		return nil, gone
	}
	var out *cloud.EndpointKey
	err := s.tx(ctx, func(tx cloud.Tx) error {
		out = nil
		k, err := tx.GetEndpointKey(ctx, id)
		if cloud.IsNotFound(err) {
			return gone
		}
		if err != nil {
			return err
		}
		if subtle.ConstantTimeCompare(k.Hash, HashToken(secret)) != 1 || k.RevokedAt != nil {
			return gone
		}
		e, err := tx.GetEndpoint(ctx, k.EndpointID)
		if err != nil {
			return err
		}
		if e.State == cloud.EndpointDeleted || e.TenantID != k.TenantID {
			return gone
		}
		now := s.now()
		if k.LastUsedAt == nil || now.Sub(*k.LastUsedAt) >= keyTouchEvery {
			if err := tx.RecordEndpointKeyUse(ctx, k.ID, now); err != nil {
				return err
			}
			k.LastUsedAt = &now
		}
		out = k
		return nil
	})
	return out, err
}
