package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/internal/stream"
)

// Sessions (docs/ACCESS.md): the agent holds one control channel to the
// server (GET /v1/agent/sessions, a WebSocket on its mutual-TLS
// credential); for each session request on it, it dials back GET
// /v1/agent/sessions/{id} and serves the session there: an exec through
// the runtime's Execer, a port forward through its Dialer, other kinds
// through Config.Sessions. Nothing listens on the host.

// Exit codes of sessions the agent ends itself.
const (
	// ExitAgentStopped ends the sessions of an agent that stops or
	// restarts: the command was killed.
	ExitAgentStopped = 255
	// ExitCannotRun answers an exec the runtime could not start (no such
	// program: 127, as shells answer).
	ExitCannotRun = 127
)

// MessageAgentStopped is the status message of the sessions an agent ends
// as it stops.
const MessageAgentStopped = "the host's agent stopped (it is restarting or shutting down); the session was ended and its command killed"

// sessionWriteTimeout bounds a session's last messages (status, close),
// sent after its context may have ended.
const sessionWriteTimeout = 5 * time.Second

// sessionLoop keeps the control channel open until ctx ends, reconnecting
// with backoff. It runs beside the heartbeats and reconciles and never
// holds them up.
func (a *Agent) sessionLoop(ctx context.Context, d SessionDialer) {
	var wg sync.WaitGroup
	defer wg.Wait()
	fails := 0
	for ctx.Err() == nil {
		ws, err := d.SessionControl(ctx)
		if err == nil {
			fails = 0
			err = a.serveControl(ctx, d, ws, &wg)
		}
		if ctx.Err() != nil {
			return
		}
		fails++
		delay := min(retryDelay(a.cfg.Interval, fails, err), time.Minute)
		a.log.Warn("agent: session control channel ended", "err", err, "retry_in", delay)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// serveControl reads session requests until the channel ends, and serves
// each on its own goroutine.
func (a *Agent) serveControl(ctx context.Context, d SessionDialer, ws *websocket.Conn, wg *sync.WaitGroup) error {
	defer ws.CloseNow()
	for {
		_, b, err := ws.Read(ctx)
		if err != nil {
			return err
		}
		var req agentapi.SessionRequest
		if err := json.Unmarshal(b, &req); err != nil || req.ID == "" {
			a.log.Warn("agent: bad session request", "err", err)
			continue
		}
		wg.Go(func() { a.serveSession(ctx, d, req) })
	}
}

// serveSession dials session req back and serves it until it ends.
func (a *Agent) serveSession(ctx context.Context, d SessionDialer, req agentapi.SessionRequest) {
	log := a.log.With("session", req.ID, "kind", req.Kind, "instance", req.InstanceID, "actor", req.Actor)
	if req.Kind == agentapi.SessionTunnel {
		a.serveTunnel(ctx, d, req, log)
		return
	}
	proto := agentapi.RawSubprotocol
	if req.Kind == agentapi.SessionExec {
		proto = stream.Subprotocol
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	ws, err := d.DialSession(dctx, req.ID, proto)
	cancel()
	if err != nil {
		log.Warn("agent: dialing a session back failed", "err", err)
		return
	}
	defer ws.CloseNow()
	log.Info("agent: session started")
	err = a.runSession(ctx, req, ws)
	log.Info("agent: session ended", "err", err)
}

// serveTunnel dials tunnel req back and hands the raw connection to
// Config.Tunnels, which checks the grant that comes on it. An agent
// without one does not dial: the server's wait times out.
func (a *Agent) serveTunnel(ctx context.Context, d SessionDialer, req agentapi.SessionRequest, log *slog.Logger) {
	td, ok := d.(TunnelDialer)
	if !ok || a.cfg.Tunnels == nil {
		log.Warn("agent: asked for a tunnel, and it takes none")
		return
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	raw, err := td.DialTunnel(dctx, req.ID)
	cancel()
	if err != nil {
		log.Warn("agent: dialing a tunnel back failed", "err", err)
		return
	}
	log.Debug("agent: tunnel started")
	a.cfg.Tunnels.ServeTunnel(ctx, raw)
	log.Debug("agent: tunnel ended")
}

func (a *Agent) runSession(ctx context.Context, req agentapi.SessionRequest, ws *websocket.Conn) error {
	closeWith := func(code websocket.StatusCode, msg string) error {
		ws.Close(code, truncate(msg, 120))
		return errors.New(msg)
	}
	// A files session on a detached volume names no instance: the files
	// handler checks the volume itself (agent.VolumeRoot).
	volumeOnly := req.Kind == agentapi.SessionFiles && req.InstanceID == ""
	if st, err := a.cfg.Runtime.Status(req.InstanceID); !volumeOnly && (err != nil || st.State != runtime.StateRunning) {
		msg := fmt.Sprintf("instance %s is not running on this host", req.InstanceID)
		if req.Kind == agentapi.SessionExec {
			return a.endExec(stream.NewConn(ws), stream.ExitStatus{ExitCode: ExitCannotRun, Message: msg})
		}
		return closeWith(websocket.StatusPolicyViolation, msg)
	}
	switch req.Kind {
	case agentapi.SessionExec:
		return a.serveExec(ctx, req, ws)
	case agentapi.SessionForward:
		return a.serveForward(ctx, req, ws)
	}
	h, ok := a.cfg.Sessions[req.Kind]
	if !ok {
		return closeWith(websocket.StatusPolicyViolation, "this host's agent does not serve "+req.Kind+" sessions")
	}
	conn := websocket.NetConn(ctx, ws, websocket.MessageBinary)
	defer conn.Close()
	return h.ServeSession(ctx, req, conn)
}

// serveExec runs req's command through the runtime and sends its output
// and exit status. When ctx ends (the agent stops), the command is killed
// and the client told why; when the client goes, the command is killed.
func (a *Agent) serveExec(ctx context.Context, req agentapi.SessionRequest, ws *websocket.Conn) error {
	c := stream.NewConn(ws)
	ex, ok := a.cfg.Runtime.(runtime.Execer)
	if !ok {
		return a.endExec(c, stream.ExitStatus{ExitCode: ExitCannotRun, Message: "this host's runtime cannot exec"})
	}
	spec := runtime.ExecSpec{Command: req.Command, TTY: req.TTY, Size: runtime.TermSize{Cols: req.Cols, Rows: req.Rows}}
	var stdin *io.PipeReader
	if req.Stdin {
		stdin = c.Reader(stream.Stdin)
		spec.Stdin = stdin
	}
	resize := make(chan runtime.TermSize, 1)
	spec.Resize = resize
	// The command ends with the agent (ctx) or with the client (the read
	// loop ends). The connection's own reads and writes run under rctx,
	// never ctx: coder/websocket closes a connection whose read or write
	// context ends, and a stopping agent still owes the client its status.
	rctx, rcancel := context.WithCancel(context.Background())
	defer rcancel()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		_ = c.Run(rctx)
		cancel()
	}()
	go func() {
		for {
			select {
			case sz := <-c.Resizes():
				// Only the latest size matters: one pending is replaced.
				select {
				case <-resize:
				default:
				}
				resize <- runtime.TermSize{Cols: sz.Cols, Rows: sz.Rows}
			case <-sctx.Done():
				return
			}
		}
	}()
	spec.Stdout = c.Writer(rctx, stream.Stdout)
	spec.Stderr = c.Writer(rctx, stream.Stderr)
	code, err := ex.Exec(sctx, req.InstanceID, spec)
	if stdin != nil {
		stdin.Close()
	}
	switch {
	case ctx.Err() != nil:
		return a.endExec(c, stream.ExitStatus{ExitCode: ExitAgentStopped, Message: MessageAgentStopped})
	case sctx.Err() != nil:
		return errors.New("the client closed the session")
	case errors.Is(err, runtime.ErrInvalid):
		return a.endExec(c, stream.ExitStatus{ExitCode: ExitCannotRun, Message: err.Error()})
	case err != nil:
		return a.endExec(c, stream.ExitStatus{ExitCode: ExitAgentStopped, Message: "exec failed: " + err.Error()})
	}
	return a.endExec(c, stream.ExitStatus{ExitCode: code})
}

// endExec sends an exec's status and closes its connection.
func (a *Agent) endExec(c *stream.Conn, st stream.ExitStatus) error {
	ctx, cancel := context.WithTimeout(context.Background(), sessionWriteTimeout)
	defer cancel()
	err := c.SendStatus(ctx, st)
	c.WebSocket().Close(websocket.StatusNormalClosure, "")
	if st.Message != "" && st.ExitCode != 0 {
		return errors.New(st.Message)
	}
	return err
}

// serveForward connects to req's port inside the instance and copies
// bytes both ways until either side ends.
func (a *Agent) serveForward(ctx context.Context, req agentapi.SessionRequest, ws *websocket.Conn) error {
	dl, ok := a.cfg.Runtime.(runtime.Dialer)
	if !ok {
		ws.Close(websocket.StatusPolicyViolation, "this host's runtime cannot forward ports")
		return errors.New("no dialer")
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	tcp, err := dl.Dial(dctx, req.InstanceID, req.Port)
	cancel()
	if err != nil {
		ws.Close(websocket.StatusPolicyViolation, truncate(fmt.Sprintf("connecting to port %d in the instance failed: %v", req.Port, err), 120))
		return err
	}
	defer tcp.Close()
	conn := websocket.NetConn(ctx, ws, websocket.MessageBinary)
	defer conn.Close()
	done := make(chan struct{}, 2)
	go func() {
		_, _ = copyChunks(conn, tcp)
		// The instance's side ended: the client's connection ends too.
		conn.Close()
		done <- struct{}{}
	}()
	go func() {
		_ = copyMessages(ctx, tcp, ws)
		if cw, ok := tcp.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		done <- struct{}{}
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
	// Give the other direction a moment to drain a half-close.
	t := time.NewTimer(sessionWriteTimeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	case <-ctx.Done():
	}
	return nil
}

// copyChunks copies src to dst in writes of at most 256 KiB, each one
// WebSocket message: bounded, and large enough that frames are few.
func copyChunks(dst io.Writer, src io.Reader) (int64, error) {
	return io.CopyBuffer(dst, onlyReader{src}, make([]byte, 256<<10))
}

// copyMessages copies ws's messages to dst until ws closes, each message
// read up to 256 KiB at a time before it is written: a read of the
// WebSocket answers at most one TLS record (16 KiB), and a write into the
// instance per record cost a syscall each (docs/BENCHMARKS.md). A message
// is a write of the client's, so nothing waits for later ones.
func copyMessages(ctx context.Context, dst io.Writer, ws *websocket.Conn) error {
	buf := make([]byte, 256<<10)
	for {
		_, r, err := ws.Reader(ctx)
		if err != nil {
			if websocket.CloseStatus(err) == websocket.StatusNormalClosure {
				return nil
			}
			return err
		}
		for {
			n, err := io.ReadFull(r, buf)
			if n > 0 {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return werr
				}
			}
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				break
			}
			if err != nil {
				return err
			}
		}
	}
}

// onlyReader hides WriterTo, so that CopyBuffer uses the buffer's size.
type onlyReader struct{ io.Reader }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
