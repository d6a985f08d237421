package service_test

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/internal/pki"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

func caWrap(t *testing.T, source string) *service.CAKeyWrap {
	t.Helper()
	text, err := pki.NewWrapKey()
	if err != nil {
		t.Fatal(err)
	}
	k, err := pki.ParseWrapKey(text)
	if err != nil {
		t.Fatal(err)
	}
	return &service.CAKeyWrap{Key: k, Source: source}
}

// storedCAKey is the CA key's value as the store holds it.
func storedCAKey(t *testing.T, st cloud.Store) []byte {
	t.Helper()
	var v []byte
	if err := st.Tx(context.Background(), func(tx cloud.Tx) (err error) { v, err = tx.ClusterSecret(context.Background(), "ca.key"); return }); err != nil {
		t.Fatal(err)
	}
	return v
}

func loadCA(t *testing.T, st cloud.Store, w *service.CAKeyWrap) (*pki.CA, service.CAKeyState) {
	t.Helper()
	ca, state, err := service.LoadCA(context.Background(), st, time.Now(), w)
	if err != nil {
		t.Fatalf("LoadCA: %v", err)
	}
	return ca, state
}

// assertSealed checks that the stored CA key shows nothing of the key and
// opens, once, to ca's key with w.
func assertSealed(t *testing.T, st cloud.Store, ca *pki.CA, w *service.CAKeyWrap) {
	t.Helper()
	pem, err := pki.EncodeKey(ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	stored := storedCAKey(t, st)
	if bytes.Contains(stored, []byte("PRIVATE KEY")) || bytes.Contains(stored, pem) || !pki.IsSealed(stored) {
		t.Fatalf("stored CA key is not encrypted: %.60q", stored)
	}
	plain, err := pki.OpenKey(w.Key, stored, "gpucloud-ca-key-v1")
	if err != nil || !bytes.Equal(plain, pem) {
		t.Fatalf("the stored CA key does not open to the CA's key (encrypted twice?): %v", err)
	}
}

// TestLoadCAEncrypted: with a key, a new CA's key is stored encrypted and
// reads back; a wrong key or none is a *CAKeyError that names the problem
// and changes nothing; without a key a plaintext key still works.
func TestLoadCAEncrypted(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		w := caWrap(t, "/etc/gpucloud/ca.key")
		ca, state := loadCA(t, st, w)
		if state != service.CAKeySealed {
			t.Errorf("state of a new CA = %v, want sealed", state)
		}
		assertSealed(t, st, ca, w)
		before := storedCAKey(t, st)
		back, state := loadCA(t, st, w)
		backPEM, _ := pki.EncodeKey(back.Key)
		caPEM, _ := pki.EncodeKey(ca.Key)
		if back.Fingerprint() != ca.Fingerprint() || state != service.CAKeySealed || !bytes.Equal(backPEM, caPEM) {
			t.Fatalf("round trip: %s (%v), want %s", back.Fingerprint(), state, ca.Fingerprint())
		}
		for _, c := range []struct {
			name    string
			wrap    *service.CAKeyWrap
			problem service.CAKeyProblem
			says    string
		}{
			{"wrong key", caWrap(t, "/tmp/other.key"), service.CAKeyWrongKey,
				"the CA key in the database does not decrypt with the key from /tmp/other.key: wrong key?"},
			{"no key", nil, service.CAKeyNeeded,
				"the CA key in the database is encrypted and no key to decrypt it was given (--ca-encryption-key-file or $GPUCLOUD_CA_ENCRYPTION_KEY)"},
		} {
			_, _, err := service.LoadCA(context.Background(), st, time.Now(), c.wrap)
			var ke *service.CAKeyError
			if !errors.As(err, &ke) || ke.Problem != c.problem || err.Error() != c.says {
				t.Errorf("%s: %v, want %q", c.name, err, c.says)
			}
			if !bytes.Equal(storedCAKey(t, st), before) {
				t.Errorf("%s changed the stored key", c.name)
			}
		}
	})
}

