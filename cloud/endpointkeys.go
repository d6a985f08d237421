package cloud

import (
	"context"
	"time"
)

// EndpointKey is a credential a tenant makes for one of its endpoints,
// to call it from apps (docs/ENDPOINTS.md, "Endpoint keys"): it opens
// that endpoint's invoke routes (RoleInvoke) and nothing else, at its own
// request rate. The key string ("gpc_ek-…_<secret>") is shown once, when
// the key is made; the store keeps only its Hash.
type EndpointKey struct {
	ID         string `json:"id"`
	TenantID   string `json:"tenant_id"`
	EndpointID string `json:"endpoint_id"`
	Name       string `json:"name"`
	// Hash is SHA-256 of the whole key string.
	Hash []byte `json:"-"`
	// Rate and Burst are the key's request limit: requests per second,
	// and how many at once.
	Rate  int `json:"rate"`
	Burst int `json:"burst"`

	IdempotencyKey string    `json:"-"`
	CreatedAt      time.Time `json:"created_at"`
	// LastUsedAt is when the key last authenticated a request, to within
	// a minute; nil before its first.
	LastUsedAt *time.Time `json:"last_used_at,omitempty"`
	// RevokedAt is when the key stopped opening anything.
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
}

// Owner implements Owned.
func (k *EndpointKey) Owner() string { return k.TenantID }

// EndpointKeyTx is the store's part for endpoint keys.
type EndpointKeyTx interface {
	// CreateEndpointKey inserts a key; Conflict if the idempotency key was
	// used for the endpoint (the first key is then copied into k, and the
	// Conflict's details carry its "existing_id").
	CreateEndpointKey(ctx context.Context, k *EndpointKey) error
	// GetEndpointKey reads a key, revoked or not.
	GetEndpointKey(ctx context.Context, id string) (*EndpointKey, error)
	// ListEndpointKeys lists keys in ID order: a tenant's (every tenant's
	// when empty), of one endpoint when endpointID is set, revoked ones
	// too when all is set.
	ListEndpointKeys(ctx context.Context, tenantID, endpointID string, all bool) ([]*EndpointKey, error)
	// RevokeEndpointKey sets a live key's RevokedAt; a revoked one keeps
	// its first. NotFound when there is no such key.
	RevokeEndpointKey(ctx context.Context, id string, at time.Time) error
	// RecordEndpointKeyUse sets a key's LastUsedAt to at.
	RecordEndpointKeyUse(ctx context.Context, id string, at time.Time) error
}
