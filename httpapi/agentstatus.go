package httpapi

import (
	"context"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/gpucloud/gpucloud/cloud"
)

// The agent protocol, part two: what a host must run, what became of it,
// and its output.

// Log limits: one POST carries at most maxLogChunk bytes, the store keeps
// the newest maxLogKeep bytes of each instance, and one GET answers at most
// maxLogPage bytes.
const (
	maxLogChunk = 1 << 20
	maxLogKeep  = 8 << 20
	maxLogPage  = 1 << 20
	// maxReportMessage bounds the message of a status report, which
	// becomes the instance's Reason.
	maxReportMessage = 1024
)

// agentAssignments handles GET /v1/agent/assignments: every instance
// holding an allocation on the caller's host.
func (s *api) agentAssignments(w http.ResponseWriter, r *http.Request, p principal) error {
	out := AssignmentList{Assignments: []Assignment{}}
	err := s.tx(r.Context(), func(tx cloud.Tx) error {
		ins, err := tx.ListInstances(r.Context(), cloud.InstanceFilter{HostID: p.HostID, States: cloud.HoldingStates()})
		if err != nil {
			return err
		}
		out.Assignments = out.Assignments[:0]
		for _, in := range ins {
			desired := DesiredRun
			if in.State == cloud.Stopping || in.State == cloud.Terminating {
				desired = DesiredStop
			}
			out.Assignments = append(out.Assignments, Assignment{InstanceID: in.ID, TenantID: in.TenantID,
				Offering: in.Offering, Desired: desired, Placement: in.Placement, Command: in.Command,
				Env: in.Env, Volumes: in.Volumes, Tags: in.Tags, GraceSeconds: s.grace,
				Interruption: in.Interruption, Market: in.Market, SpotRequestID: in.SpotRequestID})
		}
		return nil
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// checkReport validates a status report and cleans its message.
func checkReport(rep *StatusReport) error {
	switch rep.Phase {
	case PhaseStarting, PhaseRunning, PhaseStopped, PhaseFailed:
	case PhaseExited:
		if rep.ExitCode == nil {
			return field("exit_code", "is required when phase is %s", PhaseExited)
		}
	case "":
		return field("phase", "is required")
	default:
		return field("phase", "unknown phase %s (want %s, %s, %s, %s or %s)", quote(rep.Phase),
			PhaseStarting, PhaseRunning, PhaseExited, PhaseStopped, PhaseFailed)
	}
	rep.Message = cleanMessage(rep.Message)
	return nil
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
func reportPath(from cloud.State, rep StatusReport) ([]cloud.State, string) {
	var path []cloud.State
	var reason string
	switch rep.Phase {
	case PhaseStarting:
		reason = "the agent is starting the workload"
		if from == cloud.Scheduled {
			path = []cloud.State{cloud.Starting}
		}
	case PhaseRunning:
		reason = "the workload is running"
		switch from {
		case cloud.Scheduled:
			path = []cloud.State{cloud.Starting, cloud.Running}
		case cloud.Starting:
			path = []cloud.State{cloud.Running}
		}
	case PhaseStopped:
		reason = "the agent stopped the workload"
		switch from {
		case cloud.Stopping:
			path = []cloud.State{cloud.Stopped}
		case cloud.Terminating:
			path = []cloud.State{cloud.Terminated}
		}
	case PhaseExited, PhaseFailed:
		target := cloud.Failed
		reason = "the agent could not start the workload"
		if rep.Phase == PhaseExited {
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
		if rep.Phase == PhaseFailed {
			reason = rep.Message
		} else {
			reason += ": " + rep.Message
		}
	}
	return path, reason
}

// finalStates are the states a final report (exited, stopped, failed) may
// have led to, for telling a repeated report from a stray one.
func finalStates(rep StatusReport) []cloud.State {
	switch {
	case rep.Phase == PhaseStopped || rep.Phase == PhaseExited && *rep.ExitCode == 0:
		return []cloud.State{cloud.Stopped, cloud.Terminated}
	case rep.Phase == PhaseExited || rep.Phase == PhaseFailed:
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

// agentStatus handles POST /v1/agent/instances/{id}/status. The moves of
// one report are one transaction, each with its event. A final state
// releases the allocation in the same transaction: the instance's host and
// placement are cleared and the host's version is bumped, so that the
// scheduler rebuilds its fleet and the GPUs are free again.
//
// A report that does not apply any more answers 204 and changes nothing:
// a repeated one, a late starting for a running instance, a running for an
// instance asked to stop. A report for an instance that is not on the
// caller's host is not_found, except a repeat of the final report that
// released it from this host, which answers 204, so that an agent may
// retry a report whose answer it did not get.
func (s *api) agentStatus(w http.ResponseWriter, r *http.Request, p principal) error {
	var rep StatusReport
	if err := decodeBody(w, r, &rep); err != nil {
		return err
	}
	if err := checkReport(&rep); err != nil {
		return err
	}
	id, host := r.PathValue("id"), p.HostID
	err := s.tx(r.Context(), func(tx cloud.Tx) error {
		ctx := r.Context()
		in, err := tx.GetInstance(ctx, id)
		if cloud.IsNotFound(err) {
			return notFound("instance", id)
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
			return notFound("instance", id)
		}
		path, reason := reportPath(in.State, rep)
		if len(path) == 0 {
			return nil
		}
		now := s.now()
		for _, to := range path {
			from := in.State
			if !cloud.CanMove(from, to) {
				return fmt.Errorf("status report %s: illegal move %s -> %s", rep.Phase, from, to)
			}
			in.State, in.Reason, in.UpdatedAt = to, reason, now
			if !to.Holds() {
				in.HostID, in.Placement = "", nil
			}
			if err := tx.UpdateInstance(ctx, in); err != nil {
				return err
			}
			if err := tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: EventInstanceState, TenantID: in.TenantID,
				InstanceID: in.ID, HostID: host, From: from, To: to, Reason: reason, Actor: agentActor(host)}); err != nil {
				return err
			}
		}
		if in.State.Holds() {
			return nil
		}
		if in.State == cloud.Terminated {
			if err := cloud.DetachVolumes(ctx, tx, in); err != nil {
				return err
			}
		}
		h, err := tx.GetHost(ctx, host)
		if err != nil {
			return err
		}
		return tx.PutHost(ctx, h) // bumps the version: the scheduler frees the GPUs
	})
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// agentLogs handles POST /v1/agent/instances/{id}/logs: a chunk of the
// instance's output, as text/plain (or application/octet-stream), at most
// 1 MiB. The instance must be on the caller's host, or have been on it
// last: output read after the final status report is still accepted.
func (s *api) agentLogs(w http.ResponseWriter, r *http.Request, p principal) error {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "text/plain" && mt != "application/octet-stream" {
		return &statusError{status: http.StatusUnsupportedMediaType, err: &cloud.Error{
			Code:    cloud.Invalid,
			Message: "log chunks are sent with Content-Type: text/plain",
			Details: map[string]any{"content_type": r.Header.Get("Content-Type")}}}
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxLogChunk))
	if err != nil {
		if tooLarge(err) {
			return bodyError(err)
		}
		return fmt.Errorf("read log chunk: %w", err)
	}
	id := r.PathValue("id")
	err = s.tx(r.Context(), func(tx cloud.Tx) error {
		ctx := r.Context()
		in, err := tx.GetInstance(ctx, id)
		if cloud.IsNotFound(err) {
			return notFound("instance", id)
		}
		if err != nil {
			return err
		}
		if in.HostID != p.HostID {
			last := ""
			if in.HostID == "" {
				if last, err = lastHost(ctx, tx, in.ID); err != nil {
					return err
				}
			}
			if last != p.HostID {
				return notFound("instance", id)
			}
		}
		_, err = tx.AppendLog(ctx, in.ID, data, maxLogKeep)
		return err
	})
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// instanceLogs handles GET /v1/instances/{id}/logs?offset=N: at most
// 1 MiB of the instance's output from offset N on (0 when absent), and the
// offset to ask for next. A page never ends inside a UTF-8 character: the
// character's first bytes wait for the next page.
func (s *api) instanceLogs(w http.ResponseWriter, r *http.Request, p principal) error {
	var offset int64
	if q := r.URL.Query().Get("offset"); q != "" {
		n, err := strconv.ParseInt(q, 10, 64)
		if err != nil || n < 0 {
			return field("offset", "must be a byte offset (a non-negative integer), got %s", quote(q))
		}
		offset = n
	}
	var c *cloud.LogChunk
	err := s.tx(r.Context(), func(tx cloud.Tx) error {
		in, err := getVisibleInstance(r.Context(), tx, p, r.PathValue("id"))
		if err != nil {
			return err
		}
		c, err = tx.ReadLog(r.Context(), in.ID, offset, maxLogPage)
		if cloud.ErrorCode(err) == cloud.Invalid {
			return field("offset", "%d is past the end of the log; ask for the offset the previous page gave", offset)
		}
		return err
	})
	if err != nil {
		return err
	}
	data := cutPartialRune(c.Data)
	writeJSON(w, http.StatusOK, LogPage{Data: string(data), Offset: c.Start + int64(len(data)), Start: c.Start})
	return nil
}

// cutPartialRune drops the first bytes of a UTF-8 character that b ends
// in the middle of.
func cutPartialRune(b []byte) []byte {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return b[:i]
			}
			return b
		}
	}
	return b
}
