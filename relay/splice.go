package relay

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"sync"
	"sync/atomic"

	"github.com/coder/websocket"
	"github.com/gpucloud/gpucloud/internal/batchconn"
	"github.com/gpucloud/gpucloud/internal/stream"
)

// Splice relays messages between a client's WebSocket and an agent's
// until either side ends, message by message and streamed (a message is
// never held whole). With framed (internal/stream), the agent's messages
// are checked for a known channel, and the status message's exit status
// is returned (nil when the session ended without one); the client may
// not send stdout, stderr or status. Without framed, the bytes pass as
// they are.
//
// When the agent ends first, the client is closed with the agent's code
// and reason; when the client ends first, the agent is closed (and kills
// what it ran for the session).
//
// clientBatch is the connection under the client's TLS (nil: none), and
// the agent Session's Batch the agent's: each message's bulk write to
// either is gathered into one write to its connection (batchconn).
func Splice(ctx context.Context, client *websocket.Conn, clientBatch *batchconn.Conn, as *Session, framed bool) (*stream.ExitStatus, error) {
	agent := as.Conn
	limit := int64(-1)
	if framed {
		limit = stream.ReadLimit
	}
	client.SetReadLimit(limit)
	agent.SetReadLimit(limit)
	var status *stream.ExitStatus
	var clientGone atomic.Bool
	up := make(chan error, 1)
	go func() {
		err := pump(ctx, client, agent, as.Batch, framed, true, nil)
		clientGone.Store(true)
		// The client is gone (or broke the framing): the agent ends the
		// session, and its close ends the other direction.
		reason := "the client closed the session"
		if !isClosed(err) {
			reason = "the client's connection failed"
		}
		agent.Close(websocket.StatusNormalClosure, reason)
		up <- err
	}()
	downErr := pump(ctx, agent, client, clientBatch, framed, false, &status)
	code, reason := websocket.StatusNormalClosure, ""
	var ce websocket.CloseError
	switch {
	case status != nil:
	case errors.As(downErr, &ce):
		code, reason = ce.Code, ce.Reason
	default:
		code, reason = websocket.StatusInternalError, "the relay to the host's agent failed"
	}
	if framed && status == nil && !clientGone.Load() {
		// The agent went without a status (it was killed, its host
		// lost): the client still learns that the session is over, and
		// that it did not exit by itself.
		msg := "the connection to the instance's host agent was lost"
		if reason != "" {
			msg += ": " + reason
		}
		lost := stream.ExitStatus{ExitCode: LostExitCode, Message: msg}
		b, _ := json.Marshal(lost)
		if client.Write(ctx, websocket.MessageBinary, stream.Encode(stream.Status, b)) == nil {
			status = &lost
		}
	}
	client.Close(code, reason)
	upErr := <-up
	agent.CloseNow()
	if status != nil || isClosed(downErr) || isClosed(upErr) {
		return status, nil
	}
	return status, errors.Join(downErr, upErr)
}

// LostExitCode is the exit code of a session whose agent went without
// an exit status, as ssh answers a lost connection.
const LostExitCode = 255

// isClosed reports whether err is a peer's orderly close.
func isClosed(err error) bool {
	s := websocket.CloseStatus(err)
	return s == websocket.StatusNormalClosure || s == websocket.StatusGoingAway
}

// pump copies src's messages to dst until src ends. fromClient refuses a
// client's output channels; status, when not nil, receives a framed
// status message (the last one: pump stops after it).
func pump(ctx context.Context, src, dst *websocket.Conn, batch *batchconn.Conn, framed, fromClient bool, status **stream.ExitStatus) error {
	for {
		typ, r, err := src.Reader(ctx)
		if err != nil {
			return err
		}
		if !framed {
			if err := copyMessage(ctx, dst, batch, typ, nil, r); err != nil {
				return err
			}
			continue
		}
		if typ != websocket.MessageBinary {
			return errors.New("relay: text message on a framed session")
		}
		var ch [1]byte
		if _, err := io.ReadFull(r, ch[:]); err != nil {
			return errors.New("relay: empty message on a framed session")
		}
		switch c := ch[0]; {
		case fromClient && (c == stream.Stdout || c == stream.Stderr || c == stream.Status):
			return errors.New("relay: the client sent on an output channel")
		case c == stream.Status && status != nil:
			b, err := io.ReadAll(r)
			if err != nil {
				return err
			}
			st, err := stream.DecodeStatus(b)
			if err != nil {
				return err
			}
			if err := dst.Write(ctx, websocket.MessageBinary, stream.Encode(c, b)); err != nil {
				return err
			}
			*status = &st
			return nil
		case !stream.IsData(c) && c != stream.Resize && c != stream.Close:
			return stream.ErrFrame
		}
		if err := copyMessage(ctx, dst, batch, typ, ch[:], r); err != nil {
			return err
		}
	}
}

// copyBuf is how much of a message copyMessage reads before it writes:
// a read answers at most one TLS record (16 KiB), and a frame written per
// read would cost a flush and a syscall each.
const copyBuf = 256 << 10

// copyBufs holds copyMessage's buffers: a buffer made per message cost as
// much allocation and zeroing as the bytes it carried.
var copyBufs = sync.Pool{New: func() any { return new([copyBuf]byte) }}

// copyMessage copies one message of r to dst, a buffer at a time; each
// buffer's write to dst (and the message's end) is gathered under batch
// into one write to the connection, where TLS would write it a record at
// a time.
func copyMessage(ctx context.Context, dst *websocket.Conn, batch *batchconn.Conn, typ websocket.MessageType, head []byte, r io.Reader) error {
	w, err := dst.Writer(ctx, typ)
	if err != nil {
		return err
	}
	b := copyBufs.Get().(*[copyBuf]byte)
	defer copyBufs.Put(b)
	buf := b[:]
	n := copy(buf, head)
	for {
		m, err := io.ReadFull(r, buf[n:])
		n += m
		end := err == io.EOF || err == io.ErrUnexpectedEOF
		if err != nil && !end {
			return err
		}
		if n == len(buf) || end {
			if err := gathered(w, batch, buf[:n], end); err != nil {
				return err
			}
			n = 0
		}
		if end {
			return nil
		}
	}
}

// gathered writes p to w and, at the message's end, closes w, the whole
// gathered under batch.
func gathered(w io.WriteCloser, batch *batchconn.Conn, p []byte, end bool) error {
	batch.Hold()
	var err error
	if len(p) > 0 {
		_, err = w.Write(p)
	}
	if end && err == nil {
		err = w.Close()
	}
	if rerr := batch.Release(); err == nil {
		err = rerr
	}
	return err
}
