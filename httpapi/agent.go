package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"time"

	"github.com/gpucloud/gpucloud/agent/gpu"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
)

// The agent protocol, part one: join tokens, joining and heartbeats
// (docs/CONTROL_PLANE.md, "Agent protocol"; agentwire.go has the wire
// types). An admin creates a join token; an agent presents it once, with
// its host's inventory, and receives its own credential: a token with role
// agent, bound to the host, that opens the /v1/agent routes for that host
// and nothing else.
//
// Joining again with a host ID that exists is a re-join: the agent lost its
// credential (a reinstall, a wiped disk) and proves with a valid join token
// that the operator still wants the host. The host keeps its state and its
// instances, its spec is replaced by the new inventory, a new credential is
// issued and the host's earlier credentials are revoked, so that one host
// has one live credential. Anyone holding a join token can therefore take
// over any host ID: join tokens are as sensitive as admin tokens, and
// should be short-lived or revoked after use.

// Event kinds of the agent protocol's host changes.
const (
	EventHostJoined    cloud.EventKind = "host.joined"
	EventHostRejoined  cloud.EventKind = "host.rejoined"
	EventHostHealthy   cloud.EventKind = "host.healthy"
	EventHostInventory cloud.EventKind = "host.inventory"
)

// Limits on an inventory; real hosts are far below them.
const (
	maxHostGPUs   = 128
	maxHostLabels = 64
	maxUUIDLen    = 128
)

// agentActor is the actor of events an agent causes.
func agentActor(host string) string { return "agent:" + host }

