package controlplane

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/gpucloud/gpucloud/internal/pki"
	"github.com/gpucloud/gpucloud/service"
)

// EnvCAKey carries the key that encrypts the CA's private key in the store
// (64 hex digits or base64), for a server that is not given a file.
const EnvCAKey = "GPUCLOUD_CA_ENCRYPTION_KEY"

// CAKeyFrom reads the key that encrypts the CA's private key: from file
// when given, else from envValue (the value of $GPUCLOUD_CA_ENCRYPTION_KEY);
// nil when neither is given. Both at once is an error, so that a server
// never silently prefers one. Errors never show the key.
func CAKeyFrom(file, envValue string) (*service.CAKeyWrap, error) {
	switch {
	case file != "" && envValue != "":
		return nil, fmt.Errorf("the CA encryption key is given twice, in %s and in $%s: give one", file, EnvCAKey)
	case file != "":
		text, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("the CA encryption key: %w", err)
		}
		k, err := pki.ParseWrapKey(text)
		if err != nil {
			return nil, fmt.Errorf("the CA encryption key in %s: %w", file, err)
		}
		return &service.CAKeyWrap{Key: k, Source: file}, nil
	case envValue != "":
		k, err := pki.ParseWrapKey([]byte(envValue))
		if err != nil {
			return nil, fmt.Errorf("$%s: %w", EnvCAKey, err)
		}
		return &service.CAKeyWrap{Key: k, Source: "$" + EnvCAKey}, nil
	}
	return nil, nil
}

// EnsureCAKeyFile makes a new random CA encryption key in path (0600) when
// there is no file there, as `gpucloud up` does in its data directory; an
// existing file is kept as it is. It answers whether it made one.
func EnsureCAKeyFile(path string) (bool, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	k, err := pki.NewWrapKey()
	if err == nil {
		_, err = f.Write(k)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return false, fmt.Errorf("make the CA encryption key %s: %w", path, err)
	}
	return true, nil
}

// RotateCAKey re-encrypts the CA's private key in the store at db from the
// key in oldFile ("" when it is stored unencrypted) to the key in newFile
// (service.RotateCAKey).
func RotateCAKey(ctx context.Context, db, oldFile, newFile string) error {
	if newFile == "" {
		return errors.New("give the new key's file")
	}
	old, err := CAKeyFrom(oldFile, "")
	if err != nil {
		return err
	}
	next, err := CAKeyFrom(newFile, "")
	if err != nil {
		return err
	}
	st, err := OpenStore(ctx, db)
	if err != nil {
		return err
	}
	defer st.Close()
	return service.RotateCAKey(ctx, st, old, next)
}
