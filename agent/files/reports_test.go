//go:build linux

package files

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/internal/filexfer"
)

// fakeServer answers reports as the server would, failing the first
// fail sends.
type fakeServer struct {
	mu   sync.Mutex
	fail int
	got  []agentapi.DirectReport
}

func (f *fakeServer) send(_ context.Context, reps []agentapi.DirectReport) (*agentapi.DirectReportsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail > 0 {
		f.fail--
		return nil, errors.New("server away")
	}
	f.got = append(f.got, reps...)
	out := &agentapi.DirectReportsResponse{}
	for range reps {
		out.Results = append(out.Results, agentapi.DirectReportResult{Status: agentapi.ReportRecorded})
	}
	return out, nil
}

func (f *fakeServer) reports() []agentapi.DirectReport {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]agentapi.DirectReport(nil), f.got...)
}

// TestDirectReports: a grant is reported once it has expired and its last
// connection has closed, with its connections and bytes, after a server
// that was away answers; one still open when the listener stops is
// reported cut, kept in the data directory, and sent by the next run.
func TestDirectReports(t *testing.T) {
	ca := mustCA(t)
	dir := t.TempDir()
	var ahead atomic.Int64
	start := time.Now()
	now := func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }
	d, ln, addr, fp, _ := directListener(t, ca)
	srv := &fakeServer{fail: 1}
	d.Now, d.SweepEvery, d.Reports = now, 20*time.Millisecond, NewReporter(srv.send, dir, nil)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- d.Serve(ctx, ln) }()
	defer func() { cancel(); <-done }()

	grant := func(id string) string {
		return grantFor(t, ca, agentapi.DirectGrant{ID: id, Kind: agentapi.SessionFiles, HostID: "h-1", TenantID: "tn-a", Actor: "u-a",
			SessionID: "ses-" + id, Target: agentapi.FilesTarget{VolumeID: "v-1"}, Expires: start.Add(time.Minute).Unix()})
	}
	data := bytes.Repeat([]byte("reported "), 50000)
	tok := grant("g-1")
	for i := range 2 {
		c, w := dialDirect(t, addr, fp, tok)
		if w.Error != nil {
			t.Fatal(w.Error)
		}
		if _, err := filexfer.NewClient(c).Put("/x"+string(rune('a'+i)), bytes.NewReader(data), 0, int64(len(data)), 0o644); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	time.Sleep(100 * time.Millisecond)
	if got := srv.reports(); len(got) != 0 {
		t.Fatalf("reported before the grant expired: %+v", got)
	}
	ahead.Store(int64(2 * time.Minute))
	// The first send fails; the reporter tries again a second later.
	deadline := time.Now().Add(10 * time.Second)
	for len(srv.reports()) == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	got := srv.reports()
	if len(got) != 1 {
		t.Fatalf("reports: %+v, want 1", got)
	}
	r := got[0]
	if r.Grant != tok || r.Connections != 2 || r.BytesIn < 2*int64(len(data)) || r.BytesOut == 0 || r.Cut ||
		r.First.Before(start) || r.Last.Before(r.First) {
		t.Errorf("report: %+v", r)
	}
	if _, err := os.Stat(filepath.Join(dir, reportsFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the kept reports after the answer: %v; want none", err)
	}

	// A connection open as the listener stops: reported cut, and kept.
	ahead.Store(0)
	tok2 := grant("g-2")
	c, w := dialDirect(t, addr, fp, tok2)
	if w.Error != nil {
		t.Fatal(w.Error)
	}
	if _, err := filexfer.NewClient(c).Stat("/"); err != nil {
		t.Fatal(err)
	}
	srv.mu.Lock()
	srv.fail = 1000
	srv.mu.Unlock()
	cancel()
	<-done
	done <- nil // for the deferred receive
	next := NewReporter(srv.send, dir, nil)
	if next.Pending() != 1 || next.pending[0].rep.Grant != tok2 || !next.pending[0].rep.Cut || next.pending[0].rep.Connections != 1 {
		t.Fatalf("kept after the stop: %+v", next.pending)
	}
	srv.mu.Lock()
	srv.fail = 0
	srv.mu.Unlock()
	rctx, rcancel := context.WithCancel(t.Context())
	defer rcancel()
	go next.Run(rctx)
	deadline = time.Now().Add(5 * time.Second)
	for next.Pending() > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if got := srv.reports(); len(got) != 2 || got[1].Grant != tok2 {
		t.Errorf("reports after the restart: %d, want the cut one too", len(got))
	}
}

// TestReporterKeepsOrder: reports added while a batch is out stay
// pending when the batch is answered, and beyond the cap the oldest go.
func TestReporterKeepsOrder(t *testing.T) {
	release := make(chan struct{})
	sent := make(chan int, 4)
	send := func(_ context.Context, reps []agentapi.DirectReport) (*agentapi.DirectReportsResponse, error) {
		sent <- len(reps)
		<-release
		out := &agentapi.DirectReportsResponse{Results: make([]agentapi.DirectReportResult, len(reps))}
		return out, nil
	}
	r := NewReporter(send, t.TempDir(), nil)
	r.Add(agentapi.DirectReport{Grant: "a", Connections: 1}, agentapi.DirectReport{Grant: "b", Connections: 1})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go r.Run(ctx)
	if n := <-sent; n != 2 {
		t.Fatalf("the first batch: %d reports, want 2", n)
	}
	r.Add(agentapi.DirectReport{Grant: "c", Connections: 1})
	release <- struct{}{}
	if n := <-sent; n != 1 {
		t.Fatalf("the second batch: %d reports, want 1 (c)", n)
	}
	if r.Pending() != 1 || r.pending[0].rep.Grant != "c" {
		t.Fatalf("pending: %+v", r.pending)
	}
	close(release)
	for r.Pending() > 0 {
		time.Sleep(10 * time.Millisecond)
	}

	capped := NewReporter(send, "", nil)
	for i := range maxPendingReports + 5 {
		capped.Add(agentapi.DirectReport{Grant: string(rune('A' + i%26)), Connections: i})
	}
	if capped.Pending() != maxPendingReports || capped.pending[0].rep.Connections != 5 {
		t.Errorf("capped: %d pending, the oldest of %d connections; want %d and 5", capped.Pending(), capped.pending[0].rep.Connections, maxPendingReports)
	}
}
