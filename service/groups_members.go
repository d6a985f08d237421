package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
)

// SetProtection sets or clears the scale-in protection of an instance
// actor a may see (any instance; it matters to group members): scale-in
// and idle release never pick a protected instance. The workload's
// completion lock (Agents.SetScaleInLock) is kept as it is. A change
// writes the instance and an instance.scale_in event; asking for what
// already holds changes nothing. A terminated instance is a conflict.
func (s *Instances) SetProtection(ctx context.Context, a Actor, instanceID string, protected bool) (*cloud.Instance, error) {
	var out *cloud.Instance
	set := func() error {
		return s.tx(ctx, func(tx cloud.Tx) error {
			out = nil
			in, err := Visible(ctx, a, "instance", instanceID, tx.GetInstance)
			if err != nil {
				return err
			}
			if in.State == cloud.Terminated {
				return &cloud.Error{Code: cloud.Conflict, Message: "instance " + Quote(instanceID) + " is terminated",
					Details: map[string]any{"state": in.State}}
			}
			out = in
			si := cloud.ScaleIn{}
			if in.ScaleIn != nil {
				si = *in.ScaleIn
			}
			if si.Protected == protected {
				return nil
			}
			si.Protected = protected
			in.ScaleIn = &si
			if !si.Held() {
				in.ScaleIn = nil
			}
			now := s.now()
			in.UpdatedAt = now
			if err := tx.UpdateInstance(ctx, in); err != nil {
				return err
			}
			why := "scale-in protection set by " + a.ID
			if !protected {
				why = "scale-in protection removed by " + a.ID
			}
			return tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: cloud.EventInstanceScaleIn, TenantID: in.TenantID,
				InstanceID: in.ID, HostID: in.HostID, Actor: a.ID, Reason: why})
		})
	}
	err := set()
	if cloud.IsConflict(err) && out != nil && out.State != cloud.Terminated {
		// Another writer (the agent's lock, a lifecycle move) changed the
		// instance between the read and the write: read it again.
		err = set()
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// LaunchSpec is one launch the group controller decided: an offering of
// the template, a zone ("" for the template's zones), a market, and the
// launch's sequence number (Status.LaunchSeq after it).
type LaunchSpec struct {
	Offering string
	Zone     string
	Market   cloud.Market
	Seq      int64
}

// GroupMemberKey is the idempotency key of launch seq of group id: a
// retried launch finds the instance the first made.
func GroupMemberKey(groupID string, seq int64) string {
	return "group:" + groupID + ":" + strconv.FormatInt(seq, 10)
}

// GroupMemberName is the name of launch seq of g: "<group name>-<seq>",
// the group's name cut so that the whole is a valid name.
func GroupMemberName(g *cloud.Group, seq int64) string {
	suffix := "-" + strconv.FormatInt(seq, 10)
	base := g.Name
	if len(base)+len(suffix) > maxNameLen {
		base = base[:max(maxNameLen-len(suffix), 1)]
	}
	return base + suffix
}

// LaunchGroupMember creates, in tx, the member of group g that launch l
// asks for, through CreateInstance (so the tenant's quota and the volume
// rule apply as to any instance): pending, GroupID set, from the template
// as it is now (command, environment, labels, and the zones when l names
// none), with the template's image, its tags plus TagGroup and
// TagGroupName, named GroupMemberName, with
// idempotency key GroupMemberKey (a launch whose key was used answers the
// instance made then and creates nothing), market l.Market (spot without a
// spot request). When the template has a VolumeGiB, a new volume of that
// size, named like the instance and in l.Zone, is created with a
// volume.created event and attached to it. A launch CreateInstance refuses
// (a quota: quota_exceeded; an unknown offering: invalid_argument) changes
// nothing the caller did not; the caller's transaction decides.
func LaunchGroupMember(ctx context.Context, tx cloud.Tx, cat *catalog.Catalog, g *cloud.Group, l LaunchSpec, actor string, now time.Time) (*cloud.Instance, error) {
	key := GroupMemberKey(g.ID, l.Seq)
	if old, err := tx.InstanceByKey(ctx, g.TenantID, key); err == nil {
		if old.GroupID != g.ID {
			return nil, &cloud.Error{Code: cloud.Conflict, Message: "idempotency key " + Quote(key) + " is taken by instance " + old.ID,
				Details: map[string]any{"existing_id": old.ID}}
		}
		return old, nil
	} else if !cloud.IsNotFound(err) {
		return nil, err
	}
	switch l.Market {
	case "":
		l.Market = cloud.MarketOnDemand
	case cloud.MarketOnDemand, cloud.MarketSpot:
	default:
		return nil, Field("market", "unknown market %s", Quote(string(l.Market)))
	}
	t := g.Template
	tags := maps.Clone(t.Tags)
	if tags == nil {
		tags = map[string]string{}
	}
	tags[TagGroup], tags[TagGroupName] = g.ID, g.Name
	in := &cloud.Instance{TenantID: g.TenantID, Name: GroupMemberName(g, l.Seq), Offering: l.Offering, Image: t.Image,
		IdempotencyKey: key, Zones: slices.Clone(t.Zones), Labels: slices.Clone(t.Labels), Command: slices.Clone(t.Command),
		Env: maps.Clone(t.Env), Tags: tags, Market: l.Market, GroupID: g.ID, CreatedAt: now,
		SubnetID: t.Subnet, SecurityGroupIDs: slices.Clone(t.SecurityGroups)}
	if l.Zone != "" {
		in.Zones = []string{l.Zone}
	}
	if t.VolumeGiB > 0 {
		zone := l.Zone
		if zone == "" && len(in.Zones) == 1 {
			zone = in.Zones[0]
		}
		v, err := newMemberVolume(ctx, tx, g, in.Name, key, zone, t.VolumeGiB, actor, now)
		if err != nil {
			return nil, err
		}
		in.Volumes = []string{v.ID}
	}
	where := l.Offering
	if l.Zone != "" {
		where += "/" + l.Zone
	}
	reason := fmt.Sprintf("group %s launch %d: %s in %s", g.Name, l.Seq, l.Market, where)
	if err := CreateInstance(ctx, tx, cat, in, actor, reason); err != nil {
		var race *keyRace
		if errors.As(err, &race) {
			return nil, &cloud.Error{Code: cloud.Conflict, Message: "idempotency key " + Quote(key) + " was taken meanwhile by instance " + race.id,
				Details: map[string]any{"existing_id": race.id}}
		}
		return nil, err
	}
	return in, nil
}

// newMemberVolume creates the volume of a group member in tx, as
// Volumes.Create would (the same checks and event), keyed by the launch.
func newMemberVolume(ctx context.Context, tx cloud.Tx, g *cloud.Group, name, key, zone string, gib int64, actor string, now time.Time) (*cloud.Volume, error) {
	if err := CheckVolumeSpec(&api.CreateVolumeRequest{Name: name, SizeGiB: gib, Zone: zone}); err != nil {
		return nil, prefixField(err, "template.volume.")
	}
	v := &cloud.Volume{ID: NewID(VolumePrefix), TenantID: g.TenantID, Name: name, SizeGiB: gib, Zone: zone,
		CreatedAt: now, IdempotencyKey: key + ":volume"}
	if err := tx.CreateVolume(ctx, v); err != nil {
		return nil, err
	}
	return v, tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: EventVolumeCreated, TenantID: g.TenantID, Actor: actor,
		Reason:  "volume " + v.ID + " created for " + name + " of group " + g.Name,
		Details: []byte(fmt.Sprintf(`{"volume_id":%q,"group_id":%q}`, v.ID, g.ID))})
}

