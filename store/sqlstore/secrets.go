package sqlstore

import (
	"context"
	"time"
)

func (t *tx) CreateClusterSecret(ctx context.Context, name string, value []byte, at time.Time) error {
	if name == "" || len(value) == 0 {
		return invalidf("cluster secret needs a name and a value")
	}
	n, err := t.execN(ctx, "create cluster secret "+name,
		"INSERT INTO cluster_secrets (name, value, created_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
		name, string(value), t.s.d.timeArg(normTime(at)))
	if err != nil {
		return err
	}
	if n == 0 {
		return conflictf("cluster secret %s already exists", name)
	}
	return nil
}

func (t *tx) ClusterSecret(ctx context.Context, name string) ([]byte, error) {
	v, err := one(ctx, t, "get cluster secret "+name, func() error { return notFoundf("cluster secret %s not found", name) },
		"SELECT value FROM cluster_secrets WHERE name = ?", []any{name}, func(sc scanner) (*string, error) {
			var s string
			err := sc.Scan(&s)
			return &s, err
		})
	if err != nil {
		return nil, err
	}
	return []byte(*v), nil
}

func (t *tx) UpdateClusterSecret(ctx context.Context, name string, old, value []byte) error {
	if name == "" || len(value) == 0 {
		return invalidf("cluster secret needs a name and a value")
	}
	n, err := t.execN(ctx, "update cluster secret "+name,
		"UPDATE cluster_secrets SET value = ? WHERE name = ? AND value = ?", string(value), name, string(old))
	if err != nil || n > 0 {
		return err
	}
	if _, err := t.ClusterSecret(ctx, name); err != nil {
		return err
	}
	return conflictf("cluster secret %s changed since it was read", name)
}
