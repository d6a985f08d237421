package service

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"strconv"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/internal/pki"
)

// The agent protocol, server side (docs/CONTROL_PLANE.md, "Agent
// protocol"). An admin creates a join token (Accounts.CreateJoinToken); an
// agent presents it once, with its host's inventory, and receives its own
// credential: a token with role agent, bound to the host, that acts for
// that host and nothing else (AgentActor). With it the agent heartbeats,
// reads what its host must run or stop (Assignments), reports what became
// of each instance (Report) and ships their output (AppendLog) and
// utilization (ReportMetrics).
//
// The files: agents.go joins and heartbeats, with the inventory's checks;
// agents_assignments.go answers what a host must run; agents_reports.go
// applies status reports and scale-in locks; agents_telemetry.go keeps
// output logs and metrics.
//
// A host ID that has joined is not taken by a join token alone: whoever
// holds one could otherwise join under a live host's name, revoke its
// agent's credential and receive its assignments (other tenants'
// environments included). Joining again under an existing host's ID is a
// re-join, allowed only when the request presents the host's current
// credential (the agent re-joins to change its inventory or certificate),
// or when the host has no live credential left because an admin removed
// it (Hosts.Remove revokes them, for a host whose agent lost its
// credential: a reinstall, a wiped disk). Otherwise the join is refused
// (Conflict, reason HostExists) and nothing changes. A re-join keeps the
// host's state and instances, replaces its spec by the new inventory,
// issues a new credential and revokes the host's earlier ones, so that
// one host has one live credential.
//
// Every join, a re-join included, counts one use of its join token
// (Tx.RecordTokenUse) in its own transaction: a token made for one host
// joins one host, one made with max_uses N joins N.

// Event kinds of the agent protocol's host changes.
const (
	EventHostJoined    cloud.EventKind = "host.joined"
	EventHostRejoined  cloud.EventKind = "host.rejoined"
	EventHostHealthy   cloud.EventKind = "host.healthy"
	EventHostInventory cloud.EventKind = "host.inventory"
)

// Reasons (details "reason") of refused joins.
const (
	// HostExists: the host ID has joined, and the join presented neither
	// the host's current credential nor came after an admin removed it.
	HostExists = agentapi.ReasonHostExists
	// JoinTokenUsedUp: the join token has made all the joins it allows.
	JoinTokenUsedUp = agentapi.ReasonJoinTokenUsedUp
)

// Limits on an inventory; real hosts are far below them.
const (
	maxHostGPUs   = 128
	maxHostLabels = 64
	maxUUIDLen    = 128
)

// agentOnly refuses actors that do not speak for a host: the agent
// methods act on the caller's host only.
func agentOnly(a Actor) error {
	if a.Role == cloud.RoleAgent && a.HostID != "" {
		return nil
	}
	return &cloud.Error{Code: cloud.PermissionDenied,
		Message: "the agent protocol is for agent credentials, which an agent's join issues",
		Details: map[string]any{"role": a.Role}}
}