// NoticeGroupMember gives a member of a group chosen for scale-in (or
// idle release, or a move to a cheaper pool: reason, one of cloud's
// Reclaim* reasons) the notice a spot reclaim gives: an Interruption to
// terminate at now+notice, which the agent shows on the metadata
// endpoint's instance-action, and a group.scaling event naming the group.
// The group controller terminates it at the deadline, unless it is
// protected or takes its completion lock first (WithdrawGroupNotice). An
// instance that already has a notice with an action (a spot reclaim)
// keeps it: its deadline stands and nothing is written. A held instance
// (ScaleIn.Held) is never given a notice: conflict.
func NoticeGroupMember(ctx context.Context, tx cloud.Tx, in *cloud.Instance, reason string, notice time.Duration, actor string, now time.Time) error {
	if in.ScaleIn.Held() {
		return &cloud.Error{Code: cloud.Conflict, Message: "instance " + in.ID + " is protected or holds a completion lock: it is never scaled in",
			Details: map[string]any{"instance_id": in.ID}}
	}
	if in.Interruption != nil && in.Interruption.Action != "" {
		return nil
	}
	deadline := now.Add(max(notice, 0))
	in.Interruption = &cloud.Interruption{Action: cloud.ActionTerminate, Reason: reason, NoticedAt: now, Deadline: deadline}
	in.UpdatedAt = now
	if err := tx.UpdateInstance(ctx, in); err != nil {
		return err
	}
	details, err := json.Marshal(map[string]any{"group_id": in.GroupID, "reason": reason, "deadline": deadline.UTC()})
	if err != nil {
		return err
	}
	return tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: cloud.EventGroupScaling, TenantID: in.TenantID,
		InstanceID: in.ID, HostID: in.HostID, Actor: actor, Details: details,
		Reason: fmt.Sprintf("scale-in notice (%s) to member %s: terminated at %s unless protected or locked first",
			reason, memberName(in), deadline.UTC().Format(time.RFC3339))})
}

// memberName names a group member in an event: its ID, and its name when
// it has one ("i-0123456789abcdef (web-3)").
func memberName(in *cloud.Instance) string {
	if in.Name == "" {
		return in.ID
	}
	return in.ID + " (" + in.Name + ")"
}

// WithdrawGroupNotice takes back the scale-in notice of a group member that
// took a completion lock (or was protected) before its deadline: a held
// instance is never scaled in. The metadata instance-action disappears with
// it; an event says why.
func WithdrawGroupNotice(ctx context.Context, tx cloud.Tx, in *cloud.Instance, actor string, now time.Time) error {
	if in.Interruption == nil {
		return nil
	}
	reason := in.Interruption.Reason
	in.Interruption = nil
	in.UpdatedAt = now
	if err := tx.UpdateInstance(ctx, in); err != nil {
		return err
	}
	return tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: cloud.EventGroupScaling, TenantID: in.TenantID,
		InstanceID: in.ID, HostID: in.HostID, Actor: actor,
		Reason:  "scale-in notice (" + reason + ") to member " + memberName(in) + " withdrawn: the instance is protected or holds a completion lock",
		Details: []byte(`{"group_id":"` + in.GroupID + `"}`)})
}
