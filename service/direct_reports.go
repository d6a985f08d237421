package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/internal/progress"
)

// reportSkew is how far a report's times may lie outside its grant's
// life: the agents' clocks and the server's differ a little.
const reportSkew = 5 * time.Minute

// DirectReports records what host a.HostID's agent reports of the direct
// grants it served (agentapi.DirectReportsRequest): each report, once, as
// a session.direct event of the grant's session (on its instance; for a
// detached volume, of the tenant, naming the volume). The report carries
// the grant the CA signed, checked again here: a grant for another host,
// or one the CA did not sign, is refused, as is a report whose figures
// cannot be (negative, ending before they start, outside the grant's
// life). Each report gets its answer; only a request that is not an
// agent's, or carries too many reports, fails whole.
func (s *Sessions) DirectReports(ctx context.Context, a Actor, req agentapi.DirectReportsRequest) (*agentapi.DirectReportsResponse, error) {
	if err := agentOnly(a); err != nil {
		return nil, err
	}
	if n := len(req.Reports); n > agentapi.MaxDirectReports {
		return nil, &cloud.Error{Code: cloud.Invalid,
			Message: fmt.Sprintf("reports: %d, at most %d per request", n, agentapi.MaxDirectReports),
			Details: map[string]any{"field": "reports"}}
	}
	out := &agentapi.DirectReportsResponse{Results: make([]agentapi.DirectReportResult, len(req.Reports))}
	for i, r := range req.Reports {
		res := agentapi.DirectReportResult{Status: agentapi.ReportRecorded}
		g, err := s.checkReport(a.HostID, r)
		if err == nil {
			err = s.tx(ctx, func(tx cloud.Tx) error { return s.recordReport(ctx, tx, a.HostID, g, r) })
		}
		var ce *cloud.Error
		switch {
		case err == nil:
		case errors.As(err, &ce) && ce.Code == cloud.Conflict:
			res.Status = agentapi.ReportDuplicate
		case errors.As(err, &ce) && (ce.Code == cloud.Invalid || ce.Code == cloud.PermissionDenied || ce.Code == cloud.NotFound):
			res = agentapi.DirectReportResult{Status: agentapi.ReportRefused, Error: ce.Message}
		default:
			// The store failed: the agent sends the request again.
			return nil, err
		}
		out.Results[i] = res
	}
	return out, nil
}

// checkReport checks r's grant (the CA's signature, host hostID's) and
// its figures, and answers the grant.
func (s *Sessions) checkReport(hostID string, r agentapi.DirectReport) (*agentapi.DirectGrant, error) {
	if s.opts.VerifyDirectGrant == nil {
		return nil, cloud.Errorf(cloud.PermissionDenied, "this server signs no grants (it serves plain HTTP) and takes no reports of them")
	}
	payload, err := s.opts.VerifyDirectGrant(r.Grant)
	if err != nil {
		return nil, cloud.Errorf(cloud.PermissionDenied, "the report's grant: %v", err)
	}
	var g agentapi.DirectGrant
	if err := json.Unmarshal(payload, &g); err != nil || g.ID == "" || g.SessionID == "" || g.TenantID == "" {
		return nil, cloud.Errorf(cloud.Invalid, "the report's grant names no grant, session or tenant")
	}
	if g.HostID != hostID {
		return nil, cloud.Errorf(cloud.PermissionDenied, "grant %s is for host %s; this agent is host %s's", g.ID, g.HostID, hostID)
	}
	exp := time.Unix(g.Expires, 0)
	switch {
	case r.Connections < 1:
		return nil, cloud.Errorf(cloud.Invalid, "grant %s: a report is of at least one connection, not %d", g.ID, r.Connections)
	case r.BytesIn < 0 || r.BytesOut < 0:
		return nil, cloud.Errorf(cloud.Invalid, "grant %s: bytes in and out are not negative", g.ID)
	case r.First.IsZero() || r.Last.Before(r.First):
		return nil, cloud.Errorf(cloud.Invalid, "grant %s: the report's last connection ends before its first begins", g.ID)
	case r.First.After(exp.Add(reportSkew)) || r.First.Before(exp.Add(-DirectGrantTTL-reportSkew)):
		return nil, cloud.Errorf(cloud.Invalid, "grant %s: its first connection, at %s, is outside the grant's life (until %s)",
			g.ID, r.First.UTC().Format(time.RFC3339), exp.UTC().Format(time.RFC3339))
	}
	return &g, nil
}

// recordReport records r of grant g once (Conflict when it was already).
func (s *Sessions) recordReport(ctx context.Context, tx cloud.Tx, hostID string, g *agentapi.DirectGrant, r agentapi.DirectReport) error {
	if err := tx.RecordDirectReport(ctx, g.ID, hostID, r.First, s.now()); err != nil {
		return err
	}
	took := r.Last.Sub(r.First)
	details := map[string]any{"session_id": g.SessionID, "grant_id": g.ID, "kind": g.Kind, "connections": r.Connections,
		"bytes_in": r.BytesIn, "bytes_out": r.BytesOut, "first": r.First.UTC(), "last": r.Last.UTC(), "duration_ms": took.Milliseconds()}
	if g.Port != 0 {
		details["port"] = g.Port
	}
	if g.Target.VolumeID != "" {
		details["volume_id"] = g.Target.VolumeID
	}
	if r.Cut {
		details["cut"] = true
	}
	ev := &cloud.Event{Time: s.now(), Kind: cloud.EventSessionDirect, TenantID: g.TenantID, HostID: hostID, Actor: g.Actor}
	what := g.Kind
	// The session record, where there is one, names the instance and
	// what ran; a detached volume's copy has none.
	ses, err := tx.GetSession(ctx, g.SessionID)
	switch {
	case err == nil:
		if ses.TenantID != g.TenantID {
			return cloud.Errorf(cloud.PermissionDenied, "grant %s names session %s, which is another tenant's", g.ID, g.SessionID)
		}
		ev.InstanceID = ses.InstanceID
		what = sessionLine(ses.Kind, ses.Command)
	case cloud.IsNotFound(err) && g.Target.InstanceID == "":
	case cloud.IsNotFound(err):
		return cloud.Errorf(cloud.NotFound, "grant %s names session %s, which this cloud has no record of", g.ID, g.SessionID)
	default:
		return err
	}
	conns := "connections"
	if r.Connections == 1 {
		conns = "connection"
	}
	ev.Reason = fmt.Sprintf("%s: direct on host %s: %d %s, %s in, %s out, over %s", what, hostID, r.Connections, conns,
		progress.Bytes(r.BytesIn), progress.Bytes(r.BytesOut), took.Round(time.Millisecond))
	if r.Cut {
		ev.Reason += ", cut when the agent stopped"
	}
	ev.Details = mustJSON(details)
	return tx.AppendEvent(ctx, ev)
}