// TestLoadCAUpgradesPlaintext: a CA key stored in plaintext (a server
// without a key) is encrypted by the first start with a key, once, and
// later starts read it; starts that race for the upgrade all load the
// same CA, one of them upgrades it and none encrypts it twice.
func TestLoadCAUpgradesPlaintext(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		ca, state := loadCA(t, st, nil)
		if state != service.CAKeyPlain || pki.IsSealed(storedCAKey(t, st)) {
			t.Fatalf("without a key: state %v", state)
		}
		if again, state := loadCA(t, st, nil); again.Fingerprint() != ca.Fingerprint() || state != service.CAKeyPlain {
			t.Fatalf("plaintext reload: %s, %v", again.Fingerprint(), state)
		}
		w := caWrap(t, "key")
		const starts = 8
		states := make([]service.CAKeyState, starts)
		fps := make([]string, starts)
		errs := make([]error, starts)
		var wg sync.WaitGroup
		for i := range starts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var c *pki.CA
				c, states[i], errs[i] = service.LoadCA(context.Background(), st, time.Now(), w)
				if c != nil {
					fps[i] = c.Fingerprint()
				}
			}()
		}
		wg.Wait()
		upgraded := 0
		for i := range starts {
			if errs[i] != nil || fps[i] != ca.Fingerprint() {
				t.Fatalf("start %d: %s, %v", i, fps[i], errs[i])
			}
			if states[i] == service.CAKeyUpgraded {
				upgraded++
			}
		}
		if upgraded != 1 {
			t.Errorf("%d starts upgraded the key, want 1 (states %v)", upgraded, states)
		}
		assertSealed(t, st, ca, w)
		if _, state := loadCA(t, st, w); state != service.CAKeySealed {
			t.Errorf("a start after the upgrade: %v, want sealed", state)
		}
	})
}

// TestLoadCAConcurrentFirstStart: replicas making the CA together with a
// key all end with the one CA, stored encrypted once.
func TestLoadCAConcurrentFirstStart(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		w := caWrap(t, "key")
		fps := make([]string, 6)
		var wg sync.WaitGroup
		for i := range fps {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, _, err := service.LoadCA(context.Background(), st, time.Now(), w)
				if err != nil {
					t.Errorf("start %d: %v", i, err)
					return
				}
				fps[i] = c.Fingerprint()
			}()
		}
		wg.Wait()
		ca, _ := loadCA(t, st, w)
		for i, fp := range fps {
			if fp != ca.Fingerprint() {
				t.Errorf("start %d loaded CA %s, the store holds %s", i, fp, ca.Fingerprint())
			}
		}
		assertSealed(t, st, ca, w)
	})
}

// TestRotateCAKey: the key is re-encrypted under the new key; the old one
// no longer opens it; a wrong old key changes nothing; a plaintext key is
// encrypted with no old key.
func TestRotateCAKey(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		ctx := context.Background()
		ca, _ := loadCA(t, st, nil)
		first, second := caWrap(t, "first"), caWrap(t, "second")
		if err := service.RotateCAKey(ctx, st, first, second); err == nil {
			t.Error("rotate a plaintext key with an old key: accepted")
		}
		if err := service.RotateCAKey(ctx, st, nil, first); err != nil {
			t.Fatal(err)
		}
		assertSealed(t, st, ca, first)
		before := storedCAKey(t, st)
		var ke *service.CAKeyError
		if err := service.RotateCAKey(ctx, st, second, first); !errors.As(err, &ke) || ke.Problem != service.CAKeyWrongKey {
			t.Errorf("rotate with a wrong old key: %v", err)
		}
		if !bytes.Equal(storedCAKey(t, st), before) {
			t.Error("a refused rotation changed the stored key")
		}
		if err := service.RotateCAKey(ctx, st, first, second); err != nil {
			t.Fatal(err)
		}
		assertSealed(t, st, ca, second)
		if _, _, err := service.LoadCA(ctx, st, time.Now(), first); !errors.As(err, &ke) || ke.Problem != service.CAKeyWrongKey {
			t.Errorf("start with the old key after rotation: %v", err)
		}
		if back, _ := loadCA(t, st, second); back.Fingerprint() != ca.Fingerprint() {
			t.Error("the rotated key loads another CA")
		}
	})
}
