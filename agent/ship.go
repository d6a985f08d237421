package agent

import (
	"context"
	"errors"
	"fmt"

	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/cloud"
)

// MaxLogChunk is the most output one AppendLogs call carries, the server's
// limit.
const MaxLogChunk = 1 << 20

// maxChunksPerPass bounds how many log chunks one instance ships per pass,
// so that a chatty workload does not hold up the others.
const maxChunksPerPass = 16

// shipLogs uploads the output the workload wrote since the last upload. The
// offset moves only when an upload succeeds, so a failed upload is retried
// on the next pass with the same bytes. Once a finished workload's output
// is all shipped the instance is marked drained.
func (a *Agent) shipLogs(ctx context.Context, s *inst) error {
	if !s.started || s.drained {
		return nil
	}
	for range maxChunksPerPass {
		off := a.logOff[s.id]
		data, next, err := a.cfg.Runtime.Logs(s.id, off)
		if errors.Is(err, runtime.ErrNotFound) {
			s.drained = true
			return nil
		}
		if err != nil {
			return fmt.Errorf("read output: %w", err)
		}
		if len(data) == 0 {
			// next may be below off when the file was truncated; the
			// runtime then answers with its end, from which we resume.
			a.logOff[s.id] = next
			s.drained = s.state == stateDone
			return nil
		}
		if len(data) > MaxLogChunk {
			data, next = data[:MaxLogChunk], off+MaxLogChunk
		}
		if err := a.srv.AppendLogs(ctx, s.id, data); err != nil {
			if !permanent(err) {
				return fmt.Errorf("upload output at offset %d: %w", off, err)
			}
			a.log.Warn("agent: output refused by the server, dropped", "instance", s.id, "offset", off, "bytes", len(data), "err", err)
		}
		a.logOff[s.id] = next
	}
	return nil
}

// sendReports sends the instance's queued reports in order. A report stays
// queued until the server takes it, so each is sent once and a failed one
// is retried on the next pass; one the server refuses for good (the
// instance is unknown, the transition invalid) is dropped. A terminal
// report the server took marks the instance final.
func (a *Agent) sendReports(ctx context.Context, s *inst) error {
	for len(s.reports) > 0 {
		r := s.reports[0]
		// A list asked for before this report ended may not show it,
		// whether the server takes it or its answer is lost: counting
		// the report before and after it is sent makes every list asked
		// for meanwhile stale (watch.go).
		a.reports.Add(1)
		err := a.srv.ReportStatus(ctx, s.id, r)
		a.reports.Add(1)
		if err != nil {
			if !permanent(err) {
				return fmt.Errorf("report %s: %w", r.Phase, err)
			}
			a.log.Warn("agent: report refused by the server, dropped", "instance", s.id, "phase", r.Phase, "err", err)
		} else if terminal(r.Phase) {
			s.final = true
		}
		s.reports = s.reports[1:]
	}
	return nil
}

func terminal(phase string) bool {
	switch phase {
	case agentapi.PhaseExited, agentapi.PhaseStopped, agentapi.PhaseFailed:
		return true
	}
	return false
}

// permanent reports whether a server error will not go away by retrying
// the same request.
func permanent(err error) bool {
	switch cloud.ErrorCode(err) {
	case cloud.Invalid, cloud.NotFound, cloud.Conflict, cloud.PermissionDenied:
		return true
	}
	return false
}
