package httpapi

import (
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"unicode/utf8"

	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
)

// The agent protocol, part two: what a host must run, what became of it,
// and its output (service.Agents has the rules).

// agentAssignments handles GET /v1/agent/assignments: every instance
// holding an allocation on the caller's host.
func (s *handlers) agentAssignments(w http.ResponseWriter, r *http.Request, p principal) error {
	as, err := s.svc.Agents.Assignments(r.Context(), p.actor())
	if err != nil {
		return err
	}
	if as == nil {
		as = []agentapi.Assignment{}
	}
	writeJSON(w, http.StatusOK, agentapi.AssignmentList{Assignments: as})
	return nil
}

// agentStatus handles POST /v1/agent/instances/{id}/status: the report's
// moves, in one transaction (service.Agents.Report). A report that does
// not apply any more, or repeats the final report that released the
// instance from the caller's host, answers 204 and changes nothing; a
// report for an instance that is not on the caller's host is not_found.
func (s *handlers) agentStatus(w http.ResponseWriter, r *http.Request, p principal) error {
	var rep agentapi.StatusReport
	if err := decodeBody(w, r, &rep); err != nil {
		return err
	}
	if err := s.svc.Agents.Report(r.Context(), p.actor(), r.PathValue("id"), rep); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// agentLogs handles POST /v1/agent/instances/{id}/logs: a chunk of the
// instance's output, as text/plain in UTF-8 (or application/octet-stream),
// uncompressed, at most service.MaxLogChunk bytes (1 MiB), for
// service.Agents.AppendLog.
func (s *handlers) agentLogs(w http.ResponseWriter, r *http.Request, p principal) error {
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "text/plain" && mt != "application/octet-stream" {
		return &statusError{status: http.StatusUnsupportedMediaType, err: &cloud.Error{
			Code:    cloud.Invalid,
			Message: "log chunks are sent with Content-Type: text/plain",
			Details: map[string]any{"content_type": r.Header.Get("Content-Type")}}}
	}
	// The chunk is stored as the workload wrote it, valid UTF-8 or not;
	// text in a charset the server would have to convert is refused.
	if err := checkBody(w, r, params); err != nil {
		return err
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, service.MaxLogChunk))
	if err != nil {
		if tooLarge(err) {
			return bodyError(err)
		}
		return fmt.Errorf("read log chunk: %w", err)
	}
	if err := s.svc.Agents.AppendLog(r.Context(), p.actor(), r.PathValue("id"), data); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// instanceLogs handles GET /v1/instances/{id}/logs?offset=N: at most
// 1 MiB of the instance's output from offset N on (0 when absent), and the
// offset to ask for next. A page never ends inside a UTF-8 character: the
// character's first bytes wait for the next page.
func (s *handlers) instanceLogs(w http.ResponseWriter, r *http.Request, p principal) error {
	var offset int64
	if q := r.URL.Query().Get("offset"); q != "" {
		n, err := strconv.ParseInt(q, 10, 64)
		if err != nil || n < 0 {
			return service.Field("offset", "must be a byte offset (a non-negative integer), got %s", service.Quote(q))
		}
		offset = n
	}
	c, err := s.svc.Agents.Logs(r.Context(), p.actor(), r.PathValue("id"), offset)
	if err != nil {
		return err
	}
	data := cutPartialRune(c.Data)
	writeJSON(w, http.StatusOK, api.LogPage{Data: string(data), Offset: c.Start + int64(len(data)), Start: c.Start})
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