// createJoinToken handles POST /v1/join-tokens (admin): a token with role
// join, owned by the calling admin. The secret is in the answer only.
func (s *api) createJoinToken(w http.ResponseWriter, r *http.Request, p principal) error {
	var req CreateJoinTokenRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	if err := checkName("name", req.Name, true); err != nil {
		return err
	}
	now := s.now()
	if req.ExpiresAt != nil && !req.ExpiresAt.After(now) {
		return field("expires_at", "%s is not in the future", req.ExpiresAt.Format(time.RFC3339))
	}
	var out CreatedToken
	err := s.tx(r.Context(), func(tx cloud.Tx) error {
		u, err := tx.GetUser(r.Context(), p.UserID)
		if err != nil {
			return err
		}
		t, secret := newToken(u, req.Name, now, req.ExpiresAt)
		t.Role = cloud.RoleJoin
		if err := tx.CreateToken(r.Context(), t); err != nil {
			return err
		}
		out = CreatedToken{Token: t, Secret: secret}
		return tx.AppendEvent(r.Context(), &cloud.Event{Time: now, Kind: EventTokenCreated,
			TenantID: u.TenantID, Actor: p.UserID, Reason: "join token " + t.ID + " (" + t.Name + ") created"})
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}

// listJoinTokens handles GET /v1/join-tokens (admin): every join token,
// revoked and expired ones included. DELETE /v1/tokens/{id} revokes one.
func (s *api) listJoinTokens(w http.ResponseWriter, r *http.Request, p principal) error {
	out := TokenList{Tokens: []*cloud.Token{}}
	err := s.tx(r.Context(), func(tx cloud.Tx) error {
		ts, err := tx.ListTokens(r.Context(), "")
		out.Tokens = out.Tokens[:0]
		for _, t := range ts {
			if t.Role == cloud.RoleJoin {
				out.Tokens = append(out.Tokens, t)
			}
		}
		return err
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// agentJoin handles POST /v1/agent/join. The route is public: the join
// token travels in the body, and is checked here. It answers 201 for a new
// host and 200 for a re-join.
func (s *api) agentJoin(w http.ResponseWriter, r *http.Request, _ principal) error {
	var req JoinRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	if req.JoinToken == "" {
		return unauthenticated("join_token is missing; an admin creates one with POST /v1/join-tokens")
	}
	jp, err := s.lookupToken(r.Context(), req.JoinToken)
	if err != nil {
		return err
	}
	if jp.Role != cloud.RoleJoin {
		return &cloud.Error{Code: cloud.PermissionDenied,
			Message: "join_token is not a join token; an admin creates one with POST /v1/join-tokens",
			Details: map[string]any{"role": jp.Role}}
	}
	if req.Inventory == nil {
		return field("inventory", "is required")
	}
	id := req.Inventory.Host.ID
	if err := checkName("inventory.host.id", id, false); err != nil {
		return err
	}
	if id == "" {
		id = newID("h-")
	}
	if _, err := s.hostSpec(req.Inventory, id); err != nil {
		return err
	}
	var out JoinResponse
	created := false
	err = s.tx(r.Context(), func(tx cloud.Tx) error {
		ctx := r.Context()
		now := s.now()
		created = false
		u, err := tx.GetUser(ctx, jp.UserID)
		if err != nil {
			return err
		}
		spec, err := s.hostSpec(req.Inventory, id)
		if err != nil {
			return err
		}
		h, err := tx.GetHost(ctx, id)
		switch {
		case cloud.IsNotFound(err):
			created = true
			spec.State = fleet.Schedulable
			h = &cloud.Host{ID: id, State: fleet.Schedulable, Spec: spec, LastHeartbeat: now}
			if err := tx.PutHost(ctx, h); err != nil {
				return err
			}
			if err := tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: EventHostJoined, HostID: id,
				Actor: agentActor(id), Reason: fmt.Sprintf("joined with join token %s: %s", jp.TokenID, describe(&spec))}); err != nil {
				return err
			}
		case err != nil:
			return err
		default:
			if err := s.rejoin(ctx, tx, h, spec, jp.TokenID, now); err != nil {
				return err
			}
		}
		t, secret := newToken(u, "agent-"+id, now, nil)
		t.Role, t.HostID = cloud.RoleAgent, id
		if err := tx.CreateToken(ctx, t); err != nil {
			return err
		}
		out = JoinResponse{HostID: id, Credential: secret}
		return nil
	})
	if !created {
		// A re-join revoked the host's earlier credentials.
		s.tokens.clear()
	}
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, out)
	return nil
}

// rejoin updates an existing host from a new join: new spec, healthy again
// if it was unhealthy, earlier credentials revoked.
func (s *api) rejoin(ctx context.Context, tx cloud.Tx, h *cloud.Host, spec fleet.Host, joinToken string, now time.Time) error {
	if err := claimMIG(ctx, tx, h.ID, &spec); err != nil {
		return err
	}
	if err := s.heal(ctx, tx, h, now, "re-joined"); err != nil {
		return err
	}
	spec.State = h.State
	h.Spec, h.LastHeartbeat = spec, now
	if err := tx.PutHost(ctx, h); err != nil {
		return err
	}
	ts, err := tx.ListTokens(ctx, "")
	if err != nil {
		return err
	}
	revoked := 0
	for _, t := range ts {
		if t.Role == cloud.RoleAgent && t.HostID == h.ID && t.RevokedAt == nil {
			if err := tx.RevokeToken(ctx, t.ID, now); err != nil {
				return err
			}
			s.tokens.clear() // also before commit: a retry revokes again
			revoked++
		}
	}
	return tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: EventHostRejoined, HostID: h.ID, Actor: agentActor(h.ID),
		Reason: fmt.Sprintf("re-joined with join token %s (%d earlier credentials revoked): %s", joinToken, revoked, describe(&spec))})
}

// heal makes an unhealthy host schedulable again, with an event; the
// caller writes the host. Hosts in other states keep them: a cordoned host
// stays cordoned.
func (s *api) heal(ctx context.Context, tx cloud.Tx, h *cloud.Host, now time.Time, why string) error {
	if h.State != fleet.Unhealthy {
		return nil
	}
	h.State, h.Spec.State = fleet.Schedulable, fleet.Schedulable
	return tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: EventHostHealthy, HostID: h.ID, Actor: agentActor(h.ID),
		Reason: fmt.Sprintf("%s after silence since %s: unhealthy -> schedulable", why, h.LastHeartbeat.UTC().Format(time.RFC3339))})
}

