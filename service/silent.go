package service

import (
	"context"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
)

// healthActor names the heartbeat watcher in the events it writes.
const healthActor = "health"

// MarkSilentHosts marks schedulable or cordoned hosts whose last heartbeat
// is older than timeout as unhealthy, and moves every instance holding an
// allocation there to lost (MoveInstance: releasing it, with its
// event). It returns the hosts it marked. The scheduler notices the host
// version change and rebuilds its fleet. The heartbeat watcher
// (controller.HeartbeatWatcher) runs it.
func MarkSilentHosts(ctx context.Context, st cloud.Store, now time.Time, timeout time.Duration) ([]string, error) {
	var marked []string
	err := st.Tx(ctx, func(tx cloud.Tx) error {
		marked = marked[:0]
		hosts, err := tx.ListHosts(ctx)
		if err != nil {
			return err
		}
		for _, h := range hosts {
			if h.State == fleet.Unhealthy || now.Sub(h.LastHeartbeat) <= timeout {
				continue
			}
			from := h.State
			h.State = fleet.Unhealthy
			if err := tx.PutHost(ctx, h); err != nil {
				return err
			}
			reason := "no heartbeat since " + h.LastHeartbeat.UTC().Format(time.RFC3339)
			if err := tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: cloud.EventHostUnhealthy, HostID: h.ID,
				Reason: reason + " (was " + string(from) + ")", Actor: healthActor}); err != nil {
				return err
			}
			ins, err := tx.ListInstances(ctx, cloud.InstanceFilter{HostID: h.ID,
				States: cloud.HoldingStates()})
			if err != nil {
				return err
			}
			for _, in := range ins {
				if err := MoveInstance(ctx, tx, in, Move{To: cloud.Lost,
					Reason: "host " + h.ID + " lost: " + reason, Actor: healthActor}, now); err != nil {
					return err
				}
			}
			marked = append(marked, h.ID)
		}
		return nil
	})
	return marked, err
}
