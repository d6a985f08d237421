package httpapi

import (
	"context"
	"net/http"
	"slices"
	"strconv"

	"github.com/gpucloud/gpucloud/cloud"
)

// Event kinds of volume actions.
const (
	EventVolumeCreated  cloud.EventKind = "volume.created"
	EventVolumeAttached cloud.EventKind = "volume.attached"
	EventVolumeDetached cloud.EventKind = "volume.detached"
)

// createVolume handles POST /v1/volumes. With an Idempotency-Key, a retry
// answers the volume the first call created, with 200 instead of 201; the
// same key with another name, size or zone is a conflict.
func (s *api) createVolume(w http.ResponseWriter, r *http.Request, p principal) error {
	var req CreateVolumeRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	key := r.Header.Get("Idempotency-Key")
	if err := checkIdempotencyKey(key); err != nil {
		return err
	}
	if err := checkName("name", req.Name, true); err != nil {
		return err
	}
	if req.SizeGiB < 1 || req.SizeGiB > maxVolumeGiB {
		return field("size_gib", "%d is out of range 1..%d", req.SizeGiB, maxVolumeGiB)
	}
	if err := checkName("zone", req.Zone, false); err != nil {
		return err
	}
	asked := req.Tenant
	if q := r.URL.Query().Get("tenant"); q != "" {
		if asked != "" && asked != q {
			return field("tenant", "the body says %s and ?tenant says %s", quote(asked), quote(q))
		}
		asked = q
	}
	var out *cloud.Volume
	created := false
	err := s.tx(r.Context(), func(tx cloud.Tx) error {
		ctx := r.Context()
		out, created = nil, false
		tenant, err := s.scope(ctx, tx, p, asked, p.TenantID)
		if err != nil {
			return err
		}
		if key != "" {
			old, err := volumeByKey(ctx, tx, tenant, key)
			if err != nil {
				return err
			}
			if old != nil {
				out = old
				return sameVolume(old, &req)
			}
		}
		now := s.now()
		v := &cloud.Volume{ID: newID("v-"), TenantID: tenant, Name: req.Name, SizeGiB: req.SizeGiB,
			Zone: req.Zone, CreatedAt: now, IdempotencyKey: key}
		if err := tx.CreateVolume(ctx, v); err != nil {
			return asKeyRace(err, key)
		}
		if err := tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: EventVolumeCreated, TenantID: tenant,
			Actor: p.UserID, Reason: "volume " + v.ID + " created"}); err != nil {
			return err
		}
		out, created = v, true
		return nil
	})
	out, err = raceWinner(s, r.Context(), out, err, func(tx cloud.Tx, id string) (*cloud.Volume, error) { return tx.GetVolume(r.Context(), id) }, func(v *cloud.Volume) error { return sameVolume(v, &req) })
	if err != nil {
		return err
	}
	writeCreated(w, created, "/v1/volumes/"+out.ID, out)
	return nil
}

// volumeByKey finds a tenant's volume created with an idempotency key.
func volumeByKey(ctx context.Context, tx cloud.Tx, tenant, key string) (*cloud.Volume, error) {
	vs, err := tx.ListVolumes(ctx, tenant)
	if err != nil {
		return nil, err
	}
	for _, v := range vs {
		if v.IdempotencyKey == key {
			return v, nil
		}
	}
	return nil, nil
}

// sameVolume reports a conflict when an idempotency key is reused for
// another volume. Name, size and zone are fixed at creation (no route
// changes them), so a true retry always matches.
func sameVolume(old *cloud.Volume, req *CreateVolumeRequest) error {
	var d keyDiffs
	d.addString("name", old.Name, req.Name)
	if old.SizeGiB != req.SizeGiB {
		d.add("size_gib", strconv.FormatInt(old.SizeGiB, 10), strconv.FormatInt(req.SizeGiB, 10))
	}
	d.addString("zone", old.Zone, req.Zone)
	return d.err("volume", old.ID, old.ID)
}

