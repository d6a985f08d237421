package service

import (
	"context"
	"fmt"

	"github.com/gpucloud/gpucloud/cloud"
)

// EventHostRemoved is an admin's removal of a host's agent (Hosts.Remove).
const EventHostRemoved cloud.EventKind = "host.removed"

// Remove removes a host's agent from the cloud (admins): every live
// credential of the host is revoked, so that its agent is refused from
// then on, and the host's ID may join again with a join token (Agents.Join
// refuses that while the host has a live credential). It is how an
// operator lets a host whose agent lost its credential (a reinstall, a
// wiped disk) join again, and shuts out an agent that must not speak for
// the host any more. The host keeps its record, state and instances: a
// host that holds instances is refused (Conflict) until it is drained, as
// its instances would be lost when its heartbeats stop. It answers how
// many credentials it revoked; removing a removed host changes nothing.
// Whoever caches token checks must drop its cache once this returns.
func (s *Hosts) Remove(ctx context.Context, a Actor, id string) (int, error) {
	if err := adminOnly(a, "removing hosts"); err != nil {
		return 0, err
	}
	revoked := 0
	err := s.tx(ctx, func(tx cloud.Tx) error {
		revoked = 0
		if _, err := getHost(ctx, tx, id); err != nil {
			return err
		}
		ins, err := tx.ListInstances(ctx, cloud.InstanceFilter{HostID: id, States: cloud.HoldingStates()})
		if err != nil {
			return err
		}
		if len(ins) > 0 {
			return &cloud.Error{Code: cloud.Conflict,
				Message: fmt.Sprintf("host %s holds %d instances (%s first): drain it (gpucloud hosts drain %s) and remove it once they have stopped", id, len(ins), ins[0].ID, id),
				Details: map[string]any{"host": id, "instances": len(ins)}}
		}
		now := s.now()
		ts, err := tx.ListTokens(ctx, "")
		if err != nil {
			return err
		}
		for _, t := range ts {
			if t.Role == cloud.RoleAgent && t.HostID == id && liveAt(t, now) {
				if err := tx.RevokeToken(ctx, t.ID, now); err != nil {
					return err
				}
				revoked++
			}
		}
		if revoked == 0 {
			return nil
		}
		return tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: EventHostRemoved, HostID: id, Actor: a.ID,
			Reason: fmt.Sprintf("removed by an admin: %d agent credentials revoked; the host may join again with a join token", revoked)})
	})
	return revoked, err
}
