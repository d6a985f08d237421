package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
)

// Move is one lifecycle move of an instance: where it goes, why, and who
// moves it. MoveInstance and MoveInstances are the only code that writes
// an instance's state; the usage ledger, and so every invoice, rests on
// the events they write.
type Move struct {
	To     cloud.State
	Reason string
	// Actor names who moves it in the event: a user ID, "scheduler",
	// "market", "health", "agent:<host>".
	Actor string
	// Placement is where a move to scheduled puts the instance, and
	// Zone the zone of its host; a move to scheduled needs both (Zone may
	// be empty in a fleet without zones). Other moves leave them empty.
	Placement *fleet.Placement
	Zone      string
	// Interruption, when set, is recorded on the instance with the move;
	// a move to pending always clears it (a new start has no notice).
	Interruption *cloud.Interruption
	// KeepReason keeps the instance's Reason as it is; by default the
	// move's Reason becomes the instance's, except that a move to pending
	// clears it (a pending instance's reason is the scheduler's).
	KeepReason bool
	// Details, when set, are the event's details (JSON).
	Details json.RawMessage
}

// ErrStale is returned (wrapped in a Conflict) when the instance changed
// since it was read: its stored version is not the one in hand.
var ErrStale = errors.New("instance changed since it was read")

// apply checks m against the lifecycle and applies it to in (in memory):
// state, reason, placement kept or cleared as the target state requires,
// interruption, update time. It returns the event that records the move.
// An illegal move is a Conflict and leaves in unchanged.
func apply(in *cloud.Instance, m Move, now time.Time) (*cloud.Event, error) {
	from := in.State
	if !cloud.CanMove(from, m.To) {
		return nil, IllegalMove(in.ID, from, m.To, "")
	}
	host := in.HostID
	switch {
	case m.To == cloud.Scheduled:
		if m.Placement == nil || m.Placement.HostID == "" {
			return nil, fmt.Errorf("move of instance %s to scheduled without a placement", in.ID)
		}
		host = m.Placement.HostID
		in.HostID, in.Placement, in.Zone = host, m.Placement, m.Zone
	case m.Placement != nil:
		return nil, fmt.Errorf("move of instance %s to %s with a placement", in.ID, m.To)
	case !m.To.Holds():
		in.HostID, in.Placement = "", nil
	}
	if m.To == cloud.Pending {
		in.Interruption = nil
	} else if m.Interruption != nil {
		in.Interruption = m.Interruption
	}
	switch {
	case m.KeepReason:
	case m.To == cloud.Pending:
		in.Reason = ""
	default:
		in.Reason = m.Reason
	}
	in.State, in.UpdatedAt = m.To, now
	return &cloud.Event{Time: now, Kind: cloud.EventInstanceState, TenantID: in.TenantID,
		InstanceID: in.ID, HostID: host, From: from, To: m.To, Reason: m.Reason, Actor: m.Actor, Details: m.Details}, nil
}

// MoveInstance moves in (as read in tx) by m, in tx: it checks the move
// against the lifecycle (cloud.CanMove), keeps or clears the placement as
// the target state requires, writes the instance if its stored version is
// still in.Version (else a Conflict wrapping ErrStale, and nothing
// changes), detaches its volumes when it leaves for terminating or
// terminated, and appends the instance.state event (with which the store
// appends the usage ledger's entry). On error in is left as it was.
func MoveInstance(ctx context.Context, tx cloud.Tx, in *cloud.Instance, m Move, now time.Time) error {
	next := *in
	ev, err := apply(&next, m, now)
	if err != nil {
		return err
	}
	if err := tx.UpdateInstance(ctx, &next); err != nil {
		if cloud.IsConflict(err) {
			return &cloud.Error{Code: cloud.Conflict, Message: "instance " + Quote(in.ID) + ": " + ErrStale.Error(),
				Details: map[string]any{"id": in.ID}}
		}
		return err
	}
	if m.To == cloud.Terminating || m.To == cloud.Terminated {
		if err := DetachVolumes(ctx, tx, &next, in.State, m.Actor, now); err != nil {
			return err
		}
	}
	if m.To == cloud.Terminated {
		if err := deleteMemberVolumes(ctx, tx, &next, m.Actor, now); err != nil {
			return err
		}
	}
	if err := recordVolumeHosts(ctx, tx, &next, m, now); err != nil {
		return err
	}
	if err := tx.AppendEvent(ctx, ev); err != nil {
		return err
	}
	*in = next
	return nil
}

