package service

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/cloud"
)

// Direct copies (docs/DATA.md, "Direct copies"): where the operator turns
// them on (Options.FilesDirect) and a host's agent listens for them
// (fleet.Host.FilesAddr), a tenant's copy can go straight to the agent
// with a grant the server signs, instead of through the server's relay.
// The grant is decided by the same rules as a relayed copy (who may
// copy, which host serves the files, the session limit) and recorded as
// one: a session of the instance, or a detached volume's events.

// FilesGrantTTL is how long a grant may open connections. A connection
// opened in time runs until its copy ends.
const FilesGrantTTL = 2 * time.Minute

// FilesGrant is a grant and where to use it.
type FilesGrant struct {
	HostID string
	// Address is the agent's listener (host:port) and Fingerprint its
	// certificate's, which the client pins.
	Address     string
	Fingerprint string
	// Grant is the signed token (agentapi.FilesGrant) the client sends.
	Grant     string
	SessionID string
	ExpiresAt time.Time
}

// Grant issues actor a grant for a direct files session on instance or
// volume id (kind "instances" or "volumes"). Direct copies off, or a host
// whose agent does not listen for them, answer permission_denied and
// conflict saying so (the client then copies through the relay); the rest
// is as a relayed session's start: another tenant's resource is
// not_found, a stopped instance conflict, the session limit
// quota_exceeded.
func (s *Files) Grant(ctx context.Context, a Actor, kind, id string) (*FilesGrant, error) {
	if !s.opts.FilesDirect || s.opts.SignFilesGrant == nil {
		return nil, cloud.Errorf(cloud.PermissionDenied, "this cloud's operator has not turned direct copies on (gpucloud server --files-direct): copy through the server, without --direct")
	}
	g := agentapi.FilesGrant{ID: NewID(FilesGrantPrefix), Actor: a.ID}
	var (
		end   func(reason string) // records the session's end
		route *VolumeRoute
	)
	switch kind {
	case "instances":
		st, err := s.sessions.Start(ctx, a, id, agentapi.SessionFiles, "instances cp --direct")
		if err != nil {
			return nil, err
		}
		g.HostID, g.SessionID, g.TenantID = st.HostID, st.Session.ID, st.Session.TenantID
		g.Target = agentapi.FilesTarget{InstanceID: st.Session.InstanceID}
		end = func(reason string) { s.endGrantSession(g.SessionID, reason) }
	case "volumes":
		var err error
		if route, err = s.VolumeRoute(ctx, a, id); err != nil {
			return nil, err
		}
		v := route.Volume
		g.HostID, g.TenantID = route.HostID, v.TenantID
		g.Target = agentapi.FilesTarget{VolumeID: v.ID, Shared: v.Kind == cloud.VolumeShared, SizeGiB: v.SizeGiB}
		summary := "volumes cp --direct " + v.ID
		if route.InstanceID != "" {
			st, err := s.sessions.Start(ctx, a, route.InstanceID, agentapi.SessionFiles, summary)
			if err != nil {
				return nil, err
			}
			g.SessionID = st.Session.ID
			end = func(reason string) { s.endGrantSession(g.SessionID, reason) }
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
	out, err := s.sign(ctx, g)
	if err != nil {
		end("no grant: " + err.Error())
		return nil, err
	}
	// The session's record ends here: what happens on the connection is
	// the agent's to log.
	end("direct copy granted on host " + g.HostID + " until " + out.ExpiresAt.Format(time.RFC3339))
	return out, nil
}

// sign finds g's host's listener and signs g. Its expiry is on the wall
// clock, which the agent checks it with (not the services' clock, which
// tests scale).
func (s *Files) sign(ctx context.Context, g agentapi.FilesGrant) (*FilesGrant, error) {
	var h *cloud.Host
	if err := s.tx(ctx, func(tx cloud.Tx) (err error) { h, err = getHost(ctx, tx, g.HostID); return err }); err != nil {
		return nil, err
	}
	if h.Spec.FilesAddr == "" || h.Spec.FilesFingerprint == "" {
		return nil, &cloud.Error{Code: cloud.Conflict,
			Message: fmt.Sprintf("host %s, which holds these files, takes no direct copies (its agent runs without --files-listen): copy through the server, without --direct", g.HostID),
			Details: map[string]any{"host_id": g.HostID}}
	}
	exp := time.Now().Add(FilesGrantTTL).Truncate(time.Second)
	g.Expires = exp.Unix()
	payload, err := json.Marshal(g)
	if err != nil {
		return nil, err
	}
	tok, err := s.opts.SignFilesGrant(payload)
	if err != nil {
		return nil, fmt.Errorf("signing a files grant: %w", err)
	}
	return &FilesGrant{HostID: g.HostID, Address: h.Spec.FilesAddr, Fingerprint: h.Spec.FilesFingerprint,
		Grant: tok, SessionID: g.SessionID, ExpiresAt: exp}, nil
}

// endGrantSession ends a grant's session record; the request's context
// may be gone by then.
func (s *Files) endGrantSession(id, reason string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.sessions.End(ctx, id, nil, reason)
}
