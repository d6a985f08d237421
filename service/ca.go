package service

import (
	"context"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/internal/pki"
)

// Names of the CA's cluster secrets (cloud.Tx.ClusterSecret).
const (
	secretCACert = "ca.crt"
	secretCAKey  = "ca.key"
)

// LoadCA reads the cloud's CA from the store, making it on the very first
// start. Replicas starting together race on one insert: the loser reads
// the winner's.
func LoadCA(ctx context.Context, st cloud.Store, now time.Time) (*pki.CA, error) {
	var ca *pki.CA
	read := func(tx cloud.Tx) error {
		c, err := tx.ClusterSecret(ctx, secretCACert)
		if err != nil {
			return err
		}
		k, err := tx.ClusterSecret(ctx, secretCAKey)
		if err != nil {
			return err
		}
		ca, err = pki.LoadCA(c, k)
		return err
	}
	err := st.Tx(ctx, read)
	if err == nil || !cloud.IsNotFound(err) {
		return ca, err
	}
	fresh, err := pki.NewCA("gpucloud CA", now)
	if err != nil {
		return nil, err
	}
	key, err := pki.EncodeKey(fresh.Key)
	if err != nil {
		return nil, err
	}
	err = st.Tx(ctx, func(tx cloud.Tx) error {
		if err := tx.CreateClusterSecret(ctx, secretCACert, pki.EncodeCert(fresh.Cert), now); err != nil {
			return err
		}
		return tx.CreateClusterSecret(ctx, secretCAKey, key, now)
	})
	if cloud.IsConflict(err) {
		return ca, st.Tx(ctx, read)
	}
	if err != nil {
		return nil, err
	}
	return fresh, nil
}
