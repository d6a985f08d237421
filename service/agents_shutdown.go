package service

import (
	"context"
	"slices"

	"github.com/gpucloud/gpucloud/cloud"
)

// ShutDown records that a's host shut down cleanly, its workloads stopped
// by its own agent, which is not a host failure: every instance it holds
// stops and releases its allocation in one transaction, with reason and
// an event each (scheduled, starting and running instances through
// stopping to stopped; stopping ones to stopped; terminating ones to
// terminated, as the agent's reports would have moved them). It answers
// the IDs of the instances that were to run (scheduled, starting or
// running), in ID order: what the host's operator may start again when
// the host is back (gpucloud up does). Their private addresses, volumes
// and IDs are kept, as by any stop.
func (s *Agents) ShutDown(ctx context.Context, a Actor, reason string) ([]string, error) {
	if err := agentOnly(a); err != nil {
		return nil, err
	}
	if reason == "" {
		reason = "the host shut down"
	}
	actor := "agent:" + a.HostID
	var resume []string
	err := s.tx(ctx, func(tx cloud.Tx) error {
		resume = nil
		ins, err := tx.ListInstances(ctx, cloud.InstanceFilter{HostID: a.HostID, States: cloud.HoldingStates()})
		if err != nil {
			return err
		}
		now := s.now()
		for _, in := range ins {
			var path []cloud.State
			switch in.State {
			case cloud.Scheduled, cloud.Starting, cloud.Running, cloud.Paused:
				path = []cloud.State{cloud.Stopping, cloud.Stopped}
				resume = append(resume, in.ID)
			case cloud.Stopping:
				path = []cloud.State{cloud.Stopped}
			case cloud.Terminating:
				path = []cloud.State{cloud.Terminated}
			}
			for _, to := range path {
				if err := MoveInstance(ctx, tx, in, Move{To: to, Reason: reason, Actor: actor}, now); err != nil {
					return err
				}
			}
		}
		return nil
	})
	slices.Sort(resume)
	return resume, err
}
