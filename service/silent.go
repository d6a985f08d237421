package service

import (
	"context"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
)

// healthActor names the heartbeat watcher in the events it writes.
const healthActor = "health"

// The silent-host rule. A host is silent when its agent has not reached
// the server for longer than the heartbeat timeout: its LastHeartbeat is
// the time of its last sign of life, which is an accepted heartbeat
// (Agents.Heartbeat) or a heartbeat the server's own rate limit refused
// (Agents.RefusedHeartbeat). A refused heartbeat still came from the
// host's agent, over its credential, so it proves the host alive just as
// well; only what it reported is lost, and the agent sends that again
// once it is let through. So the server's throttling, whoever caused it,
// never makes a host silent: only an agent that stops reaching the server
// does (the host is down, cut off, or its agent stopped or cannot read
// its GPUs).
//
// The API records refused heartbeats at most once a second per host (see
// httpapi's ratelimit.go), and a record is a single Heartbeat write that
// does not change the host's version, so a flood of refused heartbeats
// costs the store one small write a second. The rule lives in the store,
// not in a replica's memory, so it holds when the watcher runs on another
// replica than the one that refused the heartbeat.

// MarkSilentHosts marks schedulable or cordoned hosts whose last sign of
// life (LastHeartbeat, above) is older than timeout as unhealthy, and
// moves every instance holding an allocation there to lost (MoveInstance:
// releasing it, with its event). It returns the hosts it marked. The
// scheduler notices the host version change and rebuilds its fleet. The
// heartbeat watcher (controller.HeartbeatWatcher) runs it.
func MarkSilentHosts(ctx context.Context, st cloud.Store, now time.Time, timeout time.Duration) ([]string, error) {
	return MarkSilentHostsSince(ctx, st, now, timeout, time.Time{})
}

// MarkSilentHostsSince is MarkSilentHosts for a watcher that has been
// watching since watching: a host's silence counts from its last sign of
// life or from watching, whichever is later. While no server was running
// (a restart of a single server, or a failover that took longer than
// the timeout) no agent could reach one, so that time proves nothing
// about the hosts: counted, it would mark every host lost the moment the
// server came back, before their agents reconnected.
func MarkSilentHostsSince(ctx context.Context, st cloud.Store, now time.Time, timeout time.Duration, watching time.Time) ([]string, error) {
	if now.Sub(watching) <= timeout {
		// Not watching for a whole timeout yet: no host can be silent.
		return nil, nil
	}
	var marked []string
	err := st.Tx(ctx, func(tx cloud.Tx) error {
		marked = marked[:0]
		// Only the silent hosts, through an index: at thousands of
		// hosts, reading every host with its spec each round cost a
		// second of CPU and conflicts with the heartbeats' writes.
		hosts, err := tx.ListSilentHosts(ctx, now.Add(-timeout))
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

// RefusedHeartbeat records a sign of life of a's host: a heartbeat the
// API's rate limit refused (see the silent-host rule above). It sets the
// host's LastHeartbeat and nothing else, its version included, as a
// heartbeat that reports nothing new does. An unhealthy host stays
// unhealthy, with its LastHeartbeat as it was: only a heartbeat that is
// let through, with what it reports, brings it back (Heartbeat).
func (s *Agents) RefusedHeartbeat(ctx context.Context, a Actor) error {
	if err := agentOnly(a); err != nil {
		return err
	}
	return s.tx(ctx, func(tx cloud.Tx) error {
		h, err := getHost(ctx, tx, a.HostID)
		if err != nil {
			return err
		}
		if h.State == fleet.Unhealthy {
			return nil
		}
		return tx.Heartbeat(ctx, h.ID, s.now())
	})
}