// Join joins a host to the cloud with inventory inv. a is the actor of the
// join token the agent presented (its user owns the new credential), and
// joinToken that token's ID, named in the host's events; the join counts
// one of its uses. credentialID is the ID of the agent credential the
// request presented as the host's current one, which the transport has
// authenticated ("" for none). A host ID the inventory leaves empty is
// chosen here. A new host is schedulable; an existing one is re-joined
// only with its current credential or after an admin removed it (see the
// top of this file), else the join is refused (Conflict, reason
// HostExists) and nothing changes. It answers the
// host's ID, the agent's credential (its secret, shown this once), the
// agent's TLS client certificate (PEM) and whether the host is new.
// Whoever caches token checks must drop its cache after a re-join, which
// revoked the host's earlier credentials.
//
// When the server issues client certificates (Options.SignAgentCert),
// csrPEM, the agent's certificate request, is required and signed with the
// host ID as the certificate's name, whatever the request asks: a join
// without one is an agent too old for mutual TLS, refused (invalid_argument
// on field csr, reason AgentTooOld) before anything changes. Otherwise
// csrPEM is ignored and no certificate is issued. The certificate is
// signed only once the join is allowed: a refused join gets none. A host's
// earlier certificates stay valid until they expire, but they are useless
// without a live credential of the host, and a re-join revokes those.
func (s *Agents) Join(ctx context.Context, a Actor, joinToken string, inv *agentapi.Inventory, csrPEM []byte, credentialID string) (hostID, credential string, certPEM []byte, created bool, err error) {
	if a.Role != cloud.RoleJoin {
		return "", "", nil, false, &cloud.Error{Code: cloud.PermissionDenied,
			Message: "join_token is not a join token; an admin creates one with POST /v1/join-tokens",
			Details: map[string]any{"role": a.Role}}
	}
	if inv == nil {
		return "", "", nil, false, Field("inventory", "is required")
	}
	id := inv.Host.ID
	if err := CheckName("inventory.host.id", id, false); err != nil {
		return "", "", nil, false, err
	}
	if id == "" {
		id = NewID(HostPrefix)
	}
	if _, err := s.hostSpec(inv, id); err != nil {
		return "", "", nil, false, err
	}
	if err := s.checkCSR(csrPEM); err != nil {
		return "", "", nil, false, err
	}
	actor := AgentActor(id).ID
	err = s.tx(ctx, func(tx cloud.Tx) error {
		now := s.now()
		created, credential, certPEM = false, "", nil
		if err := useJoinToken(ctx, tx, joinToken, now); err != nil {
			return err
		}
		u, err := tx.GetUser(ctx, a.ID)
		if err != nil {
			return err
		}
		// Checked above; again here for a spec of our own, which claimMIG
		// changes (a retried transaction starts afresh).
		spec, err := s.hostSpec(inv, id)
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
				Actor: actor, Reason: fmt.Sprintf("joined with join token %s: %s", joinToken, describe(&spec))}); err != nil {
				return err
			}
		case err != nil:
			return err
		default:
			if err := mayRejoin(ctx, tx, id, credentialID, now); err != nil {
				return err
			}
			if err := s.rejoin(ctx, tx, h, spec, joinToken, now); err != nil {
				return err
			}
		}
		if certPEM, err = s.signAgentCert(csrPEM, id); err != nil {
			return err
		}
		t := newToken(u, "agent-"+id, now, nil)
		t.Token.Role, t.Token.HostID = cloud.RoleAgent, id
		if err := tx.CreateToken(ctx, t.Token); err != nil {
			return err
		}
		credential = t.Secret
		return nil
	})
	if err != nil {
		return "", "", nil, false, err
	}
	return id, credential, certPEM, created, nil
}

// AgentTooOld is the reason (details "reason") of a join refused for
// want of a certificate request: the agent predates mutual TLS.
const AgentTooOld = "agent_too_old"

// maxCSR bounds a join's certificate request; a real one is under 1 KiB.
const maxCSR = 16 << 10

// useJoinToken counts one use of join token id, or refuses the join:
// Conflict (reason JoinTokenUsedUp) when it has made all its joins,
// Unauthenticated when it was revoked or expired since the transport
// checked it.
func useJoinToken(ctx context.Context, tx cloud.Tx, id string, now time.Time) error {
	_, err := tx.RecordTokenUse(ctx, id, now)
	switch {
	case cloud.ErrorCode(err) == cloud.Conflict:
		return &cloud.Error{Code: cloud.Conflict,
			Message: fmt.Sprintf("join token %s has made all the joins it allows; an admin creates another (gpucloud hosts join-token, --max-joins N for several hosts)", id),
			Details: map[string]any{"reason": JoinTokenUsedUp, "join_token": id}}
	case cloud.IsNotFound(err):
		return cloud.Errorf(cloud.Unauthenticated, "invalid, revoked or expired token")
	}
	return err
}

// mayRejoin allows a join under existing host id when credentialID, the
// credential the request presented, is a live agent credential of the
// host, or when the host has no live credential left (an admin removed
// it); else it refuses the join (Conflict, reason HostExists).
func mayRejoin(ctx context.Context, tx cloud.Tx, id, credentialID string, now time.Time) error {
	ts, err := tx.ListTokens(ctx, "")
	if err != nil {
		return err
	}
	live := 0
	for _, t := range ts {
		if t.Role != cloud.RoleAgent || t.HostID != id || !liveAt(t, now) {
			continue
		}
		if credentialID != "" && t.ID == credentialID {
			return nil
		}
		live++
	}
	if live == 0 {
		return nil
	}
	return &cloud.Error{Code: cloud.Conflict,
		Message: fmt.Sprintf("host %s has already joined, and its agent's credential is live: a join token cannot join under its name. If the host lost its credential (a reinstall, a wiped disk), an admin removes the host first (gpucloud hosts remove %s), then it joins again", id, id),
		Details: map[string]any{"reason": HostExists, "host": id}}
}

