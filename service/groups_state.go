package service

import (
	"context"

	"github.com/gpucloud/gpucloud/cloud"
)

// groupTransitions is the group state machine: the states a group may go
// to from each state. An active group changes in place (its size, policies,
// the controller's decisions) or starts deleting; a deleting group becomes
// deleted once no member is left; deleted is final.
var groupTransitions = map[cloud.GroupState][]cloud.GroupState{
	cloud.GroupActive:   {cloud.GroupActive, cloud.GroupDeleting},
	cloud.GroupDeleting: {cloud.GroupDeleted},
	cloud.GroupDeleted:  nil,
}

// CanMoveGroup reports whether a group may go from one state to another
// (staying active is a move: the write of an active group). Every write of
// a group, by the API or by the group controller, goes through it
// (writeGroup).
func CanMoveGroup(from, to cloud.GroupState) bool {
	for _, s := range groupTransitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

// writeGroup writes g, which the caller read in state from and changed:
// the one place a group is written once it exists. A move the state
// machine refuses is a conflict, and writes nothing.
func writeGroup(ctx context.Context, tx cloud.Tx, g *cloud.Group, from cloud.GroupState) error {
	if !CanMoveGroup(from, g.State) {
		return &cloud.Error{Code: cloud.Conflict, Message: "group " + Quote(g.ID) + " is " + string(from) + "; it cannot become " + string(g.State),
			Details: map[string]any{"state": from}}
	}
	return tx.UpdateGroup(ctx, g)
}
