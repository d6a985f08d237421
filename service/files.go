package service

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
)

// recordVolumeHosts records, when the scheduler places an instance with
// volumes, that its host holds them from now on: their directories are
// made there when it starts, and a copy into one of them once it is
// detached goes there (Files.VolumeRoute).
func recordVolumeHosts(ctx context.Context, tx cloud.Tx, in *cloud.Instance, m Move, now time.Time) error {
	if m.To != cloud.Scheduled || in.HostID == "" {
		return nil
	}
	for _, id := range in.Volumes {
		// A volume deleted meanwhile has no host to record.
		if err := tx.RecordVolumeHosts(ctx, []string{id}, in.HostID, now); err != nil && !cloud.IsNotFound(err) {
			return err
		}
	}
	return nil
}

// Files holds the rules of `volumes cp`: which host's agent serves a
// volume's files. (`instances cp` is a session into the instance, whose
// rules are Sessions.Start's.)
type Files struct {
	base
	// sessions records a grant on an instance as its session (Grant).
	sessions *Sessions
}

// VolumeRoute is where a volume's files session goes.
type VolumeRoute struct {
	Volume *cloud.Volume
	HostID string
	// InstanceID is the running instance the volume is attached to, when
	// it is: the session is recorded on it.
	InstanceID string
}

// SilentAfter is how long a host may go without a heartbeat before
// VolumeRoute no longer sends copies to it.
const SilentAfter = 2 * time.Minute

// VolumeRoute finds the host whose agent serves volume id's files for
// actor: the host of the running instance it is attached to; else, when
// the host recorded for it (the last one an instance with it was placed
// on) is up, that host; else, when that host shared its volumes with the
// others (agentapi.LabelVolumeDirShared), or none is recorded, any up host
// of the volume's zone that shares them. Another tenant's volume answers
// not_found; a volume no host can serve, conflict saying why
// and what to do.
func (s *Files) VolumeRoute(ctx context.Context, a Actor, id string) (*VolumeRoute, error) {
	var out *VolumeRoute
	err := s.tx(ctx, func(tx cloud.Tx) error {
		v, err := Visible(ctx, a, "volume", id, tx.GetVolume)
		if err != nil {
			return err
		}
		if v.DeletedAt != nil {
			return cloud.Errorf(cloud.NotFound, "volume %s not found", Quote(id))
		}
		if v.InstanceID != "" {
			in, err := tx.GetInstance(ctx, v.InstanceID)
			if err != nil {
				return err
			}
			if in.State == cloud.Running && in.HostID != "" {
				out = &VolumeRoute{Volume: v, HostID: in.HostID, InstanceID: in.ID}
				return nil
			}
			if in.HostID != "" {
				return &cloud.Error{Code: cloud.Conflict,
					Message: fmt.Sprintf("volume %s is attached to instance %s, which is %s: wait until it runs, or stop it and copy then", v.ID, in.ID, in.State),
					Details: map[string]any{"id": v.ID, "instance_id": in.ID, "state": string(in.State)}}
			}
		}
		host, err := s.volumeHost(ctx, tx, v)
		if err != nil {
			return err
		}
		out = &VolumeRoute{Volume: v, HostID: host}
		return nil
	})
	return out, err
}

// volumeHost picks the host of a volume that no running instance holds.
func (s *Files) volumeHost(ctx context.Context, tx cloud.Tx, v *cloud.Volume) (string, error) {
	rec, err := tx.GetVolumeHost(ctx, v.ID)
	if err != nil && !cloud.IsNotFound(err) {
		return "", err
	}
	hosts, err := tx.ListHosts(ctx)
	if err != nil {
		return "", err
	}
	now := s.now()
	up := func(h *cloud.Host) bool {
		return h.State != fleet.Unhealthy && now.Sub(h.LastHeartbeat) < SilentAfter
	}
	shared := func(h *cloud.Host) bool { return h.Spec.Labels[agentapi.LabelVolumeDirShared] == "true" }
	if v.Kind == cloud.VolumeShared {
		// A shared volume lives on the operator's shared filesystem, which
		// every host with the label mounts: any of them serves it.
		shared = func(h *cloud.Host) bool { _, ok := h.Spec.Labels[LabelSharedVolumes]; return ok }
		rec = nil
	}
	var recorded *cloud.Host
	if rec != nil {
		for _, h := range hosts {
			if h.ID == rec.HostID {
				recorded = h
			}
		}
		if recorded != nil && up(recorded) {
			return recorded.ID, nil
		}
		if recorded != nil && !shared(recorded) || recorded == nil {
			why := "is gone"
			if recorded != nil {
				why = "is " + string(recorded.State) + " or silent (no heartbeat for " + now.Sub(recorded.LastHeartbeat).Round(time.Second).String() + ")"
			}
			return "", &cloud.Error{Code: cloud.Conflict,
				Message: fmt.Sprintf("volume %s's data is on host %s, which %s: copy once the host is back, or ask an operator", v.ID, rec.HostID, why),
				Details: map[string]any{"id": v.ID, "host_id": rec.HostID}}
		}
	}
	for _, h := range hosts {
		if shared(h) && up(h) && (v.Zone == "" || h.Spec.Zone == v.Zone) {
			return h.ID, nil
		}
	}
	if rec != nil {
		return "", &cloud.Error{Code: cloud.Conflict,
			Message: fmt.Sprintf("volume %s is on the hosts' shared volume store, but no host of zone %q that mounts it is up: try again later", v.ID, v.Zone),
			Details: map[string]any{"id": v.ID, "zone": v.Zone}}
	}
	return "", &cloud.Error{Code: cloud.Conflict,
		Message: fmt.Sprintf("volume %s has never been attached to an instance, so no host holds its data yet: attach it to an instance (or create one with it) and copy then; an operator can run the agents with --volume-dir on a filesystem every host mounts to copy into detached volumes", v.ID),
		Details: map[string]any{"id": v.ID}}
}

// The events of a detached volume's files session, which has no instance
// to record a session on (an attached volume's copy is a session of its
// instance: Sessions.Start).
const (
	EventVolumeFilesStarted cloud.EventKind = "volume.files.started"
	EventVolumeFilesEnded   cloud.EventKind = "volume.files.ended"
)

// AuditVolumeSession records that actor's files session sessionID on a
// detached volume started (ended false) or ended, with why and how long
// it took: who copied what, when, through which host.
func (s *Files) AuditVolumeSession(ctx context.Context, a Actor, r *VolumeRoute, sessionID string, ended bool, reason string, took time.Duration) error {
	kind := EventVolumeFilesStarted
	details := map[string]any{"session_id": sessionID, "volume_id": r.Volume.ID, "host_id": r.HostID}
	if ended {
		kind = EventVolumeFilesEnded
		details["duration_ms"] = took.Milliseconds()
	}
	if a.Admin() && a.TenantID != r.Volume.TenantID {
		details["admin"] = true
	}
	// The reason says where and, at the end, how long, for a table of
	// events (gpucloud volumes events); the details have both too.
	line := reason
	if ended && took > 0 {
		line += " after " + took.Round(time.Millisecond).String()
	}
	if !strings.Contains(line, r.HostID) {
		line += " on host " + r.HostID
	}
	return s.tx(ctx, func(tx cloud.Tx) error {
		return tx.AppendEvent(ctx, &cloud.Event{Time: s.now(), Kind: kind, TenantID: r.Volume.TenantID, HostID: r.HostID,
			Actor: a.ID, Reason: line, Details: mustJSON(details)})
	})
}
