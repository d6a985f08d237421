package service

import (
	"testing"

	"github.com/gpucloud/gpucloud/cloud"
)

// TestCanMoveSpotRequest drives every (from, to) pair of spot-request
// states through the state machine.
func TestCanMoveSpotRequest(t *testing.T) {
	states := []cloud.SpotRequestState{cloud.SpotOpen, cloud.SpotActive, cloud.SpotDisabled, cloud.SpotClosed, cloud.SpotCancelled}
	live := map[cloud.SpotRequestState]bool{cloud.SpotOpen: true, cloud.SpotActive: true, cloud.SpotDisabled: true}
	for _, from := range states {
		for _, to := range states {
			// A live request may go anywhere; a closed or cancelled one
			// nowhere, not even where it is.
			want := live[from]
			if got := CanMoveSpotRequest(from, to); got != want {
				t.Errorf("CanMoveSpotRequest(%s, %s) = %v, want %v", from, to, got, want)
			}
		}
	}
	if len(spotTransitions) != len(states) {
		t.Errorf("the table has %d states, the test %d", len(spotTransitions), len(states))
	}
	if CanMoveSpotRequest("bogus", cloud.SpotOpen) || CanMoveSpotRequest(cloud.SpotOpen, "bogus") {
		t.Error("an unknown state moves")
	}
}

// TestCanMoveGroup drives every (from, to) pair of group states through
// the state machine.
func TestCanMoveGroup(t *testing.T) {
	states := []cloud.GroupState{cloud.GroupActive, cloud.GroupDeleting, cloud.GroupDeleted}
	allowed := map[[2]cloud.GroupState]bool{
		{cloud.GroupActive, cloud.GroupActive}:    true,
		{cloud.GroupActive, cloud.GroupDeleting}:  true,
		{cloud.GroupDeleting, cloud.GroupDeleted}: true,
	}
	for _, from := range states {
		for _, to := range states {
			want := allowed[[2]cloud.GroupState{from, to}]
			if got := CanMoveGroup(from, to); got != want {
				t.Errorf("CanMoveGroup(%s, %s) = %v, want %v", from, to, got, want)
			}
		}
	}
	if len(groupTransitions) != len(states) {
		t.Errorf("the table has %d states, the test %d", len(groupTransitions), len(states))
	}
}
