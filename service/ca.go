package service

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/internal/pki"
)

// Names of the CA's cluster secrets (cloud.Tx.ClusterSecret).
const (
	secretCACert = "ca.crt"
	secretCAKey  = "ca.key"
)

// caKeyPurpose is the associated data of the CA key's encryption: a value
// sealed for anything else does not open as the CA key.
const caKeyPurpose = "gpucloud-ca-key-v1"

// CAKeyWrap is the operator's key that encrypts the CA's private key in the
// store (AES-256-GCM, pki.SealKey). Source names where it came from (a
// file's path, an environment variable), for errors.
type CAKeyWrap struct {
	Key    []byte
	Source string
}

// CAKeyState says how the CA's private key is kept in the store after
// LoadCA.
type CAKeyState int

const (
	// CAKeyPlain: unencrypted (no CAKeyWrap was given).
	CAKeyPlain CAKeyState = iota
	// CAKeySealed: encrypted, as it was already, or as it was made.
	CAKeySealed
	// CAKeyUpgraded: it was plaintext and this start encrypted it.
	CAKeyUpgraded
)

// CAKeyProblem is why the CA's key in the store cannot be read.
type CAKeyProblem int

const (
	// CAKeyWrongKey: it is encrypted and does not decrypt with the key
	// given.
	CAKeyWrongKey CAKeyProblem = iota + 1
	// CAKeyNeeded: it is encrypted and no key was given.
	CAKeyNeeded
)

// CAKeyError is a CA key in the store that this server cannot read. The
// store is left as it was.
type CAKeyError struct {
	Problem CAKeyProblem
	Source  string // the key's source, for CAKeyWrongKey
}

func (e *CAKeyError) Error() string {
	if e.Problem == CAKeyNeeded {
		return "the CA key in the database is encrypted and no key to decrypt it was given (--ca-encryption-key-file or $GPUCLOUD_CA_ENCRYPTION_KEY)"
	}
	return fmt.Sprintf("the CA key in the database does not decrypt with the key from %s: wrong key?", e.Source)
}

// LoadCA reads the cloud's CA from the store, making it on the very first
// start. Replicas starting together race on one insert: the loser reads
// the winner's. With wrap, the CA's key is kept encrypted: a new one is
// stored encrypted and a plaintext one is encrypted in the transaction that
// reads it (a compare and swap, so that replicas upgrading it together
// write it once); without wrap, a plaintext key is read as it is and an
// encrypted one is a *CAKeyError, as is one that wrap does not open.
func LoadCA(ctx context.Context, st cloud.Store, now time.Time, wrap *CAKeyWrap) (*pki.CA, CAKeyState, error) {
	var (
		ca    *pki.CA
		state CAKeyState
	)
	read := func(tx cloud.Tx) error {
		c, err := tx.ClusterSecret(ctx, secretCACert)
		if err != nil {
			return err
		}
		k, err := tx.ClusterSecret(ctx, secretCAKey)
		if err != nil {
			return err
		}
		plain, s, err := openCAKey(k, wrap)
		if err != nil {
			return err
		}
		if ca, err = pki.LoadCA(c, plain); err != nil {
			return err
		}
		if state = s; s == CAKeyUpgraded {
			sealed, err := pki.SealKey(wrap.Key, plain, caKeyPurpose)
			if err != nil {
				return err
			}
			return tx.UpdateClusterSecret(ctx, secretCAKey, k, sealed)
		}
		return nil
	}
	err := st.Tx(ctx, read)
	if cloud.IsConflict(err) {
		// Another replica upgraded the key between our read and write:
		// read what it wrote.
		err = st.Tx(ctx, read)
	}
	if err == nil || !cloud.IsNotFound(err) {
		return ca, state, err
	}
	fresh, stored, err := newCA(now, wrap)
	if err != nil {
		return nil, 0, err
	}
	err = st.Tx(ctx, func(tx cloud.Tx) error {
		if err := tx.CreateClusterSecret(ctx, secretCACert, pki.EncodeCert(fresh.Cert), now); err != nil {
			return err
		}
		return tx.CreateClusterSecret(ctx, secretCAKey, stored, now)
	})
	if cloud.IsConflict(err) {
		err = st.Tx(ctx, read)
		return ca, state, err
	}
	if err != nil {
		return nil, 0, err
	}
	if wrap != nil {
		return fresh, CAKeySealed, nil
	}
	return fresh, CAKeyPlain, nil
}

// newCA makes the cloud's CA and the key's value as stored (sealed with
// wrap when given).
func newCA(now time.Time, wrap *CAKeyWrap) (*pki.CA, []byte, error) {
	fresh, err := pki.NewCA("gpucloud CA", now)
	if err != nil {
		return nil, nil, err
	}
	key, err := pki.EncodeKey(fresh.Key)
	if err != nil {
		return nil, nil, err
	}
	if wrap != nil {
		if key, err = pki.SealKey(wrap.Key, key, caKeyPurpose); err != nil {
			return nil, nil, err
		}
	}
	return fresh, key, nil
}

// openCAKey answers the CA key's PEM from its stored value and the state
// it will be in: a sealed value opened with wrap; a plaintext one as it
// is, to be upgraded when wrap is given.
func openCAKey(stored []byte, wrap *CAKeyWrap) ([]byte, CAKeyState, error) {
	switch {
	case !pki.IsSealed(stored) && wrap == nil:
		return stored, CAKeyPlain, nil
	case !pki.IsSealed(stored):
		return stored, CAKeyUpgraded, nil
	case wrap == nil:
		return nil, 0, &CAKeyError{Problem: CAKeyNeeded}
	}
	plain, err := pki.OpenKey(wrap.Key, stored, caKeyPurpose)
	if errors.Is(err, pki.ErrUnseal) {
		return nil, 0, &CAKeyError{Problem: CAKeyWrongKey, Source: wrap.Source}
	}
	return plain, CAKeySealed, err
}

// RotateCAKey re-encrypts the CA's key in the store from old (nil: it is
// plaintext now) to next, in one transaction. Replicas that are running
// keep the CA they loaded; each must be given next before its next start.
// A key that old does not open is a *CAKeyError and changes nothing.
func RotateCAKey(ctx context.Context, st cloud.Store, old, next *CAKeyWrap) error {
	if next == nil {
		return errors.New("rotate the CA key: no new key")
	}
	return st.Tx(ctx, func(tx cloud.Tx) error {
		k, err := tx.ClusterSecret(ctx, secretCAKey)
		if err != nil {
			return err
		}
		if !pki.IsSealed(k) && old != nil {
			return errors.New("the CA key in the database is not encrypted: give only the new key")
		}
		plain, _, err := openCAKey(k, old)
		if err != nil {
			return err
		}
		if _, err := pki.ParseKey(plain); err != nil {
			return fmt.Errorf("the CA key in the database: %w", err)
		}
		sealed, err := pki.SealKey(next.Key, plain, caKeyPurpose)
		if err != nil {
			return err
		}
		return tx.UpdateClusterSecret(ctx, secretCAKey, k, sealed)
	})
}
