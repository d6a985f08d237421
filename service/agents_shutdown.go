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
// and IDs are kept, as by any stop. A serverless endpoint's workers are
// terminated instead, and not answered: the endpoint launches workers as
// its load asks, so one stopped on a host that is down would only wait
// to be replaced.
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
			why := reason
			switch {
			case in.EndpointID != "" && in.State != cloud.Terminating:
				// An endpoint's worker is the endpoint's to replace
				// (anywhere, when it needs one), not the operator's to
				// start again: it goes.
				path = []cloud.State{cloud.Terminating, cloud.Terminated}
				why = "its host shut down; its endpoint starts another worker when it needs one"
			case in.State == cloud.Scheduled, in.State == cloud.Starting, in.State == cloud.Running, in.State == cloud.Paused:
				path = []cloud.State{cloud.Stopping, cloud.Stopped}
				resume = append(resume, in.ID)
			case in.State == cloud.Stopping:
				path = []cloud.State{cloud.Stopped}
			case in.State == cloud.Terminating:
				path = []cloud.State{cloud.Terminated}
			}
			for _, to := range path {
				if err := MoveInstance(ctx, tx, in, Move{To: to, Reason: why, Actor: actor}, now); err != nil {
					return err
				}
			}
		}
		return nil
	})
	slices.Sort(resume)
	return resume, err
}
