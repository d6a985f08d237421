package httpapi

import (
	"context"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
)

// The agent protocol, part two: what a host must run, what became of it,
// and its output (service.Agents has the rules).

// assignmentReread is how often a waiting assignment watch reads the
// host's list again although this replica noted no change, while other
// replicas write the store: their writes (the leader's placements, when
// the agent's watch is on another replica) are not noted here unless
// PostgreSQL carries them (service.AssignmentChanges.Peered). A replica
// that is alone (Options.Alone), or hears the others, reads again only
// when the wait ends
// (agentapi.MaxAssignmentWait), for the rarer changes a list shows that
// no key covers (a volume's size): at thousands of agents the re-read
// every 5 s was a fifth of a transaction per agent a second (issue 26).
// A variable for tests.
var assignmentReread = 5 * time.Second

// agentAssignments handles GET /v1/agent/assignments: every instance
// holding an allocation on the caller's host (service.Agents.
// AssignmentView), with the list's version. With ?version= (a version an
// earlier answer carried) and ?wait= (a duration, at most
// agentapi.MaxAssignmentWait) it answers as soon as the list's version
// differs, or when the wait is over with the list as it is: a long poll
// that wakes when this replica notes a change of the host's instances
// (service.AssignmentChanges), and re-reads every assignmentReread for
// the others'. The host is the credential's: no parameter names one, and
// any other parameter is refused.
func (s *handlers) agentAssignments(w http.ResponseWriter, r *http.Request, p principal) error {
	q := r.URL.Query()
	for k := range q {
		if k != "version" && k != "wait" {
			return &cloud.Error{Code: cloud.Invalid, Message: "unknown parameter " + strconv.Quote(k) + ": want version and wait",
				Details: map[string]any{"field": k}}
		}
	}
	since := q.Get("version")
	if len(q["version"]) > 1 || len(since) > agentapi.MaxVersion || strings.Trim(since, "0123456789abcdef") != "" {
		return &cloud.Error{Code: cloud.Invalid, Message: "version: want a version an earlier answer carried",
			Details: map[string]any{"field": "version"}}
	}
	var wait time.Duration
	if v := q.Get("wait"); v != "" || len(q["wait"]) > 0 {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 || d > agentapi.MaxAssignmentWait || len(q["wait"]) > 1 {
			return &cloud.Error{Code: cloud.Invalid, Message: "wait: want a duration from 0s to " + agentapi.MaxAssignmentWait.String() + ", such as 25s",
				Details: map[string]any{"field": "wait"}}
		}
		wait = d
	}
	ctx := r.Context()
	deadline := time.Now().Add(wait)
	changes := s.svc.AssignmentChanges
	for {
		// Alone, or told of the other replicas' changes (PostgreSQL's
		// LISTEN/NOTIFY, service.AssignmentChanges.SetPeered), a waiter
		// needs no timer; asked again each round, since the carrier may
		// come and go (which wakes every waiter).
		reread, alone := assignmentReread, (s.alone != nil && s.alone()) || changes.Peered()
		if alone {
			reread = agentapi.MaxAssignmentWait
		}
		seq := changes.Seq()
		list, keys, err := s.svc.Agents.AssignmentView(ctx, p.actor())
		if err != nil {
			return err
		}
		left := time.Until(deadline)
		if since == "" || list.Version != since || left <= 0 {
			writeJSON(w, http.StatusOK, list)
			return nil
		}
		wctx, cancel := context.WithTimeout(ctx, min(left, reread))
		changed := changes.Wait(wctx, seq, keys)
		cancel()
		if err := ctx.Err(); err != nil {
			return err
		}
		if alone && !changed {
			// The wait is over and no write of this replica, the only
			// one, or of the others it hears from touched the list: it
			// is the one just read. The agent's next call reads it
			// afresh.
			writeJSON(w, http.StatusOK, list)
			return nil
		}
	}
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
