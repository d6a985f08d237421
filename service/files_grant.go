package service

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/internal/pki"
)

// Direct sessions (docs/DATA.md, "Direct copies"; docs/ACCESS.md,
// "Direct port forwards"): where the operator turns them on
// (Options.DirectAccess) and a host's agent listens for them
// (fleet.Host.DirectAddr), a tenant's copy or port forward can go
// straight to the agent with a grant the server signs, instead of through
// the server's relay. The grant is decided by the same rules as the
// relayed session (who may open it, which host serves it, the session
// limit) and recorded as one: a session of the instance, or a detached
// volume's events.

// Via is how a grant's connections reach the agent.
type Via int

const (
	// ViaDirect: the client dials the agent's listener (Options.DirectAccess
	// on, and the host's agent listening).
	ViaDirect Via = iota
	// ViaTunnel: the client opens each connection through the server
	// (GET /v1/tunnels, docs/ACCESS.md, "Tunnels"), which splices it to a
	// connection the agent dials back; the TLS session is still the
	// client's and the agent's alone. It needs neither DirectAccess nor a
	// listener on the host: only an agent that serves direct sessions
	// (one whose inventory reports a direct certificate).
	ViaTunnel
)

// flag is how a grant's session record names its way.
func (v Via) flag() string {
	if v == ViaTunnel {
		return "--tunnel"
	}
	return "--direct"
}

func viaOf(via []Via) Via {
	if len(via) > 0 {
		return via[0]
	}
	return ViaDirect
}

// DirectGrantTTL is how long a grant may open connections. A connection
// opened in time runs until its copy ends.
const DirectGrantTTL = 2 * time.Minute

// DirectGrant is a grant and where to use it.
type DirectGrant struct {
	HostID string
	// Address is the agent's listener (host:port) and Fingerprint its
	// certificate's, which the client pins.
	Address     string
	Fingerprint string
	// Grant is the signed token (agentapi.DirectGrant) the client sends.
	Grant     string
	SessionID string
	ExpiresAt time.Time
}

// Grant issues actor a grant for a direct files session on instance or
// volume id (kind "instances" or "volumes"), bound to the client's key:
// clientKey is the fingerprint of the TLS certificate the client will
// present to the agent (invalid_argument when it is not one). Direct
// copies off, or a host
// whose agent does not listen for them, answer permission_denied and
// conflict saying so (the client then copies through the relay); the rest
// is as a relayed session's start: another tenant's resource is
// not_found, a stopped instance conflict, the session limit
// quota_exceeded.
//
// With ViaTunnel the grant's connections go through the server's tunnels:
// direct sessions need not be on, nor the agent listen.
func (s *Files) Grant(ctx context.Context, a Actor, kind, id, clientKey string, via ...Via) (*DirectGrant, error) {
	if err := s.directOn(viaOf(via)); err != nil {
		return nil, err
	}
	key, err := grantKey(clientKey)
	if err != nil {
		return nil, err
	}
	g := agentapi.DirectGrant{ID: NewID(DirectGrantPrefix), Kind: agentapi.SessionFiles, Actor: a.ID, ClientKey: key}
	var (
		end   func(reason string) // records the session's end
		route *VolumeRoute
	)
	switch kind {
	case "instances":
		st, err := s.sessions.Start(ctx, a, id, agentapi.SessionFiles, "instances cp "+viaOf(via).flag())
		if err != nil {
			return nil, err
		}
		g.HostID, g.SessionID, g.TenantID = st.HostID, st.Session.ID, st.Session.TenantID
		g.Target = agentapi.FilesTarget{InstanceID: st.Session.InstanceID}
		end = func(reason string) { endGrantSession(s.sessions, g.SessionID, reason) }
	case "volumes":
		var err error
		if route, err = s.VolumeRoute(ctx, a, id); err != nil {
			return nil, err
		}
		v := route.Volume
		g.HostID, g.TenantID = route.HostID, v.TenantID
		g.Target = agentapi.FilesTarget{VolumeID: v.ID, Shared: v.Kind == cloud.VolumeShared, SizeGiB: v.SizeGiB}
		summary := "volumes cp " + viaOf(via).flag() + " " + v.ID
		if route.InstanceID != "" {
			st, err := s.sessions.Start(ctx, a, route.InstanceID, agentapi.SessionFiles, summary)
			if err != nil {
				return nil, err
			}
			g.SessionID = st.Session.ID
			end = func(reason string) { endGrantSession(s.sessions, g.SessionID, reason) }
		} else {
			g.SessionID = NewID(SessionPrefix)
			if err := s.AuditVolumeSession(ctx, a, route, g.SessionID, false, summary, 0); err != nil {
				return nil, err
			}
			end = func(reason string) {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = s.AuditVolumeSession(ctx, a, route, g.SessionID, true, reason, 0)
			}
		}
	default:
		return nil, cloud.Errorf(cloud.Invalid, "files grants are for instances or volumes, not %q", kind)
	}
	return s.signDirect(ctx, g, viaOf(via), end)
}

