package service

import (
	"context"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
)

// spotTransitions is the spot-request state machine: the states a request
// may go to from each state. A live request (open, active, disabled) may
// stay where it is with a new reason; closed and cancelled are final.
var spotTransitions = map[cloud.SpotRequestState][]cloud.SpotRequestState{
	// open: its instance is placed (active), stops with the request's
	// stop behaviour (disabled), ends (closed), or the tenant cancels.
	cloud.SpotOpen: {cloud.SpotOpen, cloud.SpotActive, cloud.SpotDisabled, cloud.SpotClosed, cloud.SpotCancelled},
	// active: a persistent request relaunches (open), its instance stops
	// (disabled) or ends (closed), or the tenant cancels.
	cloud.SpotActive: {cloud.SpotOpen, cloud.SpotActive, cloud.SpotDisabled, cloud.SpotClosed, cloud.SpotCancelled},
	// disabled: the tenant starts the instance again (open, then active),
	// it ends (closed), or the tenant cancels.
	cloud.SpotDisabled:  {cloud.SpotOpen, cloud.SpotActive, cloud.SpotDisabled, cloud.SpotClosed, cloud.SpotCancelled},
	cloud.SpotClosed:    nil,
	cloud.SpotCancelled: nil,
}

// CanMoveSpotRequest reports whether a spot request may go from one state
// to another. Every state change of a spot request, by the API or by the
// market, goes through it (setSpotRequest).
func CanMoveSpotRequest(from, to cloud.SpotRequestState) bool {
	for _, s := range spotTransitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

// setSpotRequest moves r to state to with reason, and writes it: the one
// place a spot request's state changes once it exists. A move the state
// machine refuses is a conflict, and writes nothing.
func setSpotRequest(ctx context.Context, tx cloud.Tx, r *cloud.SpotRequest, to cloud.SpotRequestState, reason string, now time.Time) error {
	if !CanMoveSpotRequest(r.State, to) {
		return &cloud.Error{Code: cloud.Conflict, Message: "spot request " + Quote(r.ID) + " is " + string(r.State) + "; it cannot become " + string(to),
			Details: map[string]any{"state": r.State}}
	}
	r.State, r.Reason, r.UpdatedAt = to, reason, now
	return tx.UpdateSpotRequest(ctx, r)
}
