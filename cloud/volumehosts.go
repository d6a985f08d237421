package cloud

import (
	"context"
	"time"
)

// VolumeHost is where a volume's data lives: the host of the last
// instance placed with it (its directory is on that host unless the
// hosts share their volumes; docs/ACCESS.md, "Moving data").
type VolumeHost struct {
	VolumeID  string    `json:"volume_id"`
	HostID    string    `json:"host_id"`
	UpdatedAt time.Time `json:"updated_at"`
}

// VolumeHostTx records where volumes' data lives.
type VolumeHostTx interface {
	// RecordVolumeHosts records hostID as the host of each volume of ids
	// (replacing what was recorded); NotFound when a volume does not
	// exist.
	RecordVolumeHosts(ctx context.Context, ids []string, hostID string, at time.Time) error
	// GetVolumeHost is the recorded host of a volume; NotFound when none
	// is recorded.
	GetVolumeHost(ctx context.Context, volumeID string) (*VolumeHost, error)
}