// liveAt reports whether token t is neither revoked nor expired at now,
// as Tx.TokenByHash decides.
func liveAt(t *cloud.Token, now time.Time) bool {
	return (t.RevokedAt == nil || t.RevokedAt.After(now)) && (t.ExpiresAt == nil || t.ExpiresAt.After(now))
}

// checkCSR refuses, before anything changes, a join without a usable
// certificate request when the server issues client certificates.
func (s *Agents) checkCSR(csrPEM []byte) error {
	if s.opts.SignAgentCert == nil {
		return nil
	}
	if len(csrPEM) == 0 {
		return &cloud.Error{Code: cloud.Invalid,
			Message: "csr: this server accepts agents only over mutual TLS, with the client certificate the join issues for a certificate request, and this join sent none: the agent is too old for this server; upgrade it to the server's version",
			Details: map[string]any{"field": "csr", "reason": AgentTooOld}}
	}
	if len(csrPEM) > maxCSR {
		return Field("csr", "is %d bytes; a certificate request is at most %d", len(csrPEM), maxCSR)
	}
	return nil
}

// signAgentCert signs the agent's client certificate for host (nil when
// the server issues none); checkCSR has checked the request.
func (s *Agents) signAgentCert(csrPEM []byte, host string) ([]byte, error) {
	if s.opts.SignAgentCert == nil {
		return nil, nil
	}
	cert, err := s.opts.SignAgentCert(csrPEM, host)
	if errors.Is(err, pki.ErrBadCSR) {
		return nil, Field("csr", "%v", err)
	}
	if err != nil {
		return nil, fmt.Errorf("sign the agent's client certificate: %w", err)
	}
	return cert, nil
}

// rejoin updates an existing host from a new join: new spec, healthy again
// if it was unhealthy, earlier credentials revoked.
func (s *Agents) rejoin(ctx context.Context, tx cloud.Tx, h *cloud.Host, spec fleet.Host, joinToken string, now time.Time) error {
	if err := claimMIG(ctx, tx, h.ID, &spec); err != nil {
		return err
	}
	if err := checkModeChange(ctx, tx, h, &spec); err != nil {
		return err
	}
	if err := heal(ctx, tx, h, now, "re-joined"); err != nil {
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
			revoked++
		}
	}
	return tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: EventHostRejoined, HostID: h.ID, Actor: AgentActor(h.ID).ID,
		Reason: fmt.Sprintf("re-joined with join token %s (%d earlier credentials revoked): %s", joinToken, revoked, describe(&spec))})
}

// heal makes an unhealthy host schedulable again, with an event; the
// caller writes the host. Hosts in other states keep them: a cordoned host
// stays cordoned.
func heal(ctx context.Context, tx cloud.Tx, h *cloud.Host, now time.Time, why string) error {
	if h.State != fleet.Unhealthy {
		return nil
	}
	h.State, h.Spec.State = fleet.Schedulable, fleet.Schedulable
	return tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: EventHostHealthy, HostID: h.ID, Actor: AgentActor(h.ID).ID,
		Reason: fmt.Sprintf("%s after silence since %s: unhealthy -> schedulable", why, h.LastHeartbeat.UTC().Format(time.RFC3339))})
}