// agentHeartbeat handles POST /v1/agent/heartbeat. A heartbeat without an
// inventory, or with one that matches the stored spec, only records the
// time and leaves the host's version alone, so that the scheduler does not
// rebuild its fleet for nothing. A changed inventory replaces the spec and
// bumps the version (the scheduler rebuilds from it), with an event. An
// unhealthy host becomes schedulable again, with an event.
func (s *api) agentHeartbeat(w http.ResponseWriter, r *http.Request, p principal) error {
	var req HeartbeatRequest
	if err := decodeOptionalBody(w, r, &req); err != nil {
		return err
	}
	if req.Inventory != nil {
		if _, err := s.hostSpec(req.Inventory, p.HostID); err != nil {
			return err
		}
	}
	err := s.tx(r.Context(), func(tx cloud.Tx) error {
		ctx := r.Context()
		now := s.now()
		h, err := tx.GetHost(ctx, p.HostID)
		if cloud.IsNotFound(err) {
			return notFound("host", p.HostID)
		}
		if err != nil {
			return err
		}
		changed := h.State == fleet.Unhealthy
		if err := s.heal(ctx, tx, h, now, "heartbeat"); err != nil {
			return err
		}
		if req.Inventory != nil {
			spec, err := s.hostSpec(req.Inventory, h.ID)
			if err != nil {
				return err
			}
			if err := claimMIG(ctx, tx, h.ID, &spec); err != nil {
				return err
			}
			spec.State = h.State
			if !sameSpec(h.Spec, spec) {
				changed = true
				h.Spec = spec
				if err := tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: EventHostInventory, HostID: h.ID,
					Actor: agentActor(h.ID), Reason: "inventory changed: " + describe(&spec)}); err != nil {
					return err
				}
			}
		}
		if !changed {
			return tx.Heartbeat(ctx, h.ID, now)
		}
		h.Spec.State, h.LastHeartbeat = h.State, now
		return tx.PutHost(ctx, h)
	})
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// hostSpec turns an agent's inventory into the spec the scheduler places
// on: the host's static description under the given ID, without usage
// figures (the scheduler derives them from the instances that hold
// allocations), with GPU models in their canonical catalog names, and MIG
// instances checked against the catalog's profile tables. The driver and
// CUDA versions become the labels "driver" and "cuda" unless the inventory
// sets them, so that label selectors such as "driver>=550" work. Anything
// the scheduler could not use is invalid_argument.
func (s *api) hostSpec(inv *gpu.Inventory, id string) (fleet.Host, error) {
	src := &inv.Host
	if src.ID != "" && src.ID != id {
		return fleet.Host{}, field("inventory.host.id", "is %s, but this credential is for host %s", quote(src.ID), quote(id))
	}
	h := fleet.Host{ID: id, Zone: src.Zone, Rack: src.Rack, Labels: maps.Clone(src.Labels),
		CPUMilli: src.CPUMilli, MemoryMiB: src.MemoryMiB}
	if err := checkName("inventory.host.zone", h.Zone, false); err != nil {
		return fleet.Host{}, err
	}
	if err := checkName("inventory.host.rack", h.Rack, false); err != nil {
		return fleet.Host{}, err
	}
	for k, v := range map[string]string{"driver": inv.Driver, "cuda": inv.CUDA} {
		if _, set := h.Labels[k]; !set && v != "" {
			if h.Labels == nil {
				h.Labels = map[string]string{}
			}
			h.Labels[k] = v
		}
	}
	if len(h.Labels) > maxHostLabels {
		return fleet.Host{}, field("inventory.host.labels", "%d labels; the limit is %d", len(h.Labels), maxHostLabels)
	}
	for k, v := range h.Labels {
		if err := checkName("inventory.host.labels key", k, true); err != nil {
			return fleet.Host{}, err
		}
		if err := checkText("inventory.host.labels."+k, v, maxTagLen); err != nil {
			return fleet.Host{}, err
		}
	}
	if len(src.GPUs) > maxHostGPUs {
		return fleet.Host{}, field("inventory.host.gpus", "%d GPUs; the limit is %d", len(src.GPUs), maxHostGPUs)
	}
	uuids := map[string]bool{}
	for i, g := range src.GPUs {
		name := fmt.Sprintf("inventory.host.gpus[%d]", i)
		if g.UUID == "" {
			return fleet.Host{}, field(name+".uuid", "is required: workloads are given their GPUs by UUID")
		}
		if err := checkText(name+".uuid", g.UUID, maxUUIDLen); err != nil {
			return fleet.Host{}, err
		}
		if uuids[g.UUID] {
			return fleet.Host{}, field(name+".uuid", "%s is given twice", quote(g.UUID))
		}
		uuids[g.UUID] = true
		if g.Island < -1 {
			return fleet.Host{}, field(name+".island", "%d: use -1 for a GPU without NVLink", g.Island)
		}
		h.GPUs = append(h.GPUs, fleet.GPU{Index: g.Index, UUID: g.UUID, Model: g.Model,
			MemoryMiB: g.MemoryMiB, Island: g.Island, MIG: g.MIG})
	}
	// The fleet's own validation, on a scratch fleet, is exactly what the
	// scheduler will run when it rebuilds from this spec.
	scratch := fleet.New()
	if err := scratch.AddHost(&h, s.cat); err != nil {
		return fleet.Host{}, &cloud.Error{Code: cloud.Invalid, Message: "inventory: " + err.Error(),
			Details: map[string]any{"field": "inventory.host"}}
	}
	checked := scratch.Host(id)
	for i := range h.GPUs {
		g := &h.GPUs[i]
		g.Model, g.MemoryMiB = checked.GPUs[i].Model, checked.GPUs[i].MemoryMiB
		if err := s.checkMIGInstances(fmt.Sprintf("inventory.host.gpus[%d]", i), g, src.GPUs[i].Instances); err != nil {
			return fleet.Host{}, err
		}
	}
	return h, nil
}

