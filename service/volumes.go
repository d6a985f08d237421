package service

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
)

// Event kinds of volume actions.
const (
	EventVolumeCreated  cloud.EventKind = "volume.created"
	EventVolumeAttached cloud.EventKind = "volume.attached"
	EventVolumeDetached cloud.EventKind = "volume.detached"
	EventVolumeDeleted  cloud.EventKind = "volume.deleted"
)

// CheckVolumeSpec validates what can be checked without the store.
func CheckVolumeSpec(spec *api.CreateVolumeRequest) error {
	if err := CheckName("name", spec.Name, true); err != nil {
		return err
	}
	if spec.SizeGiB < 1 || spec.SizeGiB > maxVolumeGiB {
		return Field("size_gib", "%d is out of range 1..%d", spec.SizeGiB, maxVolumeGiB)
	}
	if err := CheckName("zone", spec.Zone, false); err != nil {
		return err
	}
	switch spec.Kind {
	case "":
		spec.Kind = cloud.VolumeBlock
	case cloud.VolumeBlock, cloud.VolumeShared:
	default:
		return Field("kind", "%s is not a volume kind (block or shared)", Quote(string(spec.Kind)))
	}
	return CheckTags("tags", spec.Tags)
}

// LabelSharedVolumes is the host label an agent started with
// --shared-volume-dir reports: the host mounts the operator's shared
// filesystem, so instances with shared volumes may run on it.
const LabelSharedVolumes = "shared-volumes"

// sharedVolumesOffered refuses a shared volume where no host of the cloud
// has the shared filesystem: such a volume could never be mounted, and
// an instance that names it would stay pending forever.
func sharedVolumesOffered(ctx context.Context, tx cloud.Tx, field string) error {
	hs, err := tx.ListHosts(ctx)
	if err != nil {
		return err
	}
	for _, h := range hs {
		if _, ok := h.Spec.Labels[LabelSharedVolumes]; ok {
			return nil
		}
	}
	return &cloud.Error{Code: cloud.Unavailable,
		Message: field + ": no host of this cloud has a shared volume directory (the operator starts agents with --shared-volume-dir on a filesystem every host mounts); shared volumes are unavailable",
		Details: map[string]any{"field": field}}
}

// Create creates a volume for actor a and appends its volume.created
// event; the store starts its usage with it. With an idempotency key, a
// retry answers the volume the first call created (created false) and
// writes nothing; the same key with a request that differs in any field
// is a Conflict naming the fields. Keys are the tenant's: another tenant's
// create with the same key is another volume.
func (s *Volumes) Create(ctx context.Context, a Actor, spec api.CreateVolumeRequest, key string) (out *cloud.Volume, created bool, err error) {
	if err := CheckIdempotencyKey(key); err != nil {
		return nil, false, err
	}
	if err := CheckVolumeSpec(&spec); err != nil {
		return nil, false, err
	}
	spec.Tags = addSystemTags(ctx, spec.Tags)
	err = s.tx(ctx, func(tx cloud.Tx) error {
		out, created = nil, false
		tenant, err := Scope(ctx, tx, a, spec.Tenant, a.TenantID)
		if err != nil {
			return err
		}
		byKey := func(k string) (*cloud.Volume, error) { return tx.VolumeByKey(ctx, tenant, k) }
		same := func(v *cloud.Volume) error { return sameVolume(v, &spec) }
		if old, found, err := prior(key, byKey, same); found || err != nil {
			out = old
			return err
		}
		if spec.Kind == cloud.VolumeShared {
			if err := sharedVolumesOffered(ctx, tx, "kind"); err != nil {
				return err
			}
		}
		now := s.now()
		v := &cloud.Volume{ID: NewID(VolumePrefix), TenantID: tenant, Name: spec.Name, SizeGiB: spec.SizeGiB,
			Zone: spec.Zone, Kind: spec.Kind, Tags: spec.Tags, CreatedAt: now, IdempotencyKey: key}
		if err := tx.CreateVolume(ctx, v); err != nil {
			return asKeyRace(err, key)
		}
		if err := tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: EventVolumeCreated, TenantID: tenant,
			Actor: a.ID, Reason: "volume " + v.ID + " created", Details: volumeDetails(v.ID)}); err != nil {
			return err
		}
		out, created = v, true
		return nil
	})
	out, err = settleRace(ctx, s.store, out, err, func(tx cloud.Tx, id string) (*cloud.Volume, error) { return tx.GetVolume(ctx, id) },
		func(v *cloud.Volume) error { return sameVolume(v, &spec) })
	return out, created && err == nil, err
}

