package service

import (
	"context"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
)

// WithdrawGroupNotice takes back the scale-in notice of a group member that
// took a completion lock (or was protected) before its deadline: a held
// instance is never scaled in. The metadata instance-action disappears with
// it; an event says why.
func WithdrawGroupNotice(ctx context.Context, tx cloud.Tx, in *cloud.Instance, actor string, now time.Time) error {
	if in.Interruption == nil {
		return nil
	}
	reason := in.Interruption.Reason
	in.Interruption = nil
	in.UpdatedAt = now
	if err := tx.UpdateInstance(ctx, in); err != nil {
		return err
	}
	return tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: cloud.EventGroupScaling, TenantID: in.TenantID,
		InstanceID: in.ID, HostID: in.HostID, Actor: actor,
		Reason:  "scale-in notice (" + reason + ") withdrawn: the instance is protected or holds a completion lock",
		Details: []byte(`{"group_id":"` + in.GroupID + `"}`)})
}
