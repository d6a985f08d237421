package cloud

import (
	"errors"
	"fmt"
	"slices"
	"testing"
)

var allStates = []State{Pending, Scheduled, Starting, Running, Paused, Stopping, Stopped, Terminating, Terminated, Failed, Lost}

// TestLifecycle pins the lifecycle's rules: the holding states are those
// HoldingStates lists, terminated is final, every state but terminated
// can reach terminated, and no state moves to itself.
func TestLifecycle(t *testing.T) {
	for _, s := range allStates {
		if s.Holds() != slices.Contains(HoldingStates(), s) {
			t.Errorf("%s: Holds %v disagrees with HoldingStates", s, s.Holds())
		}
		if CanMove(s, s) {
			t.Errorf("%s moves to itself", s)
		}
		if s != Terminated && !reaches(s, Terminated) {
			t.Errorf("%s cannot reach terminated", s)
		}
	}
	for _, s := range allStates {
		if CanMove(Terminated, s) {
			t.Errorf("terminated moves to %s", s)
		}
	}
	// A holding state never jumps straight to terminated: its GPUs are
	// released only once the agent stopped the workload (terminating).
	for _, s := range HoldingStates() {
		if CanMove(s, Terminated) && s != Terminating {
			t.Errorf("%s skips terminating", s)
		}
	}
	if CanMove(State("bogus"), Pending) || CanMove(Pending, State("bogus")) {
		t.Error("an unknown state moves")
	}
}

func reaches(from, to State) bool {
	seen := map[State]bool{from: true}
	queue := []State{from}
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		for _, n := range transitions[s] {
			if n == to {
				return true
			}
			if !seen[n] {
				seen[n] = true
				queue = append(queue, n)
			}
		}
	}
	return false
}

// TestPausedBills: a running instance paused and resumed bills without a
// break (no edge either way), and a paused one terminated stops billing.
func TestPausedBills(t *testing.T) {
	for _, c := range []struct {
		from, to State
		on, off  bool
	}{{Running, Paused, false, false}, {Paused, Running, false, false}, {Paused, Terminating, false, false},
		{Terminating, Terminated, false, true}, {Paused, Lost, false, true}, {Paused, Failed, false, true}} {
		if !CanMove(c.from, c.to) {
			t.Fatalf("%s cannot move to %s", c.from, c.to)
		}
		if on, off := MeterEdge(c.from, c.to); on != c.on || off != c.off {
			t.Errorf("%s -> %s: on %v off %v, want %v %v", c.from, c.to, on, off, c.on, c.off)
		}
	}
	if !Paused.Holds() {
		t.Error("paused does not hold its allocation")
	}
}

// TestMeterEdge checks every legal move against the metering rule:
// compute bills from entering running until leaving the holding states.
func TestMeterEdge(t *testing.T) {
	for _, from := range allStates {
		for _, to := range allStates {
			if !CanMove(from, to) {
				continue
			}
			on, off := MeterEdge(from, to)
			// Paused bills as running: a resume is no new start.
			wantOn := to == Running && from != Paused
			wantOff := from.Holds() && !to.Holds()
			if on != wantOn || off != wantOff {
				t.Errorf("%s -> %s: on %v off %v, want %v %v", from, to, on, off, wantOn, wantOff)
			}
			if on && off {
				t.Errorf("%s -> %s both starts and stops metering", from, to)
			}
		}
	}
}

func TestErrorCode(t *testing.T) {
	cases := []struct {
		err  error
		want Code
	}{
		{nil, ""},
		{Errorf(NotFound, "x"), NotFound},
		{fmt.Errorf("wrapped: %w", Errorf(Conflict, "y")), Conflict},
		{errors.New("plain"), Internal},
	}
	for _, c := range cases {
		if got := ErrorCode(c.err); got != c.want {
			t.Errorf("ErrorCode(%v) = %q, want %q", c.err, got, c.want)
		}
	}
	if !IsNotFound(Errorf(NotFound, "a")) || IsConflict(Errorf(NotFound, "a")) {
		t.Error("IsNotFound/IsConflict")
	}
}

func TestOwner(t *testing.T) {
	for _, o := range []Owned{&Instance{TenantID: "t"}, &Volume{TenantID: "t"}, &Commitment{TenantID: "t"},
		&SpotRequest{TenantID: "t"}, &Address{TenantID: "t"}} {
		if o.Owner() != "t" {
			t.Errorf("%T.Owner() = %q", o, o.Owner())
		}
	}
}
