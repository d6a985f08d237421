package service

import (
	"context"

	"github.com/gpucloud/gpucloud/cloud"
)

// volumeKinds are the event kinds that may name a volume in their
// details ("volume_id"): its own life, the copies into and out of it
// while it was detached, and the direct copies the agents reported.
var volumeKinds = []cloud.EventKind{EventVolumeCreated, EventVolumeAttached, EventVolumeDetached, EventVolumeDeleted,
	EventVolumeFilesStarted, EventVolumeFilesEnded, cloud.EventSessionDirect}

// Events answers one page of the events of a volume actor a may see,
// oldest first, after the event ID after, at most limit (all when 0), and
// the after of the next page (0 at the end): its creation, attachments,
// detachments and deletion; each copy while it was detached (who, from
// which host, how long: there is no instance to record them on); and what
// the agents reported of its direct copies. A copy while it is attached is
// a session of its instance (GET /v1/instances/{id}/events). A deleted
// volume's events stay readable: they are its audit trail.
func (s *Volumes) Events(ctx context.Context, a Actor, id string, after int64, limit int) (evs []*cloud.Event, next int64, err error) {
	err = s.tx(ctx, func(tx cloud.Tx) error {
		v, err := Visible(ctx, a, "volume", id, tx.GetVolume)
		if err != nil {
			return err
		}
		evs, next, err = pageEvents(limit, func(fn func(*cloud.Event) bool) error {
			return scanNamedEvents(ctx, tx, v.TenantID, volumeKinds, "volume_id", v.ID, after, fn)
		})
		return err
	})
	return evs, next, err
}
