package service

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
)

// MarketPlan is what one round of the spot market decided: the market
// controller computes it over a snapshot, with no write, and
// ApplyMarketPlan carries it out in one transaction.
type MarketPlan struct {
	// Prices are the pools whose price the round's clearing changed.
	Prices []cloud.SpotPrice
	// Notices are the reclaim notices (cloud.ReclaimPrice) and rebalance
	// recommendations (cloud.ReclaimRebalance) to give, in order.
	Notices []SpotNotice
	// Moves are the spot requests to move along with their instance, in
	// order.
	Moves []SpotMove
}

// Empty reports whether the plan writes nothing.
func (p *MarketPlan) Empty() bool {
	return len(p.Prices) == 0 && len(p.Notices) == 0 && len(p.Moves) == 0
}

// SpotNotice is a notice to give a spot instance that holds capacity: a
// reclaim (its pool's price passed its max price), with the pool's notice
// period, or a rebalance recommendation (its pool's reclaim risk rose).
type SpotNotice struct {
	InstanceID string
	// Reason is cloud.ReclaimPrice or cloud.ReclaimRebalance.
	Reason string
	// Notice is how long a reclaimed instance has before its deadline.
	Notice time.Duration
	// Actor names who gives a reclaim notice in its event (the scheduler,
	// which enforces it); a rebalance recommendation is the plan's actor's.
	Actor string
}

// SpotMove is what the market does with one spot request, decided from
// the request and its instance as the snapshot had them. ApplyMarketPlan
// does it only if both are still at the versions read; otherwise the
// request is left for the next round.
type SpotMove struct {
	RequestID string
	// Version is the request's version as read.
	Version int64
	// InstanceID is the request's instance, and InstanceVersion its
	// version as read (0: it was not found).
	InstanceID      string
	InstanceVersion int64
	// Instance, when not nil, moves the instance first (its Actor is the
	// plan's).
	Instance *Move
	// Launch, when not nil, launches the request's next instance
	// (LaunchSpot); a launch the rules refuse leaves the request open with
	// a reason starting with ReasonRelaunchRefused.
	Launch *SpotRelaunch
	// State and Reason are where the request goes when nothing is
	// launched; a request already there is not written.
	State  cloud.SpotRequestState
	Reason string
	// Relaunch counts the move as a relaunch (a stopped instance of a
	// persistent request started again).
	Relaunch bool
}

// SpotRelaunch is a launch of a spot request's next instance.
type SpotRelaunch struct {
	Pool cloud.Pool
	// Why is the event's explanation.
	Why string
	// Backup marks a pending launch moved to a backup pool: not counted
	// as a relaunch.
	Backup bool
}

// ReasonRelaunchRefused starts the reason of a spot request whose
// relaunch (persistent requests, moves to a backup pool) the instance
// rules refused: a quota, a volume. It stays open, and the market tries
// again on every round.
const ReasonRelaunchRefused = "relaunch refused: "

// MarketResult counts what ApplyMarketPlan committed, for the metrics.
type MarketResult struct {
	// Priced and Rebalanced count the reclaim notices and rebalance
	// recommendations given; Relaunched the spot requests' relaunches.
	Priced, Rebalanced, Relaunched int
	// Skipped counts the moves left for the next round: their request or
	// instance changed since the snapshot.
	Skipped int
}

// ApplyMarketPlan carries out a plan of the spot market in one
// transaction of st, as actor: the new prices, the notices (to instances
// that still hold capacity without a notice), and the spot-request moves
// whose request and instance are still as the plan read them. Launches go
// through LaunchSpot and instance moves through MoveInstance. An empty
// plan opens no transaction.
func ApplyMarketPlan(ctx context.Context, st cloud.Store, cat *catalog.Catalog, actor Actor, p *MarketPlan, now time.Time) (MarketResult, error) {
	var res MarketResult
	if p.Empty() {
		return res, nil
	}
	err := st.Tx(ctx, func(tx cloud.Tx) error {
		res = MarketResult{} // the function may run again
		if len(p.Prices) > 0 {
			if err := tx.AppendSpotPrices(ctx, p.Prices); err != nil {
				return err
			}
		}
		// noticed holds the versions the notices gave the instances they
		// wrote, which a move may still act on.
		noticed := map[string]int64{}
		for _, n := range p.Notices {
			if err := applySpotNotice(ctx, tx, actor, n, noticed, &res, now); err != nil {
				return err
			}
		}
		for i := range p.Moves {
			if err := applySpotMove(ctx, tx, cat, actor, &p.Moves[i], noticed, &res, now); err != nil {
				return err
			}
		}
		return nil
	})
	return res, err
}