// MoveInstances moves many instances at once, as MoveInstance would one
// by one, in a few statements (the scheduler commits its placements with
// it): ins[i] moves by moves[i]. An instance whose stored version is not
// its Version is left unchanged and its ID returned in stale; an illegal
// move fails the whole call. The moved instances are updated in place.
func MoveInstances(ctx context.Context, tx cloud.Tx, ins []*cloud.Instance, moves []Move, now time.Time) (stale []string, err error) {
	if len(ins) != len(moves) {
		return nil, fmt.Errorf("MoveInstances: %d instances, %d moves", len(ins), len(moves))
	}
	next := make([]*cloud.Instance, len(ins))
	events := make([]*cloud.Event, len(ins))
	for i, in := range ins {
		n := *in
		if events[i], err = apply(&n, moves[i], now); err != nil {
			return nil, err
		}
		next[i] = &n
	}
	// apply changes only the state fields (TestApplyChangesOnlyStateFields).
	if stale, err = tx.UpdateInstanceStates(ctx, next); err != nil {
		return nil, err
	}
	skip := make(map[string]bool, len(stale))
	for _, id := range stale {
		skip[id] = true
	}
	written := events[:0]
	for i, n := range next {
		if skip[n.ID] {
			continue
		}
		if m := moves[i]; m.To == cloud.Terminating || m.To == cloud.Terminated {
			if err := DetachVolumes(ctx, tx, n, ins[i].State, m.Actor, now); err != nil {
				return nil, err
			}
			if m.To == cloud.Terminated {
				if err := deleteMemberVolumes(ctx, tx, n, m.Actor, now); err != nil {
					return nil, err
				}
			}
		}
		if err := recordVolumeHosts(ctx, tx, n, moves[i], now); err != nil {
			return nil, err
		}
		written = append(written, events[i])
		*ins[i] = *n
	}
	return stale, tx.AppendEvents(ctx, written)
}

// deleteMemberVolumes deletes the volumes a group created for a member
// (Template.VolumeGiB) once the member is terminated: they are the
// member's own scratch space, like an EC2 Auto Scaling instance's volumes
// with delete-on-termination, and their storage is billed until deleted.
// A volume the tenant attached to the member is never deleted.
func deleteMemberVolumes(ctx context.Context, tx cloud.Tx, in *cloud.Instance, actor string, now time.Time) error {
	if in.GroupID == "" {
		return nil
	}
	for _, id := range in.Volumes {
		v, err := tx.GetVolume(ctx, id)
		if cloud.IsNotFound(err) {
			continue
		}
		if err != nil {
			return err
		}
		if v.DeletedAt != nil || !IsMemberVolume(v, in.GroupID) || v.InstanceID != "" && v.InstanceID != in.ID {
			continue
		}
		at := now
		v.InstanceID, v.DeletedAt = "", &at
		if err := tx.UpdateVolume(ctx, v); err != nil {
			return err
		}
		if err := tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: EventVolumeDeleted, TenantID: v.TenantID,
			InstanceID: in.ID, Actor: actor, Reason: "volume " + v.ID + " of group member " + in.ID + " deleted with it",
			Details: []byte(fmt.Sprintf(`{"volume_id":%q,"group_id":%q}`, v.ID, in.GroupID))}); err != nil {
			return err
		}
	}
	return nil
}

// IsMemberVolume reports whether v is the volume group groupID created
// for one of its members.
func IsMemberVolume(v *cloud.Volume, groupID string) bool {
	return strings.HasPrefix(v.IdempotencyKey, "group:"+groupID+":") && strings.HasSuffix(v.IdempotencyKey, ":volume")
}