// ForwardGrant issues actor a grant for direct port forwards to port
// inside running instance id, bound to clientKey: as Grant, by the rules
// of a relayed port forward, recorded as its session.
func (s *Sessions) ForwardGrant(ctx context.Context, a Actor, id string, port int, clientKey string, via ...Via) (*DirectGrant, error) {
	if err := s.directOn(viaOf(via)); err != nil {
		return nil, err
	}
	if port < 1 || port > 65535 {
		return nil, &cloud.Error{Code: cloud.Invalid, Message: "port: want a TCP port from 1 to 65535", Details: map[string]any{"field": "port"}}
	}
	key, err := grantKey(clientKey)
	if err != nil {
		return nil, err
	}
	st, err := s.Start(ctx, a, id, agentapi.SessionForward, fmt.Sprintf("port %d %s", port, viaOf(via).flag()))
	if err != nil {
		return nil, err
	}
	g := agentapi.DirectGrant{ID: NewID(DirectGrantPrefix), Kind: agentapi.SessionForward, Actor: a.ID, HostID: st.HostID,
		SessionID: st.Session.ID, TenantID: st.Session.TenantID, Target: agentapi.FilesTarget{InstanceID: st.Session.InstanceID}, Port: port,
		ClientKey: key}
	return s.signDirect(ctx, g, viaOf(via), func(reason string) { endGrantSession(s, g.SessionID, reason) })
}

// grantKey checks the key a grant is to be bound to: the fingerprint of
// the client's certificate.
func grantKey(s string) (string, error) {
	key, err := pki.ParseFingerprint(s)
	if err != nil {
		return "", &cloud.Error{Code: cloud.Invalid,
			Message: "key: want the fingerprint (sha256: and 64 hex digits) of the TLS certificate the client presents to the agent, which the grant is bound to",
			Details: map[string]any{"field": "key"}}
	}
	return key, nil
}

// directOn refuses a grant while direct sessions are off (a tunnel's,
// where the server signs no grants: a plain-HTTP server).
func (b *base) directOn(via Via) error {
	if via == ViaTunnel {
		if b.opts.SignDirectGrant == nil {
			return cloud.Errorf(cloud.PermissionDenied, "this server signs no grants (it runs without TLS): go through the relay")
		}
		return nil
	}
	if !b.opts.DirectAccess || b.opts.SignDirectGrant == nil {
		return cloud.Errorf(cloud.PermissionDenied, "this cloud's operator has not turned direct sessions on (gpucloud server --direct-access, or up --direct-access): go through the server, without --direct")
	}
	return nil
}

// signDirect signs g (sign) and ends its session's record with end: at
// once, since what happens on the connection is the agent's to log.
func (b *base) signDirect(ctx context.Context, g agentapi.DirectGrant, via Via, end func(reason string)) (*DirectGrant, error) {
	out, err := b.sign(ctx, g, via)
	if err != nil {
		end("no grant: " + err.Error())
		return nil, err
	}
	how := "direct session"
	if via == ViaTunnel {
		how = "tunnelled session"
	}
	end(how + " granted on host " + g.HostID + " until " + out.ExpiresAt.Format(time.RFC3339))
	return out, nil
}