// checkMIGInstances sets g's MIG instances from the reported ones, each
// checked with the geometry the agent's drivers use (gpu.CheckMIG) and
// completed from the catalog's profile.
func (s *api) checkMIGInstances(name string, g *fleet.GPU, reported []fleet.MIGInstance) error {
	if len(reported) == 0 {
		return nil
	}
	if !g.MIG {
		return field(name+".instances", "GPU %d reports MIG instances but is not in MIG mode", g.Index)
	}
	m, err := s.cat.Model(g.Model)
	if err != nil {
		return field(name+".model", "%v", err)
	}
	for j, in := range reported {
		p, err := gpu.CheckMIG(m, g.Instances, in.ProfileID, in.Start)
		if err != nil {
			return field(fmt.Sprintf("%s.instances[%d]", name, j), "%v", err)
		}
		g.Instances = append(g.Instances, fleet.MIGInstance{ProfileID: p.ID, Start: in.Start,
			Slots: p.MemorySlots, Slices: p.ComputeSlices, Media: p.MediaExtensions})
	}
	return nil
}

// claimMIG marks the MIG instances of a spec that belong to allocations on
// the host: the driver reports every instance with an empty Alloc, and the
// server matches them to the placements of the instances holding the host
// by GPU, start slot and profile. The scheduler's fleet then counts them
// once, as the allocation's, instead of also as unrented hardware.
func claimMIG(ctx context.Context, tx cloud.Tx, hostID string, spec *fleet.Host) error {
	ins, err := tx.ListInstances(ctx, cloud.InstanceFilter{HostID: hostID, States: cloud.HoldingStates()})
	if err != nil {
		return err
	}
	for _, in := range ins {
		if in.Placement == nil {
			continue
		}
		for _, d := range in.Placement.Devices {
			if d.Kind != fleet.MIGSlice || d.GPU < 0 || d.GPU >= len(spec.GPUs) {
				continue
			}
			g := &spec.GPUs[d.GPU]
			for k := range g.Instances {
				mi := &g.Instances[k]
				if mi.Alloc == "" && mi.Start == d.MIGStart && mi.ProfileID == d.MIGProfileID {
					mi.Alloc = in.ID
				}
			}
		}
	}
	return nil
}

// sameSpec reports whether two specs describe the same host, whatever
// their State fields say (the host's State is the one that counts).
func sameSpec(a, b fleet.Host) bool {
	a.State, b.State = "", ""
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && bytes.Equal(ja, jb)
}

// describe summarizes a spec for an event's reason.
func describe(h *fleet.Host) string {
	out := fmt.Sprintf("%d GPUs", len(h.GPUs))
	if m := h.Model(); m != "" {
		out += " " + m
	}
	if d := h.Labels["driver"]; d != "" {
		out += ", driver " + d
	}
	return out
}