// sameVolume reports a conflict when an idempotency key is reused for a
// volume that differs in any field the request sent. Name, size and zone
// are fixed at creation (nothing changes them), so a true retry always
// matches. The tenant needs no comparison: it chose the key's volume.
func sameVolume(old *cloud.Volume, spec *api.CreateVolumeRequest) error {
	var d KeyDiffs
	d.String("name", old.Name, spec.Name)
	Value(&d, "size_gib", old.SizeGiB, spec.SizeGiB)
	d.String("zone", old.Zone, spec.Zone)
	d.String("kind", string(old.Kind), string(spec.Kind))
	d.Map("tags", old.Tags, spec.Tags)
	return d.Err("volume", old.ID)
}

// List answers the volumes actor a may see that are not deleted, in ID
// order: a member's own tenant's; an admin's every tenant's, or tenant's
// when it is not empty.
func (s *Volumes) List(ctx context.Context, a Actor, tenant string) ([]*cloud.Volume, error) {
	var out []*cloud.Volume
	err := s.tx(ctx, func(tx cloud.Tx) error {
		out = []*cloud.Volume{}
		t, err := Scope(ctx, tx, a, tenant, "")
		if err != nil {
			return err
		}
		// The store lists every tenant's volumes for an empty tenant.
		vs, err := tx.ListVolumes(ctx, t)
		if err != nil {
			return err
		}
		for _, v := range vs {
			if v.DeletedAt == nil {
				out = append(out, v)
			}
		}
		return nil
	})
	return out, err
}

// Get reads a volume actor a may see.
func (s *Volumes) Get(ctx context.Context, a Actor, id string) (*cloud.Volume, error) {
	var v *cloud.Volume
	err := s.tx(ctx, func(tx cloud.Tx) error {
		var err error
		v, err = visibleVolume(ctx, tx, a, id)
		return err
	})
	return v, err
}

// volumeDetails are the details of a volume's own events: its ID, for
// Volumes.Events.
func volumeDetails(id string) []byte { return mustJSON(map[string]any{"volume_id": id}) }