// listVolumes handles GET /v1/volumes: the tenant's volumes; admins every
// tenant's, or one tenant's with ?tenant.
func (s *api) listVolumes(w http.ResponseWriter, r *http.Request, p principal) error {
	out := VolumeList{}
	err := s.tx(r.Context(), func(tx cloud.Tx) error {
		out.Volumes = []*cloud.Volume{}
		tenant, err := s.scope(r.Context(), tx, p, r.URL.Query().Get("tenant"), "")
		if err != nil {
			return err
		}
		// The store lists every tenant's volumes for an empty tenant.
		vs, err := tx.ListVolumes(r.Context(), tenant)
		if err != nil {
			return err
		}
		for _, v := range vs {
			if v.DeletedAt == nil {
				out.Volumes = append(out.Volumes, v)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// getVisibleVolume reads a volume the principal may see; another tenant's
// and a deleted one answer like a missing one.
func getVisibleVolume(ctx context.Context, tx cloud.Tx, p principal, id string) (*cloud.Volume, error) {
	v, err := tx.GetVolume(ctx, id)
	if cloud.IsNotFound(err) || err == nil && (!p.visible(v.TenantID) || v.DeletedAt != nil) {
		return nil, notFound("volume", id)
	}
	return v, err
}

// getVolume handles GET /v1/volumes/{id}.
func (s *api) getVolume(w http.ResponseWriter, r *http.Request, p principal) error {
	var v *cloud.Volume
	err := s.tx(r.Context(), func(tx cloud.Tx) error {
		var err error
		v, err = getVisibleVolume(r.Context(), tx, p, r.PathValue("id"))
		return err
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, v)
	return nil
}

// mutableVolumes refuses to change the volumes of an instance whose
// workload may be running (it holds an allocation) or that is terminated.
// Volumes are mounted when the workload starts, so they change while the
// instance is pending, stopped, failed or lost.
func mutableVolumes(in *cloud.Instance) error {
	if in.State.Holds() || in.State == cloud.Terminated {
		return &cloud.Error{Code: cloud.Conflict,
			Message: "instance " + in.ID + " is " + string(in.State) + "; volumes change only while it is pending, stopped, failed or lost",
			Details: map[string]any{"instance_id": in.ID, "state": in.State}}
	}
	return nil
}

// attachVolume handles POST /v1/volumes/{id}/attach. A volume is attached
// to one instance at a time, of its own tenant; attaching it again to the
// same instance changes nothing.
func (s *api) attachVolume(w http.ResponseWriter, r *http.Request, p principal) error {
	var req AttachVolumeRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	if req.InstanceID == "" {
		return field("instance_id", "is required")
	}
	var out *cloud.Volume
	err := s.tx(r.Context(), func(tx cloud.Tx) error {
		ctx := r.Context()
		v, err := getVisibleVolume(ctx, tx, p, r.PathValue("id"))
		if err != nil {
			return err
		}
		in, err := getVisibleInstance(ctx, tx, p, req.InstanceID)
		if err != nil {
			return err
		}
		out = v
		if in.TenantID != v.TenantID {
			return field("instance_id", "instance %s belongs to another tenant than volume %s", in.ID, v.ID)
		}
		if v.InstanceID == in.ID {
			return nil
		}
		if v.InstanceID != "" {
			return &cloud.Error{Code: cloud.Conflict,
				Message: "volume " + v.ID + " is attached to instance " + v.InstanceID + "; detach it first",
				Details: map[string]any{"instance_id": v.InstanceID}}
		}
		if err := mutableVolumes(in); err != nil {
			return err
		}
		if len(in.Volumes) >= maxVolumes {
			return field("instance_id", "instance %s has %d volumes, the limit", in.ID, maxVolumes)
		}
		if v.Zone != "" && len(in.Zones) > 0 && !slices.Contains(in.Zones, v.Zone) {
			return field("instance_id", "volume %s is in zone %s, which instance %s's zones %v exclude", v.ID, v.Zone, in.ID, in.Zones)
		}
		now := s.now()
		v.InstanceID = in.ID
		in.Volumes = append(in.Volumes, v.ID)
		in.UpdatedAt = now
		if err := tx.UpdateVolume(ctx, v); err != nil {
			return err
		}
		if err := tx.UpdateInstance(ctx, in); err != nil {
			return err
		}
		return tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: EventVolumeAttached, TenantID: v.TenantID,
			InstanceID: in.ID, Actor: p.UserID, Reason: "volume " + v.ID + " attached"})
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// detachVolume handles POST /v1/volumes/{id}/detach. Detaching a detached
// volume changes nothing.
func (s *api) detachVolume(w http.ResponseWriter, r *http.Request, p principal) error {
	var out *cloud.Volume
	err := s.tx(r.Context(), func(tx cloud.Tx) error {
		ctx := r.Context()
		v, err := getVisibleVolume(ctx, tx, p, r.PathValue("id"))
		if err != nil {
			return err
		}
		out = v
		if v.InstanceID == "" {
			return nil
		}
		now := s.now()
		in, err := tx.GetInstance(ctx, v.InstanceID)
		switch {
		case cloud.IsNotFound(err):
			// The volume points at an instance that is gone: detaching
			// repairs it.
		case err != nil:
			return err
		default:
			if err := mutableVolumes(in); err != nil {
				return err
			}
			in.Volumes = slices.DeleteFunc(in.Volumes, func(id string) bool { return id == v.ID })
			in.UpdatedAt = now
			if err := tx.UpdateInstance(ctx, in); err != nil {
				return err
			}
		}
		from := v.InstanceID
		v.InstanceID = ""
		if err := tx.UpdateVolume(ctx, v); err != nil {
			return err
		}
		return tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: EventVolumeDetached, TenantID: v.TenantID,
			InstanceID: from, Actor: p.UserID, Reason: "volume " + v.ID + " detached"})
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