// Heartbeat records that a's host is alive, with its inventory when the
// agent sends one (inv may be nil). A heartbeat without an inventory, or
// with one that matches the stored spec, only records the time and leaves
// the host's version alone, so that the scheduler does not rebuild its
// fleet for nothing. A changed inventory replaces the spec and bumps the
// version (the scheduler rebuilds from it), with an event. An unhealthy
// host becomes schedulable again, with an event. A heartbeat without an
// inventory is written in one transaction with the other hosts' that
// arrive meanwhile (heartbeats.go).
func (s *Agents) Heartbeat(ctx context.Context, a Actor, inv *agentapi.Inventory) error {
	if err := agentOnly(a); err != nil {
		return err
	}
	if inv != nil {
		if _, err := s.hostSpec(inv, a.HostID); err != nil {
			return err
		}
	} else if s.beats != nil {
		// Only the time: in a group with the other hosts' (heartbeats.go).
		if err := s.beat(ctx, a.HostID); !errors.Is(err, errAlone) {
			return err
		}
	}
	return s.tx(ctx, func(tx cloud.Tx) error {
		now := s.now()
		h, err := getHost(ctx, tx, a.HostID)
		if err != nil {
			return err
		}
		changed := h.State == fleet.Unhealthy
		if err := heal(ctx, tx, h, now, "heartbeat"); err != nil {
			return err
		}
		if inv != nil {
			spec, err := s.hostSpec(inv, h.ID)
			if err != nil {
				return err
			}
			if err := claimMIG(ctx, tx, h.ID, &spec); err != nil {
				return err
			}
			if err := checkModeChange(ctx, tx, h, &spec); err != nil {
				return err
			}
			spec.State = h.State
			if !sameSpec(h.Spec, spec) {
				changed = true
				h.Spec = spec
				if err := tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: EventHostInventory, HostID: h.ID,
					Actor: AgentActor(h.ID).ID, Reason: "inventory changed: " + describe(&spec)}); err != nil {
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
}

// HeartbeatInterval is how often the server wants a heartbeat from a host
// whose inventory did not change (Options.HeartbeatInterval; zero: at the
// agent's own interval). The heartbeat's answer carries it.
func (s *Agents) HeartbeatInterval() time.Duration { return s.opts.HeartbeatInterval }

// hostSpec turns an agent's inventory into the spec the scheduler places
// on: the host's static description under the given ID, without usage
// figures (the scheduler derives them from the instances that hold
// allocations), with GPU models in their canonical catalog names, and MIG
// instances checked against the catalog's profile tables. The driver and
// CUDA versions become the labels "driver" and "cuda" unless the inventory
// sets them, so that label selectors such as "driver>=550" work; the RDMA
// adapters (checked by hostHCAs) give the label "interconnect" likewise
// (labelInterconnect). Anything
// the scheduler could not use is invalid_argument.
func (s *Agents) hostSpec(inv *agentapi.Inventory, id string) (fleet.Host, error) {
	src := &inv.Host
	if src.ID != "" && src.ID != id {
		return fleet.Host{}, Field("inventory.host.id", "is %s, but this credential is for host %s", Quote(src.ID), Quote(id))
	}
	h := fleet.Host{ID: id, Zone: src.Zone, Rack: src.Rack, Labels: maps.Clone(src.Labels),
		CPUMilli: src.CPUMilli, MemoryMiB: src.MemoryMiB}
	if err := CheckName("inventory.host.zone", h.Zone, false); err != nil {
		return fleet.Host{}, err
	}
	if err := CheckName("inventory.host.rack", h.Rack, false); err != nil {
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
	hcas, err := hostHCAs(src.HCAs)
	if err != nil {
		return fleet.Host{}, err
	}
	h.HCAs = hcas
	if h.Underlay, h.MTU, err = hostUnderlay(src.Underlay, src.MTU); err != nil {
		return fleet.Host{}, err
	}
	if h.DirectAddr, h.DirectFingerprint, err = hostFilesListener(src.DirectAddr, src.DirectFingerprint); err != nil {
		return fleet.Host{}, err
	}
	labelInterconnect(&h)
	if len(h.Labels) > maxHostLabels {
		return fleet.Host{}, Field("inventory.host.labels", "%d labels; the limit is %d", len(h.Labels), maxHostLabels)
	}
	for k, v := range h.Labels {
		if err := CheckName("inventory.host.labels key", k, true); err != nil {
			return fleet.Host{}, err
		}
		if err := CheckText("inventory.host.labels."+k, v, maxTagLen); err != nil {
			return fleet.Host{}, err
		}
	}
	if len(src.GPUs) > maxHostGPUs {
		return fleet.Host{}, Field("inventory.host.gpus", "%d GPUs; the limit is %d", len(src.GPUs), maxHostGPUs)
	}
	uuids := map[string]bool{}
	for i, g := range src.GPUs {
		name := fmt.Sprintf("inventory.host.gpus[%d]", i)
		if g.UUID == "" {
			return fleet.Host{}, Field(name+".uuid", "is required: workloads are given their GPUs by UUID")
		}
		if err := CheckText(name+".uuid", g.UUID, maxUUIDLen); err != nil {
			return fleet.Host{}, err
		}
		if uuids[g.UUID] {
			return fleet.Host{}, Field(name+".uuid", "%s is given twice", Quote(g.UUID))
		}
		uuids[g.UUID] = true
		if g.Island < -1 {
			return fleet.Host{}, Field(name+".island", "%d: use -1 for a GPU without NVLink", g.Island)
		}
		if err := s.checkGPUMode(name, g); err != nil {
			return fleet.Host{}, err
		}
		h.GPUs = append(h.GPUs, fleet.GPU{Index: g.Index, UUID: g.UUID, Model: g.Model,
			MemoryMiB: g.MemoryMiB, Island: g.Island, MIG: g.MIG,
			Partition: g.Partition, MemoryPartition: g.MemoryPartition, VFs: g.VFs})
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
		// The operator's AMD mode in canonical spelling, with its device
		// count.
		c := &checked.GPUs[i]
		g.Partition, g.MemoryPartition, g.VFs, g.Parts = c.Partition, c.MemoryPartition, c.VFs, c.Parts
		if err := s.checkMIGInstances(fmt.Sprintf("inventory.host.gpus[%d]", i), g, src.GPUs[i].Instances); err != nil {
			return fleet.Host{}, err
		}
	}
	return h, nil
}

// checkMIGInstances sets g's MIG instances from the reported ones, each
// checked with the geometry the agent's drivers use (fleet.CheckMIG) and
// completed from the catalog's profile.
func (s *Agents) checkMIGInstances(name string, g *fleet.GPU, reported []fleet.MIGInstance) error {
	if len(reported) == 0 {
		return nil
	}
	if !g.MIG {
		return Field(name+".instances", "GPU %d reports MIG instances but is not in MIG mode", g.Index)
	}
	m, err := s.cat.Model(g.Model)
	if err != nil {
		return Field(name+".model", "%v", err)
	}
	for j, in := range reported {
		p, err := fleet.CheckMIG(m, g.Instances, in.ProfileID, in.Start)
		if err != nil {
			return Field(fmt.Sprintf("%s.instances[%d]", name, j), "%v", err)
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

// checkPrintable accepts valid UTF-8 of printable characters (letters,
// marks, numbers, punctuation, symbols and the ASCII space) up to maxLen
// bytes.
func checkPrintable(field, v string, maxLen int) error {
	if len(v) > maxLen {
		return Field(field, "is %d bytes long; the limit is %d", len(v), maxLen)
	}
	if !utf8.ValidString(v) {
		return Field(field, "is not valid UTF-8")
	}
	for _, c := range v {
		if !unicode.IsPrint(c) {
			return Field(field, "contains the unprintable character %U", c)
		}
	}
	return nil
}

// hostFilesListener checks where a host's agent takes direct sessions, as
// it reports it: host:port with a port, and its certificate's
// fingerprint; both, neither, or the fingerprint alone (an agent that
// takes tunnelled sessions and has no listener).
func hostFilesListener(addr, fp string) (string, string, error) {
	if addr == "" && fp == "" {
		return "", "", nil
	}
	if addr == "" {
		// An agent that takes tunnelled sessions only: no listener.
		canon, err := pki.ParseFingerprint(fp)
		if err != nil {
			return "", "", Field("inventory.host.direct_fingerprint", "%v", err)
		}
		return "", canon, nil
	}
	host, port, err := net.SplitHostPort(addr)
	if n, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || n < 1 || n > 65535 || len(addr) > 255 {
		return "", "", Field("inventory.host.direct_addr", "is %s; want host:port, where clients reach the agent's files listener", Quote(addr))
	}
	if a, err := netip.ParseAddr(host); err == nil && a.IsUnspecified() {
		return "", "", Field("inventory.host.direct_addr", "is %s, which clients cannot dial; give the address they reach the host at", Quote(addr))
	}
	canon, err := pki.ParseFingerprint(fp)
	if err != nil {
		return "", "", Field("inventory.host.direct_fingerprint", "%v", err)
	}
	return addr, canon, nil
}

// hostUnderlay checks a host's fabric address and MTU as its agent
// reports them: an IPv4 unicast address (its overlay endpoint, which the
// other hosts' forwarding entries name; canonical), and an MTU from 1280
// to 65535 (0: not said, 1500). No underlay: the host carries no private
// network's traffic to other hosts.
func hostUnderlay(addr string, mtu int) (string, int, error) {
	if mtu != 0 && (mtu < 1280 || mtu > 65535) {
		return "", 0, Field("inventory.host.mtu", "is %d; want 1280 to 65535, or 0 for 1500", mtu)
	}
	if addr == "" {
		return "", mtu, nil
	}
	a, err := netip.ParseAddr(addr)
	a = a.Unmap()
	if err != nil || !a.Is4() || a.IsUnspecified() || a.IsLoopback() || a.IsMulticast() || a == netip.IPv4Unspecified() ||
		a == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		return "", 0, Field("inventory.host.underlay", "is %s; want the host's IPv4 unicast address on the fabric between hosts", Quote(addr))
	}
	return a.String(), mtu, nil
}
