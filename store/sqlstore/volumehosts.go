package sqlstore

import (
	"context"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
)

// Where volumes' data lives: cloud.VolumeHostTx.

// RecordVolumeHosts upserts one row per volume.
func (t *tx) RecordVolumeHosts(ctx context.Context, ids []string, hostID string, at time.Time) error {
	if hostID == "" {
		return invalidf("volume host: no host id")
	}
	at = normTime(at)
	for _, id := range ids {
		if err := t.mustExist(ctx, "volumes", "volume", id); err != nil {
			return err
		}
		if _, err := t.exec(ctx, "set host of volume "+id,
			"INSERT INTO volume_hosts (volume_id, host_id, updated_at) VALUES (?, ?, ?)"+
				" ON CONFLICT (volume_id) DO UPDATE SET host_id = excluded.host_id, updated_at = excluded.updated_at",
			id, hostID, t.s.d.timeArg(at)); err != nil {
			return err
		}
	}
	return nil
}

func (t *tx) GetVolumeHost(ctx context.Context, volumeID string) (*cloud.VolumeHost, error) {
	return one(ctx, t, "get host of volume "+volumeID, func() error { return notFoundf("no host recorded for volume %s", volumeID) },
		"SELECT volume_id, host_id, updated_at FROM volume_hosts WHERE volume_id = ?", []any{volumeID},
		func(sc scanner) (*cloud.VolumeHost, error) {
			var h cloud.VolumeHost
			err := sc.Scan(&h.VolumeID, &h.HostID, timeCol{&h.UpdatedAt})
			return &h, err
		})
}
