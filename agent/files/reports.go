package files

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/gpucloud/gpucloud/agent"
	"github.com/gpucloud/gpucloud/agentapi"
)

// The reports of direct sessions (agentapi.DirectReport): the direct
// listener hands each grant's report to a Reporter, which sends it to the
// server (POST /v1/agent/direct-sessions) and keeps it, in a file of the
// agent's data directory, until the server has answered it, so that a
// report outlives a server that is away and an agent that restarts.

const (
	// reportsFile keeps the reports not yet answered.
	reportsFile = "direct-reports.json"
	// maxPendingReports bounds what is kept while the server is away:
	// beyond it the oldest reports are dropped, and the log says so.
	maxPendingReports = 1000
	// reportRetryMax is the longest wait between tries.
	reportRetryMax = time.Minute
)

// SendReports sends reports to the server (agentapi.Client.ReportDirect).
type SendReports func(context.Context, []agentapi.DirectReport) (*agentapi.DirectReportsResponse, error)

// Reporter sends direct sessions' reports, keeping them until answered.
type Reporter struct {
	send SendReports
	path string // "" keeps nothing on disk
	log  *slog.Logger

	mu      sync.Mutex
	pending []pendingReport // oldest first
	seq     uint64          // the last report's number
	wake    chan struct{}
}

// pendingReport is a report and its number, in the order added.
type pendingReport struct {
	seq uint64
	rep agentapi.DirectReport
}

// NewReporter returns a reporter that sends with send and keeps what is
// not yet answered in dataDir (nowhere when dataDir is empty), starting
// with what an earlier run kept there.
func NewReporter(send SendReports, dataDir string, log *slog.Logger) *Reporter {
	if log == nil {
		log = slog.Default()
	}
	r := &Reporter{send: send, log: log, wake: make(chan struct{}, 1)}
	if dataDir != "" {
		r.path = filepath.Join(dataDir, reportsFile)
		b, err := os.ReadFile(r.path)
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			log.Warn("direct sessions: the kept reports cannot be read; they are lost", "file", r.path, "err", err)
		default:
			var kept []agentapi.DirectReport
			if err := json.Unmarshal(b, &kept); err != nil {
				log.Warn("direct sessions: the kept reports are not readable; they are lost", "file", r.path, "err", err)
			}
			r.push(kept)
		}
	}
	return r
}

// Add queues reports and keeps them.
func (r *Reporter) Add(reports ...agentapi.DirectReport) {
	if len(reports) == 0 {
		return
	}
	r.mu.Lock()
	r.push(reports)
	r.keepLocked()
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// push appends reports, numbered, dropping the oldest beyond the cap.
func (r *Reporter) push(reports []agentapi.DirectReport) {
	for _, rep := range reports {
		r.seq++
		r.pending = append(r.pending, pendingReport{seq: r.seq, rep: rep})
	}
	if over := len(r.pending) - maxPendingReports; over > 0 {
		r.log.Warn("direct sessions: too many reports wait for the server; the oldest are dropped", "dropped", over)
		r.pending = append([]pendingReport(nil), r.pending[over:]...)
	}
}

// Pending is how many reports wait for the server's answer.
func (r *Reporter) Pending() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pending)
}

// keepLocked writes the pending reports to the file (removes it when
// there are none).
func (r *Reporter) keepLocked() {
	if r.path == "" {
		return
	}
	if len(r.pending) == 0 {
		if err := os.Remove(r.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			r.log.Warn("direct sessions: removing the kept reports", "file", r.path, "err", err)
		}
		return
	}
	kept := make([]agentapi.DirectReport, len(r.pending))
	for i, p := range r.pending {
		kept[i] = p.rep
	}
	b, err := json.Marshal(kept)
	if err == nil {
		err = agent.WriteSecret(r.path, b)
	}
	if err != nil {
		r.log.Warn("direct sessions: keeping the reports on disk failed; they are kept in memory only", "file", r.path, "err", err)
	}
}

// Run sends the reports until ctx ends: a batch of at most
// agentapi.MaxDirectReports at a time, again after a failure with a
// growing wait.
func (r *Reporter) Run(ctx context.Context) {
	wait := time.Second
	failing := false
	for {
		r.mu.Lock()
		n := min(len(r.pending), agentapi.MaxDirectReports)
		batch, last := make([]agentapi.DirectReport, n), uint64(0)
		for i, p := range r.pending[:n] {
			batch[i], last = p.rep, p.seq
		}
		r.mu.Unlock()
		if n == 0 {
			select {
			case <-ctx.Done():
				return
			case <-r.wake:
			}
			continue
		}
		err := r.sendBatch(ctx, batch, last)
		if err == nil {
			wait, failing = time.Second, false
			continue
		}
		if ctx.Err() != nil {
			return
		}
		if !failing {
			r.log.Warn("direct sessions: reporting to the server failed; trying again", "reports", len(batch), "err", err)
			failing = true
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, reportRetryMax)
	}
}

// sendBatch sends batch, the oldest pending reports up to number last,
// and drops them once answered.
func (r *Reporter) sendBatch(ctx context.Context, batch []agentapi.DirectReport, last uint64) error {
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := r.send(sctx, batch)
	if err != nil {
		return err
	}
	if len(resp.Results) != len(batch) {
		return fmt.Errorf("the server answered %d of %d reports", len(resp.Results), len(batch))
	}
	for i, res := range resp.Results {
		if res.Status == agentapi.ReportRefused {
			r.log.Warn("direct sessions: the server refused a report", "connections", batch[i].Connections, "err", res.Error)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	// Add appends behind the batch, and may have dropped some of it.
	i := 0
	for i < len(r.pending) && r.pending[i].seq <= last {
		i++
	}
	r.pending = r.pending[i:]
	r.keepLocked()
	return nil
}
