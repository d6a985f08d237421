package cloud

import (
	"context"
	"maps"
	"slices"
	"time"
)

// LaunchSpot creates the next instance of spot request r in pool: pending,
// market spot, with the request's command, environment, tags and volumes
// (the workload finds the request's ID in its metadata document), the volumes attached, an
// instance.created event written; and it records the launch on r (State
// open, InstanceID, Launches) and writes r. id is the new instance's ID.
// A volume that is missing, deleted, in another zone than the pool or
// attached to another live instance fails the launch with a Conflict or
// NotFound, and nothing changes.
func LaunchSpot(ctx context.Context, tx Tx, r *SpotRequest, pool Pool, id, actor string, now time.Time) (*Instance, error) {
	in := &Instance{ID: id, TenantID: r.TenantID, Name: r.Name, Offering: pool.Offering, State: Pending,
		Market: MarketSpot, SpotRequestID: r.ID, Command: slices.Clone(r.Command), Env: maps.Clone(r.Env),
		Volumes: slices.Clone(r.Volumes), Tags: maps.Clone(r.Tags), CreatedAt: now, UpdatedAt: now}
	if pool.Zone != "" {
		in.Zones = []string{pool.Zone}
	}
	var vols []*Volume
	for _, vid := range r.Volumes {
		v, err := tx.GetVolume(ctx, vid)
		if err != nil {
			return nil, err
		}
		if v.TenantID != r.TenantID || v.DeletedAt != nil {
			return nil, Errorf(NotFound, "volume %s not found", vid)
		}
		if v.Zone != "" && pool.Zone != "" && v.Zone != pool.Zone {
			return nil, Errorf(Conflict, "volume %s is in zone %s, not %s", vid, v.Zone, pool.Zone)
		}
		if v.InstanceID != "" {
			other, err := tx.GetInstance(ctx, v.InstanceID)
			if err != nil && !IsNotFound(err) {
				return nil, err
			}
			if err == nil && other.State != Terminated {
				return nil, Errorf(Conflict, "volume %s is attached to instance %s (%s)", vid, other.ID, other.State)
			}
		}
		vols = append(vols, v)
	}
	if err := tx.CreateInstance(ctx, in); err != nil {
		return nil, err
	}
	for _, v := range vols {
		v.InstanceID = in.ID
		if err := tx.UpdateVolume(ctx, v); err != nil {
			return nil, err
		}
	}
	if err := tx.AppendEvent(ctx, &Event{Time: now, Kind: EventInstanceCreated, TenantID: r.TenantID,
		InstanceID: in.ID, To: Pending, Actor: actor,
		Reason: "spot request " + r.ID + " launch in pool " + pool.String()}); err != nil {
		return nil, err
	}
	r.State, r.InstanceID, r.UpdatedAt = SpotOpen, in.ID, now
	r.Launches++
	r.Reason = ""
	if err := tx.UpdateSpotRequest(ctx, r); err != nil {
		return nil, err
	}
	return in, nil
}

// DetachVolumes detaches the volumes attached to an instance that is being
// terminated, so that they can be attached elsewhere (a spot request's next
// launch). The instance keeps its volume list as the record of what it ran
// with.
func DetachVolumes(ctx context.Context, tx Tx, in *Instance) error {
	for _, id := range in.Volumes {
		v, err := tx.GetVolume(ctx, id)
		if IsNotFound(err) {
			continue
		}
		if err != nil {
			return err
		}
		if v.InstanceID != in.ID {
			continue
		}
		v.InstanceID = ""
		if err := tx.UpdateVolume(ctx, v); err != nil {
			return err
		}
	}
	return nil
}
