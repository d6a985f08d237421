package service

import (
	"context"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
)

// Event kinds of the operator's host actions.
const (
	EventHostCordoned   cloud.EventKind = "host.cordoned"
	EventHostUncordoned cloud.EventKind = "host.uncordoned"
)

// List lists every host (admins).
func (s *Hosts) List(ctx context.Context, a Actor) ([]*cloud.Host, error) {
	if err := adminOnly(a, "listing hosts"); err != nil {
		return nil, err
	}
	var hs []*cloud.Host
	err := s.tx(ctx, func(tx cloud.Tx) error {
		var err error
		hs, err = tx.ListHosts(ctx)
		return err
	})
	return hs, err
}

// Cordon makes a host take nothing new (admins); it keeps what it runs.
// Cordoning a cordoned host changes nothing; an unhealthy host is cordoned
// too, so that it does not take work when it recovers. ifMatch, when not
// zero, is the version the operator saw.
func (s *Hosts) Cordon(ctx context.Context, a Actor, id string, ifMatch int64) (*cloud.Host, error) {
	return s.setState(ctx, a, id, ifMatch, fleet.Cordoned, EventHostCordoned, func(fleet.HostState) error { return nil })
}

// Uncordon makes a cordoned host schedulable again (admins). An unhealthy
// host stays unhealthy until its heartbeats say otherwise, so uncordoning
// it is a Conflict.
func (s *Hosts) Uncordon(ctx context.Context, a Actor, id string, ifMatch int64) (*cloud.Host, error) {
	return s.setState(ctx, a, id, ifMatch, fleet.Schedulable, EventHostUncordoned, func(from fleet.HostState) error {
		if from == fleet.Unhealthy {
			return &cloud.Error{Code: cloud.Conflict,
				Message: "host is unhealthy; it becomes schedulable when its agent reports healthy again",
				Details: map[string]any{"from": from, "to": fleet.Schedulable}}
		}
		return nil
	})
}

// getHost reads a host, answering NotFound in the services' words.
func getHost(ctx context.Context, tx cloud.Tx, id string) (*cloud.Host, error) {
	h, err := tx.GetHost(ctx, id)
	if cloud.IsNotFound(err) {
		return nil, NotFound("host", id)
	}
	return h, err
}

// setState moves a host to state to through PutHost, whose version check
// makes a concurrent change (a scheduler commit, another operator) a
// conflict instead of a lost update, and records the change as an event of
// kind. allowed may refuse the move from the host's current state.
func (s *Hosts) setState(ctx context.Context, a Actor, id string, ifMatch int64, to fleet.HostState,
	kind cloud.EventKind, allowed func(from fleet.HostState) error) (*cloud.Host, error) {
	if err := adminOnly(a, "changing a host's state"); err != nil {
		return nil, err
	}
	var out *cloud.Host
	err := s.tx(ctx, func(tx cloud.Tx) error {
		h, err := getHost(ctx, tx, id)
		if err != nil {
			return err
		}
		if err := CheckVersion("host", id, ifMatch, h.Version); err != nil {
			return err
		}
		out = h
		from := h.State
		if from == to {
			return nil
		}
		if err := allowed(from); err != nil {
			return err
		}
		h.State, h.Spec.State = to, to
		if err := tx.PutHost(ctx, h); err != nil {
			return err
		}
		return tx.AppendEvent(ctx, &cloud.Event{Time: s.now(), Kind: kind, HostID: h.ID, Actor: a.ID,
			Reason: string(from) + " -> " + string(to) + " by " + a.ID})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Drain empties a host (admins): a schedulable host is cordoned, and every
// instance placed or running there is asked to stop (the agent stops it,
// the allocation is released; its tenant may start it again and it is
// placed elsewhere). Instances already stopping or being terminated carry
// on. Draining a drained host changes nothing. It answers the instances it
// asked to stop.
func (s *Hosts) Drain(ctx context.Context, a Actor, id string) ([]*cloud.Instance, error) {
	if err := adminOnly(a, "draining hosts"); err != nil {
		return nil, err
	}
	var stopped []*cloud.Instance
	err := s.tx(ctx, func(tx cloud.Tx) error {
		stopped = stopped[:0]
		h, err := getHost(ctx, tx, id)
		if err != nil {
			return err
		}
		now := s.now()
		if h.State == fleet.Schedulable {
			from := h.State
			h.State, h.Spec.State = fleet.Cordoned, fleet.Cordoned
			if err := tx.PutHost(ctx, h); err != nil {
				return err
			}
			if err := tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: EventHostCordoned, HostID: h.ID, Actor: a.ID,
				Reason: string(from) + " -> cordoned by " + a.ID + " (drain)"}); err != nil {
				return err
			}
		}
		ins, err := tx.ListInstances(ctx, cloud.InstanceFilter{HostID: id,
			States: []cloud.State{cloud.Scheduled, cloud.Starting, cloud.Running, cloud.Paused}})
		if err != nil {
			return err
		}
		reason := "host " + id + " drained by " + a.ID
		for _, in := range ins {
			if err := MoveInstance(ctx, tx, in, Move{To: cloud.Stopping, Reason: reason, Actor: a.ID}, now); err != nil {
				return err
			}
			stopped = append(stopped, in)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return stopped, nil
}