// visibleVolume reads a volume actor a may see: another tenant's and a
// deleted one answer like a missing one.
func visibleVolume(ctx context.Context, tx cloud.Tx, a Actor, id string) (*cloud.Volume, error) {
	v, err := Visible(ctx, a, "volume", id, tx.GetVolume)
	if err == nil && v.DeletedAt != nil {
		return nil, NotFound("volume", id)
	}
	return v, err
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

// Attach attaches volume id to instance instanceID, both of which actor a
// must see, and appends a volume.attached event. The volume rule is
// CreateInstance's (attachable): the volume of the instance's tenant, in
// one of its zones, and not attached to another instance that is not
// terminated. Besides, the instance's volumes must be changeable now (see
// mutableVolumes) and under the limit. Attaching a volume again to its
// instance changes nothing.
func (s *Volumes) Attach(ctx context.Context, a Actor, id, instanceID string) (*cloud.Volume, error) {
	if instanceID == "" {
		return nil, Field("instance_id", "is required")
	}
	var out *cloud.Volume
	err := s.tx(ctx, func(tx cloud.Tx) error {
		v, err := visibleVolume(ctx, tx, a, id)
		if err != nil {
			return err
		}
		in, err := Visible(ctx, a, "instance", instanceID, tx.GetInstance)
		if err != nil {
			return err
		}
		out = v
		if v.InstanceID == in.ID || v.Shared() && slices.Contains(in.Volumes, v.ID) {
			return nil
		}
		if in.TenantID != v.TenantID {
			// attachable refuses it too, as a volume the instance's tenant
			// cannot see; an admin who sees both is told why.
			return Field("instance_id", "instance %s belongs to another tenant than volume %s", in.ID, v.ID)
		}
		if err := attachOne(ctx, tx, in, v); err != nil {
			return err
		}
		if err := mutableVolumes(in); err != nil {
			return err
		}
		if len(in.Volumes) >= maxVolumes {
			return Field("instance_id", "instance %s has %d volumes, the limit", in.ID, maxVolumes)
		}
		now := s.now()
		if !v.Shared() {
			v.InstanceID = in.ID
		}
		if !slices.Contains(in.Volumes, v.ID) {
			in.Volumes = append(in.Volumes, v.ID)
		}
		in.UpdatedAt = now
		if err := tx.UpdateVolume(ctx, v); err != nil {
			return err
		}
		if err := tx.UpdateInstance(ctx, in); err != nil {
			return err
		}
		return tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: EventVolumeAttached, TenantID: v.TenantID,
			InstanceID: in.ID, Actor: a.ID, Reason: "volume " + v.ID + " attached", Details: volumeDetails(v.ID)})
	})
	return out, err
}

// attachOne checks volume v against instance in with attachable, the one
// volume rule, as if in asked for v alone. attachable names the volume
// by its place in an instance's volumes ("volumes[0]"); an attach names
// it in the path, so its errors name the request's instance_id instead.
func attachOne(ctx context.Context, tx cloud.Tx, in *cloud.Instance, v *cloud.Volume) error {
	probe := *in
	probe.Volumes = []string{v.ID}
	_, err := attachable(ctx, tx, &probe)
	var ce *cloud.Error
	if !errors.As(err, &ce) || ce.Details["field"] != "volumes[0]" {
		return err
	}
	details := maps.Clone(ce.Details)
	details["field"] = "instance_id"
	msg := ce.Message
	if rest, ok := strings.CutPrefix(msg, "volumes[0]: "); ok {
		msg = "instance_id: " + rest
	}
	return &cloud.Error{Code: ce.Code, Message: msg, Details: details}
}

// Detach detaches volume id, which actor a must see, from its instance and
// appends a volume.detached event. The instance's volumes must be
// changeable now (see mutableVolumes); a volume that still names a
// terminated or missing instance is detached without touching it (the
// instance holds it no longer, see attachable). Detaching a detached
// volume changes nothing.
func (s *Volumes) Detach(ctx context.Context, a Actor, id string) (*cloud.Volume, error) {
	var out *cloud.Volume
	err := s.tx(ctx, func(tx cloud.Tx) error {
		v, err := visibleVolume(ctx, tx, a, id)
		if err != nil {
			return err
		}
		out = v
		if v.Shared() {
			return s.detachShared(ctx, tx, a, v)
		}
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
		case in.State == cloud.Terminated:
			// A terminated instance keeps its volume list as the record of
			// what it ran with.
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
			InstanceID: from, Actor: a.ID, Reason: "volume " + v.ID + " detached", Details: volumeDetails(v.ID)})
	})
	return out, err
}

