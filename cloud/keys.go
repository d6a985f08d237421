package cloud

import (
	"context"
	"time"
)

// Key is one of a tenant's SSH public keys: the keys that may open an SSH
// session to the tenant's instances (gpucloud instances ssh). The server
// keeps the public half only; the private key never leaves its owner.
type Key struct {
	ID       string `json:"id"`
	TenantID string `json:"tenant_id"`
	// Name is unique among the tenant's keys.
	Name string `json:"name"`
	// PublicKey is the key as one authorized_keys line: type, base64 and
	// the comment it was imported with (no options).
	PublicKey string `json:"public_key"`
	// Type is the key's algorithm as SSH names it (ssh-ed25519, ssh-rsa,
	// ecdsa-sha2-nistp256, sk-ssh-ed25519@openssh.com, ...).
	Type string `json:"type"`
	// Bits is the key's size (RSA modulus, ECDSA curve; 256 for ed25519).
	Bits int `json:"bits,omitempty"`
	// Fingerprint is the key's SHA256 fingerprint as ssh-keygen -l prints
	// it ("SHA256:" and unpadded base64); unique among the tenant's keys.
	Fingerprint string    `json:"fingerprint"`
	CreatedAt   time.Time `json:"created_at"`
	// IdempotencyKey makes a retried import return the first key (unique
	// per tenant; empty: not idempotent).
	IdempotencyKey string `json:"-"`
}

// Owner implements Owned.
func (k *Key) Owner() string { return k.TenantID }

// KeyTx is the store's part for SSH public keys.
type KeyTx interface {
	// CreateKey inserts a key; Conflict if the tenant has a key of that
	// name or fingerprint, or the idempotency key was used (the first key
	// is then copied into k, as CreateInstance does).
	CreateKey(ctx context.Context, k *Key) error
	GetKey(ctx context.Context, id string) (*Key, error)
	// ListKeys lists a tenant's keys in ID order, every tenant's when
	// tenantID is empty.
	ListKeys(ctx context.Context, tenantID string) ([]*Key, error)
	// DeleteKey removes a key (its row: a deleted key is gone, and can no
	// longer open a session); NotFound if there is none of that ID.
	DeleteKey(ctx context.Context, id string) error
}
