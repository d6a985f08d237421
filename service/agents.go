package service

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
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
// of each instance (Report) and ships their output (AppendLog).
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

// Log limits: one chunk an agent ships carries at most MaxLogChunk bytes,
// the store keeps the newest MaxLogKeep bytes of each instance, and one
// read answers at most MaxLogPage bytes.
const (
	MaxLogChunk = 1 << 20
	MaxLogKeep  = 8 << 20
	MaxLogPage  = 1 << 20
	// maxReportMessage bounds the message of a status report, which
	// becomes the instance's Reason.
	maxReportMessage = 1024
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
// joinToken that token's ID, named in the host's events. A host ID the
// inventory leaves empty is chosen here. A new host is schedulable; an
// existing one is re-joined (see the top of this file). It answers the
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
// csrPEM is ignored and no certificate is issued. A host's earlier
// certificates stay valid until they expire, but they are useless without
// a live credential of the host, and a re-join revokes those.
func (s *Agents) Join(ctx context.Context, a Actor, joinToken string, inv *agentapi.Inventory, csrPEM []byte) (hostID, credential string, certPEM []byte, created bool, err error) {
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
	if certPEM, err = s.signAgentCert(csrPEM, id); err != nil {
		return "", "", nil, false, err
	}
	actor := AgentActor(id).ID
	err = s.tx(ctx, func(tx cloud.Tx) error {
		now := s.now()
		created, credential = false, ""
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
			if err := s.rejoin(ctx, tx, h, spec, joinToken, now); err != nil {
				return err
			}
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

// signAgentCert signs the agent's client certificate for host (nil when
// the server issues none).
func (s *Agents) signAgentCert(csrPEM []byte, host string) ([]byte, error) {
	if s.opts.SignAgentCert == nil {
		return nil, nil
	}
	if len(csrPEM) == 0 {
		return nil, &cloud.Error{Code: cloud.Invalid,
			Message: "csr: this server accepts agents only over mutual TLS, with the client certificate the join issues for a certificate request, and this join sent none: the agent is too old for this server; upgrade it to the server's version",
			Details: map[string]any{"field": "csr", "reason": AgentTooOld}}
	}
	if len(csrPEM) > maxCSR {
		return nil, Field("csr", "is %d bytes; a certificate request is at most %d", len(csrPEM), maxCSR)
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
// host becomes schedulable again, with an event.
func (s *Agents) Heartbeat(ctx context.Context, a Actor, inv *agentapi.Inventory) error {
	if err := agentOnly(a); err != nil {
		return err
	}
	if inv != nil {
		if _, err := s.hostSpec(inv, a.HostID); err != nil {
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

// Assignments lists what a's host must run or stop: every instance holding
// an allocation there, "run" while scheduled, starting or running, "stop"
// while stopping or terminating. An instance that a stack created as a
// member of a job (tags TagStack and TagStackJob) carries its place in
// the job (stackJobs): its rank, the job's size, its peers and the
// launchers' environment.
func (s *Agents) Assignments(ctx context.Context, a Actor) ([]agentapi.Assignment, error) {
	if err := agentOnly(a); err != nil {
		return nil, err
	}
	grace := int((s.opts.StopGrace + time.Second - 1) / time.Second)
	var out []agentapi.Assignment
	err := s.tx(ctx, func(tx cloud.Tx) error {
		ins, err := tx.ListInstances(ctx, cloud.InstanceFilter{HostID: a.HostID, States: cloud.HoldingStates()})
		if err != nil {
			return err
		}
		jobs, err := stackJobs(ctx, tx, ins)
		if err != nil {
			return err
		}
		out = make([]agentapi.Assignment, 0, len(ins))
		for _, in := range ins {
			desired := agentapi.DesiredRun
			if in.State == cloud.Stopping || in.State == cloud.Terminating {
				desired = agentapi.DesiredStop
			}
			out = append(out, agentapi.Assignment{InstanceID: in.ID, TenantID: in.TenantID,
				Offering: in.Offering, Desired: desired, Placement: in.Placement, Image: in.Image, Command: in.Command,
				Env: in.Env, Volumes: in.Volumes, Tags: in.Tags, GraceSeconds: grace,
				Interruption: in.Interruption, Market: in.Market, SpotRequestID: in.SpotRequestID, ScaleIn: in.ScaleIn,
				Stack: stackInfo(in, jobs)})
		}
		return nil
	})
	return out, err
}

// jobKey names a stack's job: the instances of one tenant's stack that
// carry the same TagStackJob.
type jobKey struct{ tenant, stack, job string }

// jobOf is the job an instance belongs to, if any.
func jobOf(in *cloud.Instance) (jobKey, bool) {
	k := jobKey{tenant: in.TenantID, stack: in.Tags[TagStack], job: in.Tags[TagStackJob]}
	return k, k.tenant != "" && k.stack != "" && k.job != ""
}

// jobMember is one instance of a job, with its rank.
type jobMember struct {
	rank int
	in   *cloud.Instance
}

// jobStates are the states of the instances that count as a job's
// members: every state but terminating, terminated and failed, whose
// instances will not run again (a replacement takes their rank).
var jobStates = []cloud.State{cloud.Pending, cloud.Scheduled, cloud.Starting, cloud.Running, cloud.Stopping, cloud.Stopped, cloud.Lost}

// stackJobs reads the members of the jobs the instances ins belong to, by
// rank: one listing per tenant among them, whatever the number of
// instances and jobs, and only ever the tenant's own instances, so that
// another tenant's instances with the same tags are never peers. A member
// whose rank tag is not a rank is left out.
func stackJobs(ctx context.Context, tx cloud.Tx, ins []*cloud.Instance) (map[jobKey][]jobMember, error) {
	wanted := map[jobKey]bool{}
	tenants := map[string]bool{}
	for _, in := range ins {
		if k, ok := jobOf(in); ok {
			wanted[k], tenants[k.tenant] = true, true
		}
	}
	jobs := make(map[jobKey][]jobMember, len(wanted))
	for _, tenant := range slices.Sorted(maps.Keys(tenants)) {
		all, err := tx.ListInstances(ctx, cloud.InstanceFilter{TenantID: tenant, States: jobStates})
		if err != nil {
			return nil, err
		}
		for _, in := range all {
			k, ok := jobOf(in)
			if !ok || !wanted[k] || in.TenantID != tenant {
				continue
			}
			if rank, ok := tagInt(in.Tags, TagStackRank, 0); ok {
				jobs[k] = append(jobs[k], jobMember{rank: rank, in: in})
			}
		}
	}
	for _, ms := range jobs {
		slices.SortFunc(ms, func(a, b jobMember) int {
			// By rank; of two with one rank (a stopped instance and its
			// replacement), the one whose address is known first.
			if c := cmp.Compare(a.rank, b.rank); c != 0 {
				return c
			}
			if ka, kb := peerAddress(a.in) != "", peerAddress(b.in) != ""; ka != kb {
				if ka {
					return -1
				}
				return 1
			}
			return strings.Compare(a.in.ID, b.in.ID)
		})
	}
	return jobs, nil
}

// tagInt parses a decimal tag of at least lowest.
func tagInt(tags map[string]string, key string, lowest int) (int, bool) {
	n, err := strconv.Atoi(tags[key])
	return n, err == nil && n >= lowest
}

// peerAddress is an instance's private address while it is known to be
// current: the agent reports it as the workload runs, and an address kept
// from an earlier run (a stopped instance, or one started again and not
// running yet) may be another host's.
func peerAddress(in *cloud.Instance) string {
	if in.State == cloud.Running || in.State == cloud.Stopping {
		return in.PrivateAddress
	}
	return ""
}

// stackInfo is an instance's place in its job; nil when it is in none, or
// when its rank or world size tag is not a number (0 or more, 1 or more).
func stackInfo(in *cloud.Instance, jobs map[jobKey][]jobMember) *agentapi.StackInfo {
	k, ok := jobOf(in)
	if !ok {
		return nil
	}
	rank, ok1 := tagInt(in.Tags, TagStackRank, 0)
	world, ok2 := tagInt(in.Tags, TagStackWorld, 1)
	if !ok1 || !ok2 {
		return nil
	}
	members := jobs[k]
	st := &agentapi.StackInfo{Name: k.stack, Resource: in.Tags[TagStackResource], Rank: rank, WorldSize: world,
		Peers: make([]agentapi.Peer, 0, min(len(members), agentapi.MaxStackPeers))}
	master := ""
	for _, m := range members {
		addr := peerAddress(m.in)
		if m.rank == 0 && master == "" {
			master = addr
		}
		if len(st.Peers) < agentapi.MaxStackPeers {
			st.Peers = append(st.Peers, agentapi.Peer{Rank: m.rank, InstanceID: m.in.ID, Address: addr})
		}
	}
	st.Env = map[string]string{
		agentapi.EnvMasterPort: strconv.Itoa(agentapi.StackMasterPort),
		agentapi.EnvWorldSize:  strconv.Itoa(world),
		agentapi.EnvNNodes:     strconv.Itoa(world),
		agentapi.EnvRank:       strconv.Itoa(rank),
		agentapi.EnvNodeRank:   strconv.Itoa(rank),
	}
	if master != "" {
		st.Env[agentapi.EnvMasterAddr] = master
	}
	return st
}

// Report applies what a's agent reports about instance id: reportPath maps
// the report to lifecycle moves, each made by MoveInstance with the
// agent's actor (AgentActor), all in one transaction. A move to a final state
// releases the allocation (MoveInstance clears the instance's host and
// placement) and, for terminated, detaches its volumes. The host's version
// is left alone: the scheduler sees the release in the instances it reads.
//
// A report that does not apply any more changes nothing and is no error: a
// repeated one, a late starting for a running instance, a running for an
// instance asked to stop. A report for an instance that is not on a's host
// is NotFound, except a repeat of the final report that released it from
// this host, which changes nothing, so that an agent may retry a report
// whose answer it did not get.
//
// A report's PrivateAddress (the running report's) is recorded on the
// instance, whose peers in a stack's job learn it from their assignments
// (Assignments); it must be an IP address without a zone, neither
// unspecified nor multicast (invalid_argument otherwise, before anything
// is written). Only the agent of the instance's host gets that far.
func (s *Agents) Report(ctx context.Context, a Actor, id string, rep agentapi.StatusReport) error {
	if err := agentOnly(a); err != nil {
		return err
	}
	if err := checkReport(&rep); err != nil {
		return err
	}
	host := a.HostID
	return s.tx(ctx, func(tx cloud.Tx) error {
		in, err := tx.GetInstance(ctx, id)
		if cloud.IsNotFound(err) {
			return NotFound("instance", id)
		}
		if err != nil {
			return err
		}
		if in.HostID != host {
			if in.HostID == "" && slices.Contains(finalStates(rep), in.State) {
				last, err := lastHost(ctx, tx, in.ID)
				if err != nil || last == host {
					return err
				}
			}
			return NotFound("instance", id)
		}
		path, reason := reportPath(in.State, rep)
		now := s.now()
		devicesChanged := rep.Phase == agentapi.PhaseRunning && recordDevices(in, rep.Devices)
		addressChanged := rep.PrivateAddress != "" && rep.PrivateAddress != in.PrivateAddress
		if addressChanged {
			in.PrivateAddress = rep.PrivateAddress
		}
		for _, to := range path {
			if err := MoveInstance(ctx, tx, in, Move{To: to, Reason: reason, Actor: AgentActor(host).ID}, now); err != nil {
				return err
			}
		}
		if (devicesChanged || addressChanged) && len(path) == 0 {
			in.UpdatedAt = now
			return tx.UpdateInstance(ctx, in)
		}
		return nil
	})
}

// AppendLog appends a chunk of instance id's output, as a's agent read it
// (at most MaxLogChunk bytes); the store keeps the newest MaxLogKeep bytes.
// The instance must be on a's host, or have been on it last: output read
// after the final status report is still accepted.
func (s *Agents) AppendLog(ctx context.Context, a Actor, id string, data []byte) error {
	if err := agentOnly(a); err != nil {
		return err
	}
	if len(data) > MaxLogChunk {
		return &cloud.Error{Code: cloud.Invalid,
			Message: fmt.Sprintf("a log chunk is %d bytes long; the limit is %d", len(data), MaxLogChunk),
			Details: map[string]any{"limit": MaxLogChunk}}
	}
	return s.tx(ctx, func(tx cloud.Tx) error {
		in, err := tx.GetInstance(ctx, id)
		if cloud.IsNotFound(err) {
			return NotFound("instance", id)
		}
		if err != nil {
			return err
		}
		if in.HostID != a.HostID {
			last := ""
			if in.HostID == "" {
				if last, err = lastHost(ctx, tx, in.ID); err != nil {
					return err
				}
			}
			if last != a.HostID {
				return NotFound("instance", id)
			}
		}
		_, err = tx.AppendLog(ctx, in.ID, data, MaxLogKeep)
		return err
	})
}

// Logs reads at most MaxLogPage bytes of the output of an instance a may
// see (another tenant's answers NotFound, like a missing one), from byte
// offset on, or from the oldest byte kept when the output there was
// dropped to keep the log under its cap.
func (s *Agents) Logs(ctx context.Context, a Actor, id string, offset int64) (*cloud.LogChunk, error) {
	if offset < 0 {
		return nil, Field("offset", "must be a byte offset (a non-negative integer), got %d", offset)
	}
	var c *cloud.LogChunk
	err := s.tx(ctx, func(tx cloud.Tx) error {
		in, err := Visible(ctx, a, "instance", id, tx.GetInstance)
		if err != nil {
			return err
		}
		c, err = tx.ReadLog(ctx, in.ID, offset, MaxLogPage)
		if cloud.ErrorCode(err) == cloud.Invalid {
			return Field("offset", "%d is past the end of the log; ask for the offset the previous page gave", offset)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// checkReport validates a status report and cleans its message.
func checkReport(rep *agentapi.StatusReport) error {
	switch rep.Phase {
	case agentapi.PhaseStarting, agentapi.PhaseRunning, agentapi.PhaseStopped, agentapi.PhaseFailed:
	case agentapi.PhaseExited:
		if rep.ExitCode == nil {
			return Field("exit_code", "is required when phase is %s", agentapi.PhaseExited)
		}
	case "":
		return Field("phase", "is required")
	default:
		return Field("phase", "unknown phase %s (want %s, %s, %s, %s or %s)", Quote(rep.Phase),
			agentapi.PhaseStarting, agentapi.PhaseRunning, agentapi.PhaseExited, agentapi.PhaseStopped, agentapi.PhaseFailed)
	}
	rep.Message = cleanMessage(rep.Message)
	if rep.PrivateAddress != "" {
		addr, err := netip.ParseAddr(rep.PrivateAddress)
		if err != nil || addr.Zone() != "" || addr.IsUnspecified() || addr.IsMulticast() {
			return Field("private_address", "%s is not an instance's IP address (IPv4 or IPv6, without a zone)", Quote(rep.PrivateAddress))
		}
		rep.PrivateAddress = addr.Unmap().String()
	}
	for i, d := range rep.Devices {
		if d == "" || len(d) > agentapi.MaxDeviceUUID || strings.IndexFunc(d, func(c rune) bool { return c <= ' ' || c > '~' }) >= 0 {
			return Field(fmt.Sprintf("devices[%d]", i), "%s is not a device UUID (printable ASCII, 1 to %d characters)", Quote(d), agentapi.MaxDeviceUUID)
		}
	}
	return nil
}

// recordDevices copies the device UUIDs an agent reported (the ones its
// workload sees) into the instance's placement, in device order; a report
// whose count does not match the placement's is ignored rather than
// refused (an agent of another version). It reports whether anything
// changed.
func recordDevices(in *cloud.Instance, devices []string) bool {
	p := in.Placement
	if p == nil || len(devices) == 0 || len(devices) != len(p.Devices) {
		return false
	}
	changed := false
	for i := range p.Devices {
		if p.Devices[i].VisibleUUID != devices[i] {
			changed = true
		}
	}
	if !changed {
		return false
	}
	cp := *p
	cp.Devices = slices.Clone(p.Devices)
	for i := range cp.Devices {
		cp.Devices[i].VisibleUUID = devices[i]
	}
	in.Placement = &cp
	return true
}

// cleanMessage makes an agent's message fit for a Reason: valid UTF-8,
// control characters (newlines of a stack trace) as spaces, and cut to
// maxReportMessage bytes. Agents build messages from error strings they do
// not control, so the message is cleaned rather than refused.
func cleanMessage(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(c rune) rune {
		if c < 0x20 || c == 0x7f {
			return ' '
		}
		return c
	}, s)
	s = strings.TrimSpace(s)
	if len(s) > maxReportMessage {
		cut := maxReportMessage
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "..."
	}
	return s
}

// reportPath returns the lifecycle moves a report leads to from state
// from, in order, and the reason they record. Nil means the report does
// not apply (any more): it is answered without a change. The mapping is
// StatusReport's: starting -> starting, running -> running (through
// starting if that report was missed), exited 0 -> stopped (through
// stopping), exited otherwise or failed -> failed, stopped -> stopped; an
// instance being terminated goes to terminated whatever ended it. A stopped
// report applies only while the server asked for a stop: for an instance
// that should run it can only be a late copy from an earlier run.
func reportPath(from cloud.State, rep agentapi.StatusReport) ([]cloud.State, string) {
	var path []cloud.State
	var reason string
	switch rep.Phase {
	case agentapi.PhaseStarting:
		reason = "the agent is starting the workload"
		if from == cloud.Scheduled {
			path = []cloud.State{cloud.Starting}
		}
	case agentapi.PhaseRunning:
		reason = "the workload is running"
		switch from {
		case cloud.Scheduled:
			path = []cloud.State{cloud.Starting, cloud.Running}
		case cloud.Starting:
			path = []cloud.State{cloud.Running}
		}
	case agentapi.PhaseStopped:
		reason = "the agent stopped the workload"
		switch from {
		case cloud.Stopping:
			path = []cloud.State{cloud.Stopped}
		case cloud.Terminating:
			path = []cloud.State{cloud.Terminated}
		}
	case agentapi.PhaseExited, agentapi.PhaseFailed:
		target := cloud.Failed
		reason = "the agent could not start the workload"
		if rep.Phase == agentapi.PhaseExited {
			reason = "exit code " + strconv.Itoa(*rep.ExitCode)
			if *rep.ExitCode == 0 {
				target, reason = cloud.Stopped, cloud.ReasonExitedOK
			}
		}
		switch {
		case from == cloud.Terminating:
			path = []cloud.State{cloud.Terminated}
		case target == cloud.Failed && cloud.CanMove(from, cloud.Failed):
			path = []cloud.State{cloud.Failed}
		case target == cloud.Stopped && from == cloud.Stopping:
			path = []cloud.State{cloud.Stopped}
		case target == cloud.Stopped && cloud.CanMove(from, cloud.Stopping):
			path = []cloud.State{cloud.Stopping, cloud.Stopped}
		}
	}
	if rep.Message != "" {
		if rep.Phase == agentapi.PhaseFailed {
			reason = rep.Message
		} else {
			reason += ": " + rep.Message
		}
	}
	return path, reason
}

// finalStates are the states a final report (exited, stopped, failed) may
// have led to, for telling a repeated report from a stray one.
func finalStates(rep agentapi.StatusReport) []cloud.State {
	switch {
	case rep.Phase == agentapi.PhaseStopped || rep.Phase == agentapi.PhaseExited && *rep.ExitCode == 0:
		return []cloud.State{cloud.Stopped, cloud.Terminated}
	case rep.Phase == agentapi.PhaseExited || rep.Phase == agentapi.PhaseFailed:
		return []cloud.State{cloud.Failed, cloud.Terminated}
	}
	return nil
}

// lastHost returns the host an instance was last on: the host of its
// newest event that names one. Every move of an instance that holds an
// allocation names its host, so after a release this is the host that
// held it last.
func lastHost(ctx context.Context, tx cloud.Tx, instanceID string) (string, error) {
	evs, err := tx.ListEvents(ctx, cloud.EventFilter{InstanceID: instanceID})
	if err != nil {
		return "", err
	}
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].HostID != "" {
			return evs[i].HostID, nil
		}
	}
	return "", nil
}

// hostSpec turns an agent's inventory into the spec the scheduler places
// on: the host's static description under the given ID, without usage
// figures (the scheduler derives them from the instances that hold
// allocations), with GPU models in their canonical catalog names, and MIG
// instances checked against the catalog's profile tables. The driver and
// CUDA versions become the labels "driver" and "cuda" unless the inventory
// sets them, so that label selectors such as "driver>=550" work. Anything
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

// MaxMetricSkew is how far in the future a metric sample's time may lie
// (the agent's clock runs ahead of the server's); ReportMetrics records a
// sample further ahead at the server's time instead.
const MaxMetricSkew = time.Minute

// ReportMetrics records the utilization samples a's agent took of the
// instances on its host, as cloud.MetricPoints (gpu_utilization and
// cpu_utilization, with the instance's tenant and group), all in one
// transaction: the whole report is written or none of it.
//
// A report is refused, and nothing of it written, when a sample names an
// instance that is not on a's host: a missing instance and another host's
// answer the same NotFound (as the other agent routes do), whose details
// carry the instance's "id" and the sample's "field", so that an agent
// whose instance just left can send the rest again. A sample needs an
// instance ID, a time and at least one value; values must be finite and in
// [0, 1]. When the report says when it was sent (SentAt), every sample's
// time is shifted by the server's now less SentAt, which corrects an agent
// clock that is off in either direction (a slow one would otherwise make
// fresh samples look stale to the group controller). Times still more than
// MaxMetricSkew ahead of the server's clock are clamped to the server's
// now rather than refused, so that no point lands in the future, where it
// would confuse readers that page by time. A time that lies, after the
// correction, more than MetricMaxAge before the server's clock (the limit
// of custom metrics too) is invalid_argument: an agent sends its samples
// as it takes them, so such a time is a clock or a report gone wrong, and
// one far enough back is not even a time the store can keep. An empty
// report writes nothing.
func (s *Agents) ReportMetrics(ctx context.Context, a Actor, rep agentapi.MetricsReport) error {
	if err := agentOnly(a); err != nil {
		return err
	}
	if err := checkMetrics(rep); err != nil {
		return err
	}
	if len(rep.Samples) == 0 {
		return nil
	}
	return s.tx(ctx, func(tx cloud.Tx) error {
		now := s.now()
		ins := map[string]*cloud.Instance{}
		points := make([]cloud.MetricPoint, 0, 2*len(rep.Samples))
		for i, smp := range rep.Samples {
			in := ins[smp.InstanceID]
			if in == nil {
				got, err := tx.GetInstance(ctx, smp.InstanceID)
				if err != nil && !cloud.IsNotFound(err) {
					return err
				}
				if err != nil || got.HostID != a.HostID {
					return notOnHost(smp.InstanceID, fmt.Sprintf("samples[%d].instance_id", i))
				}
				in, ins[smp.InstanceID] = got, got
			}
			at := smp.At.UTC()
			if !rep.SentAt.IsZero() {
				at = at.Add(now.Sub(rep.SentAt))
			}
			if at.After(now.Add(MaxMetricSkew)) {
				at = now.UTC()
			}
			if at.Before(now.Add(-MetricMaxAge)) {
				return Field(fmt.Sprintf("samples[%d].at", i), "%s (after the sent_at correction) is more than %s before the server's clock; send samples as they are taken",
					at.Format(time.RFC3339), MetricMaxAge)
			}
			var mem *float64
			if smp.GPUMemoryUsedBytes != nil {
				mem = new(float64(*smp.GPUMemoryUsedBytes))
			}
			for _, m := range []struct {
				name string
				v    *float64
			}{{cloud.MetricGPUUtilization, smp.GPUUtilization}, {cloud.MetricCPUUtilization, smp.CPUUtilization},
				{cloud.MetricGPUMemoryUsed, mem}} {
				if m.v != nil {
					points = append(points, cloud.MetricPoint{TenantID: in.TenantID, Name: m.name,
						InstanceID: in.ID, GroupID: in.GroupID, At: at, Value: *m.v})
				}
			}
		}
		return tx.AppendMetrics(ctx, points)
	})
}

// notOnHost is the NotFound of an instance an agent named that is not on
// its host, with the request field that named it.
func notOnHost(id, field string) error {
	err := NotFound("instance", id).(*cloud.Error)
	err.Message += " on this host"
	err.Details["field"] = field
	return err
}

// MaxGPUMemoryBytes bounds a reported GPU memory figure: 64 GPUs of
// 1 TiB, far above any host.
const MaxGPUMemoryBytes = 64 << 40

// checkMetrics validates a metrics report before any read.
func checkMetrics(rep agentapi.MetricsReport) error {
	if n := len(rep.Samples); n > agentapi.MaxMetricSamples {
		return Field("samples", "%d samples; the limit is %d per report", n, agentapi.MaxMetricSamples)
	}
	for i, smp := range rep.Samples {
		name := fmt.Sprintf("samples[%d]", i)
		if smp.InstanceID == "" {
			return Field(name+".instance_id", "is required")
		}
		if smp.At.IsZero() {
			return Field(name+".at", "is required")
		}
		if smp.GPUUtilization == nil && smp.CPUUtilization == nil && smp.GPUMemoryUsedBytes == nil {
			return Field(name, "has none of gpu_utilization, cpu_utilization and gpu_memory_used_bytes")
		}
		if m := smp.GPUMemoryUsedBytes; m != nil && *m > MaxGPUMemoryBytes {
			return Field(name+".gpu_memory_used_bytes", "%d bytes is more than any host's GPUs hold (%d)", *m, uint64(MaxGPUMemoryBytes))
		}
		for _, f := range []struct {
			field string
			v     *float64
		}{{"gpu_utilization", smp.GPUUtilization}, {"cpu_utilization", smp.CPUUtilization}} {
			if f.v != nil && !(*f.v >= 0 && *f.v <= 1) { // NaN fails both
				return Field(name+"."+f.field, "%v is not a utilization: want a number from 0 to 1", *f.v)
			}
		}
	}
	return nil
}

// SetScaleInLock takes (req.Locked) or releases the completion lock of
// instance id, on behalf of its workload, which asked through its metadata
// endpoint: scale-in and idle release never pick a locked instance. Only
// the live instances on a's host may be locked; another host's, or a
// missing one, is NotFound, as on the other agent routes. The lock's time
// is the server's; the tenant's Protected flag is kept as it is. Taking a
// lock the instance already holds with the same reason, or releasing one
// it does not hold, changes nothing; any other change writes the instance
// (with its version; a write that lost a race is retried once) and an
// instance.scale_in event naming the agent. It answers the instance's
// scale-in protection as it now stands, empty when nothing holds it.
func (s *Agents) SetScaleInLock(ctx context.Context, a Actor, id string, req agentapi.LockRequest) (*cloud.ScaleIn, error) {
	if err := agentOnly(a); err != nil {
		return nil, err
	}
	if !req.Locked {
		req.Reason = ""
	}
	if err := checkPrintable("reason", req.Reason, agentapi.MaxLockReason); err != nil {
		return nil, err
	}
	var out *cloud.ScaleIn
	set := func() error {
		return s.tx(ctx, func(tx cloud.Tx) error {
			in, err := tx.GetInstance(ctx, id)
			if err != nil && !cloud.IsNotFound(err) {
				return err
			}
			if err != nil || in.HostID != a.HostID || !slices.Contains(cloud.HoldingStates(), in.State) {
				return notOnHost(id, "id")
			}
			now := s.now()
			si := &cloud.ScaleIn{}
			if in.ScaleIn != nil {
				si.Protected = in.ScaleIn.Protected
				if l := in.ScaleIn.Lock; l != nil {
					si.Lock = &cloud.ScaleLock{Reason: l.Reason, At: l.At}
				}
			}
			out = si
			var why string
			switch {
			case req.Locked && si.Lock != nil && si.Lock.Reason == req.Reason:
				return nil
			case req.Locked:
				si.Lock = &cloud.ScaleLock{Reason: req.Reason, At: now.UTC()}
				why = "the workload took its completion lock"
				if req.Reason != "" {
					why += ": " + req.Reason
				}
			case si.Lock == nil:
				return nil
			default:
				si.Lock = nil
				why = "the workload released its completion lock"
			}
			in.ScaleIn = &cloud.ScaleIn{Protected: si.Protected, Lock: si.Lock}
			if !in.ScaleIn.Held() {
				in.ScaleIn = nil
			}
			if err := tx.UpdateInstance(ctx, in); err != nil {
				return err
			}
			return tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: cloud.EventInstanceScaleIn, TenantID: in.TenantID,
				InstanceID: in.ID, HostID: in.HostID, Actor: AgentActor(a.HostID).ID, Reason: why})
		})
	}
	err := set()
	if cloud.IsConflict(err) {
		// Another writer (the API's protection, a lifecycle move) changed
		// the instance between our read and write: read it again.
		err = set()
	}
	if err != nil {
		return nil, err
	}
	return out, nil
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
