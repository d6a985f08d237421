package service

import (
	"context"
	"fmt"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
)

// NoticeSpotReclaim gives spot instance in (as read in tx) a reclaim
// notice: it will be stopped (its request's interruption behaviour is
// stop) or terminated at now+notice. reason is the cloud.Reclaim* reason,
// forID what the capacity is wanted for (empty: nothing in particular),
// and why the event's explanation of it. It writes the instance and a
// spot.interruption event naming actor, and reports whether it did: an
// instance that changed since it was read is left as it is (false, nil).
func NoticeSpotReclaim(ctx context.Context, tx cloud.Tx, in *cloud.Instance, reason, forID, why string, notice time.Duration, actor string, now time.Time) (bool, error) {
	action := cloud.ActionTerminate
	if in.SpotRequestID != "" {
		r, err := tx.GetSpotRequest(ctx, in.SpotRequestID)
		if err != nil && !cloud.IsNotFound(err) {
			return false, err
		}
		if err == nil && r.Interruption == cloud.ActionStop {
			action = cloud.ActionStop
		}
	}
	next := *in
	next.Interruption = &cloud.Interruption{Action: action, Reason: reason, NoticedAt: now,
		Deadline: now.Add(notice), For: forID}
	next.UpdatedAt = now
	if err := tx.UpdateInstance(ctx, &next); err != nil {
		if cloud.IsConflict(err) {
			return false, nil
		}
		return false, err
	}
	*in = next
	details := fmt.Sprintf(`{"action":%q,"reason":%q,"deadline":%q,"notice_seconds":%d}`,
		action, reason, in.Interruption.Deadline.UTC().Format(time.RFC3339Nano), int(notice/time.Second))
	err := tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: cloud.EventSpotInterruption, TenantID: in.TenantID,
		InstanceID: in.ID, HostID: in.HostID, Reason: fmt.Sprintf("spot %s in %s: %s", action, notice, why),
		Actor: actor, Details: []byte(details)})
	return err == nil, err
}