// DetachVolumes detaches the volumes attached to an instance that is
// being terminated, so that they can be attached elsewhere (a spot
// request's next launch), and records a volume.detached event for each
// (a shared volume's attachment, which is the instance naming it, ends
// too, once: when the instance moves from a state other than
// terminating, which is from). The instance keeps its volume list as the
// record of what it ran with.
func DetachVolumes(ctx context.Context, tx cloud.Tx, in *cloud.Instance, from cloud.State, actor string, now time.Time) error {
	for _, id := range in.Volumes {
		v, err := tx.GetVolume(ctx, id)
		if cloud.IsNotFound(err) {
			continue
		}
		if err != nil {
			return err
		}
		if v.DeletedAt != nil || !v.Shared() && v.InstanceID != in.ID || v.Shared() && from == cloud.Terminating {
			continue
		}
		if !v.Shared() {
			v.InstanceID = ""
			if err := tx.UpdateVolume(ctx, v); err != nil {
				return err
			}
		}
		if err := tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: EventVolumeDetached, TenantID: v.TenantID,
			InstanceID: in.ID, Actor: actor, Reason: "volume " + v.ID + " detached: the instance is " + string(in.State),
			Details: volumeDetails(v.ID)}); err != nil {
			return err
		}
	}
	return nil
}

// Action is a state change a tenant or an operator asks for. Its target
// decides, from the current state, where the instance goes: a new state,
// nothing (the instance is already where the action leads, so a retry
// answers it unchanged), or a conflict. Every real move is one
// cloud.CanMove allows.
type Action struct {
	Verb   string
	target func(id string, from cloud.State) (to cloud.State, noop bool, err error)
}

// Stop asks the agent to stop the workload: scheduled, starting and
// running instances go to stopping (the agent then reports stopped and the
// allocation is released). Stopping or stopped instances are already on
// their way. A pending instance holds nothing: it is stopped at once.
var Stop = Action{Verb: "stop", target: func(id string, from cloud.State) (cloud.State, bool, error) {
	switch {
	case from == cloud.Stopping || from == cloud.Stopped:
		return from, true, nil
	case cloud.CanMove(from, cloud.Stopping):
		return cloud.Stopping, false, nil
	case from == cloud.Pending:
		return cloud.Stopped, false, nil
	}
	return "", false, IllegalMove(id, from, cloud.Stopping, "")
}}

// Start puts a stopped instance back to pending, for the scheduler to
// place again. An instance that is pending, scheduled, starting or running
// is already started; anything else (stopping, failed, lost, terminated) is
// a conflict.
var Start = Action{Verb: "start", target: func(id string, from cloud.State) (cloud.State, bool, error) {
	switch from {
	case cloud.Stopped:
		return cloud.Pending, false, nil
	case cloud.Pending, cloud.Scheduled, cloud.Starting, cloud.Running, cloud.Paused:
		return from, true, nil
	case cloud.Stopping:
		return "", false, IllegalMove(id, from, cloud.Pending, "wait until it is stopped")
	}
	return "", false, IllegalMove(id, from, cloud.Pending, "")
}}

// Terminate ends an instance from any state. One that holds an allocation
// goes to terminating first: the agent stops the workload, reports it, and
// only then are the GPUs released and the instance terminated. Terminating
// a terminating or terminated instance answers it unchanged.
var Terminate = Action{Verb: "terminate", target: func(id string, from cloud.State) (cloud.State, bool, error) {
	if from == cloud.Terminated || from == cloud.Terminating {
		return from, true, nil
	}
	if cloud.CanMove(from, cloud.Terminating) {
		return cloud.Terminating, false, nil
	}
	if !cloud.CanMove(from, cloud.Terminated) {
		return "", false, IllegalMove(id, from, cloud.Terminated, "")
	}
	return cloud.Terminated, false, nil
}}

// Act applies action a for actor a in tx: the action's target decides the
// move, and MoveInstance makes it. why, when set, is added to the reason.
// A noop (the instance is already where the action leads) writes nothing.
func Act(ctx context.Context, tx cloud.Tx, actor Actor, in *cloud.Instance, a Action, why string, now time.Time) (noop bool, err error) {
	to, noop, err := a.target(in.ID, in.State)
	if err != nil || noop {
		return noop, err
	}
	reason := a.Verb + " requested by " + actor.ID
	if why != "" {
		reason += ": " + why
	}
	return false, MoveInstance(ctx, tx, in, Move{To: to, Reason: reason, Actor: actor.ID}, now)
}