// applySpotNotice gives one notice, if the instance still holds capacity
// without one.
func applySpotNotice(ctx context.Context, tx cloud.Tx, actor Actor, n SpotNotice, noticed map[string]int64, res *MarketResult, now time.Time) error {
	in, err := tx.GetInstance(ctx, n.InstanceID)
	if err != nil {
		if cloud.IsNotFound(err) {
			return nil
		}
		return err
	}
	if !in.State.Holds() || (in.Interruption != nil && in.Interruption.Action != "") {
		return nil
	}
	if n.Reason == cloud.ReclaimPrice {
		done, err := NoticeSpotReclaim(ctx, tx, in, cloud.ReclaimPrice, "", "spot price above the max price", n.Notice, n.Actor, now)
		if err != nil {
			return err
		}
		if done {
			res.Priced++
			noticed[in.ID] = in.Version
		}
		return nil
	}
	if in.Interruption != nil {
		return nil
	}
	in.Interruption = &cloud.Interruption{Reason: cloud.ReclaimRebalance, NoticedAt: now}
	in.UpdatedAt = now
	if err := tx.UpdateInstance(ctx, in); err != nil {
		if cloud.IsConflict(err) {
			return nil
		}
		return err
	}
	pool := cloud.Pool{Offering: in.Offering, Zone: in.Zone}
	if err := tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: cloud.EventSpotRebalance, TenantID: in.TenantID,
		InstanceID: in.ID, HostID: in.HostID, Actor: actor.ID,
		Reason: "rebalance recommended: reclaim risk in pool " + pool.String() + " is elevated"}); err != nil {
		return err
	}
	res.Rebalanced++
	noticed[in.ID] = in.Version
	return nil
}

// applySpotMove does one move, re-reading its request and instance: a
// request or instance that changed since the plan's snapshot (other than
// by the plan's own notices) is skipped.
func applySpotMove(ctx context.Context, tx cloud.Tx, cat *catalog.Catalog, actor Actor, mv *SpotMove, noticed map[string]int64, res *MarketResult, now time.Time) error {
	r, err := tx.GetSpotRequest(ctx, mv.RequestID)
	if err != nil {
		if cloud.IsNotFound(err) {
			res.Skipped++
			return nil
		}
		return err
	}
	var in *cloud.Instance
	if mv.InstanceID != "" {
		if in, err = tx.GetInstance(ctx, mv.InstanceID); err != nil && !cloud.IsNotFound(err) {
			return err
		}
	}
	var ver int64
	if in != nil {
		ver = in.Version
	}
	if r.Version != mv.Version || r.InstanceID != mv.InstanceID ||
		(ver != mv.InstanceVersion && (ver == 0 || ver != noticed[mv.InstanceID])) {
		res.Skipped++
		return nil
	}
	if mv.Instance != nil {
		m := *mv.Instance
		m.Actor = actor.ID
		if err := MoveInstance(ctx, tx, in, m, now); err != nil {
			return err
		}
	}
	if mv.Relaunch {
		res.Relaunched++
	}
	if mv.Launch == nil {
		return moveSpotRequest(ctx, tx, actor, r, mv.State, mv.Reason, now)
	}
	next, err := LaunchSpot(ctx, tx, cat, r, mv.Launch.Pool, actor.ID, now)
	if refusedLaunch(err) {
		return moveSpotRequest(ctx, tx, actor, r, cloud.SpotOpen, ReasonRelaunchRefused+errorMessage(err), now)
	}
	if err != nil {
		return err
	}
	if !mv.Launch.Backup {
		res.Relaunched++
	}
	return tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: cloud.EventSpotRequest, TenantID: r.TenantID,
		InstanceID: next.ID, Actor: actor.ID,
		Reason: fmt.Sprintf("spot request %s relaunched as %s in pool %s (launch %d): %s", r.ID, next.ID, mv.Launch.Pool, r.Launches, mv.Launch.Why)})
}

// moveSpotRequest moves r to state st with reason, with a spot-request
// event; a request already there is left as it is.
func moveSpotRequest(ctx context.Context, tx cloud.Tx, actor Actor, r *cloud.SpotRequest, st cloud.SpotRequestState, reason string, now time.Time) error {
	if r.State == st && r.Reason == reason {
		return nil
	}
	if err := setSpotRequest(ctx, tx, r, st, reason, now); err != nil {
		return err
	}
	return tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: cloud.EventSpotRequest, TenantID: r.TenantID,
		InstanceID: r.InstanceID, Reason: fmt.Sprintf("spot request %s %s: %s", r.ID, st, reason), Actor: actor.ID})
}

// errorMessage is the message of a domain error, without its code.
func errorMessage(err error) string {
	var e *cloud.Error
	if errors.As(err, &e) {
		return e.Message
	}
	return err.Error()
}

// refusedLaunch reports whether the instance rules refused a launch for a
// reason that only the tenant or the operator can change (a quota, a
// volume that is gone or attached to another live instance, an offering
// that left the catalog, a subnet or group that was deleted, a subnet
// whose every address is held), as opposed to a race (a version conflict:
// the next round tries again) or a failure of the store. A full subnet
// must not fail the market's whole plan round after round.
func refusedLaunch(err error) bool {
	var ce *cloud.Error
	if !errors.As(err, &ce) {
		return false
	}
	switch ce.Code {
	case cloud.QuotaExceeded, cloud.Invalid, cloud.NotFound:
		return true
	case cloud.InsufficientCapacity:
		// allocateAddresses names the full subnet; nothing else of a
		// launch is insufficient_capacity.
		_, full := ce.Details["subnet_id"]
		return full
	case cloud.Conflict:
		// The volume rule names the volume's field; a race names none.
		f, _ := ce.Details["field"].(string)
		return strings.HasPrefix(f, "volumes[")
	}
	return false
}