// Delete deletes volume id, which actor a must see: its storage stops
// being billed at once (the ledger's entry is appended with the write) and
// it leaves the volume list. A volume attached to an instance that is not
// terminated, or named by a spot request that may still launch (open,
// active or disabled), is a conflict: detach it or cancel the request
// first. Deleting a deleted volume answers it unchanged.
func (s *Volumes) Delete(ctx context.Context, a Actor, id string) (*cloud.Volume, error) {
	var out *cloud.Volume
	err := s.tx(ctx, func(tx cloud.Tx) error {
		v, err := Visible(ctx, a, "volume", id, tx.GetVolume)
		if err != nil {
			return err
		}
		out = v
		if v.DeletedAt != nil {
			return nil
		}
		if v.Shared() {
			holders, err := sharedHolders(ctx, tx, v)
			if err != nil {
				return err
			}
			if len(holders) > 0 {
				in := holders[0]
				return &cloud.Error{Code: cloud.Conflict,
					Message: "volume " + v.ID + " is attached to instance " + in.ID + " (" + string(in.State) + ") and " +
						fmt.Sprint(len(holders)-1) + " more; detach it first",
					Details: map[string]any{"instance_id": in.ID}}
			}
		}
		if v.InstanceID != "" {
			in, err := tx.GetInstance(ctx, v.InstanceID)
			switch {
			case cloud.IsNotFound(err):
			case err != nil:
				return err
			case in.State != cloud.Terminated:
				return &cloud.Error{Code: cloud.Conflict,
					Message: "volume " + v.ID + " is attached to instance " + in.ID + " (" + string(in.State) + "); detach it first",
					Details: map[string]any{"instance_id": in.ID}}
			}
		}
		rs, err := tx.ListSpotRequests(ctx, cloud.SpotRequestFilter{TenantID: v.TenantID,
			States: []cloud.SpotRequestState{cloud.SpotOpen, cloud.SpotActive, cloud.SpotDisabled}})
		if err != nil {
			return err
		}
		for _, r := range rs {
			if slices.Contains(r.Volumes, v.ID) {
				return &cloud.Error{Code: cloud.Conflict,
					Message: "volume " + v.ID + " is named by spot request " + r.ID + " (" + string(r.State) + "), which may launch with it; cancel the request first",
					Details: map[string]any{"spot_request_id": r.ID}}
			}
		}
		now := s.now()
		v.InstanceID, v.DeletedAt = "", &now
		if err := tx.UpdateVolume(ctx, v); err != nil {
			return err
		}
		return tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: EventVolumeDeleted, TenantID: v.TenantID,
			Actor: a.ID, Reason: "volume " + v.ID + " deleted", Details: volumeDetails(v.ID)})
	})
	return out, err
}

// sharedHolders lists the instances of v's tenant that are not terminated
// and name shared volume v: its attachments (the volume names none).
func sharedHolders(ctx context.Context, tx cloud.Tx, v *cloud.Volume) ([]*cloud.Instance, error) {
	ins, err := tx.ListInstances(ctx, cloud.InstanceFilter{TenantID: v.TenantID, States: LiveStates})
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(ins, func(in *cloud.Instance) bool { return !slices.Contains(in.Volumes, v.ID) }), nil
}

// detachShared detaches shared volume v from every instance that has it
// (a detach names no instance): all of them must be changeable now (see
// mutableVolumes), or none changes.
func (s *Volumes) detachShared(ctx context.Context, tx cloud.Tx, a Actor, v *cloud.Volume) error {
	holders, err := sharedHolders(ctx, tx, v)
	if err != nil {
		return err
	}
	for _, in := range holders {
		if err := mutableVolumes(in); err != nil {
			return err
		}
	}
	now := s.now()
	for _, in := range holders {
		in.Volumes = slices.DeleteFunc(in.Volumes, func(id string) bool { return id == v.ID })
		in.UpdatedAt = now
		if err := tx.UpdateInstance(ctx, in); err != nil {
			return err
		}
		if err := tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: EventVolumeDetached, TenantID: v.TenantID,
			InstanceID: in.ID, Actor: a.ID, Reason: "volume " + v.ID + " detached", Details: volumeDetails(v.ID)}); err != nil {
			return err
		}
	}
	return nil
}