// sign finds g's host's listener and signs g. Its expiry is on the wall
// clock, which the agent checks it with (not the services' clock, which
// tests scale). A tunnel's grant needs the host's certificate only, and
// carries no address.
func (b *base) sign(ctx context.Context, g agentapi.DirectGrant, via Via) (*DirectGrant, error) {
	var h *cloud.Host
	if err := b.tx(ctx, func(tx cloud.Tx) (err error) { h, err = getHost(ctx, tx, g.HostID); return err }); err != nil {
		return nil, err
	}
	addr := h.Spec.DirectAddr
	if via == ViaTunnel {
		addr = ""
		if h.Spec.DirectFingerprint == "" {
			return nil, &cloud.Error{Code: cloud.Conflict,
				Message: fmt.Sprintf("host %s's agent takes no tunnelled sessions (it predates them, or its cloud has no TLS): go through the relay", g.HostID),
				Details: map[string]any{"host_id": g.HostID}}
		}
	} else if h.Spec.DirectAddr == "" || h.Spec.DirectFingerprint == "" {
		return nil, &cloud.Error{Code: cloud.Conflict,
			Message: fmt.Sprintf("host %s takes no direct sessions (its agent runs without --direct-listen): go through the server, without --direct", g.HostID),
			Details: map[string]any{"host_id": g.HostID}}
	}
	exp := time.Now().Add(DirectGrantTTL).Truncate(time.Second)
	g.Expires = exp.Unix()
	payload, err := json.Marshal(g)
	if err != nil {
		return nil, err
	}
	tok, err := b.opts.SignDirectGrant(payload)
	if err != nil {
		return nil, fmt.Errorf("signing a files grant: %w", err)
	}
	return &DirectGrant{HostID: g.HostID, Address: addr, Fingerprint: h.Spec.DirectFingerprint,
		Grant: tok, SessionID: g.SessionID, ExpiresAt: exp}, nil
}

// endGrantSession ends a grant's session record; the request's context
// may be gone by then.
func endGrantSession(s *Sessions, id, reason string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.End(ctx, id, nil, reason)
}

// TunnelRoute checks a tunnel's request (GET /v1/tunnels, docs/ACCESS.md,
// "Tunnels"): token is a grant this server signed, not expired, and of
// actor's tenant. It answers the grant, whose host the tunnel goes to.
// The agent checks the grant again, and that the client holds its key:
// the server only routes. A malformed or forged grant is
// invalid_argument; another tenant's, not_found, as its session would be;
// an expired one, conflict.
func (s *Sessions) TunnelRoute(ctx context.Context, a Actor, token string) (*agentapi.DirectGrant, error) {
	if s.opts.VerifyDirectGrant == nil || s.opts.SignDirectGrant == nil {
		return nil, cloud.Errorf(cloud.PermissionDenied, "this server signs no grants (it runs without TLS): go through the relay")
	}
	if token == "" {
		return nil, &cloud.Error{Code: cloud.Invalid, Message: "grant: send the grant (POST .../grant?via=tunnel) in the Gpucloud-Grant header",
			Details: map[string]any{"field": "grant"}}
	}
	payload, err := s.opts.VerifyDirectGrant(token)
	if err != nil {
		return nil, &cloud.Error{Code: cloud.Invalid, Message: "grant: not one this cloud signed: " + err.Error(), Details: map[string]any{"field": "grant"}}
	}
	var g agentapi.DirectGrant
	if err := json.Unmarshal(payload, &g); err != nil || g.HostID == "" || g.TenantID == "" {
		return nil, &cloud.Error{Code: cloud.Invalid, Message: "grant: its payload names no host or tenant", Details: map[string]any{"field": "grant"}}
	}
	if g.TenantID != a.TenantID && !a.Admin() {
		return nil, cloud.Errorf(cloud.NotFound, "session %s not found", g.SessionID)
	}
	if exp := time.Unix(g.Expires, 0); !time.Now().Before(exp) {
		return nil, cloud.Errorf(cloud.Conflict, "the grant expired at %s: ask for another", exp.UTC().Format(time.RFC3339))
	}
	return &g, nil
}
