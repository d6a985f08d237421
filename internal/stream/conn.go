package stream

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"sync"

	"github.com/coder/websocket"
)

// Conn is one end of a framed session over a WebSocket. Its writers are
// safe for concurrent use (one message at a time). Its readers are fed by
// one read loop, Run: register the channels you read (Reader) before Run;
// messages on other data channels are dropped, so that a peer cannot
// stall the loop on a stream nobody reads.
type Conn struct {
	ws *websocket.Conn

	wmu sync.Mutex // one message at a time

	pipes   map[byte]*pipe
	resizes chan Size

	done   chan struct{}
	mu     sync.Mutex
	status *ExitStatus
	err    error
}

type pipe struct {
	r *io.PipeReader
	w *io.PipeWriter
}

// NewConn wraps ws, whose read limit it sets to ReadLimit.
func NewConn(ws *websocket.Conn) *Conn {
	ws.SetReadLimit(ReadLimit)
	return &Conn{ws: ws, pipes: map[byte]*pipe{}, resizes: make(chan Size, 4), done: make(chan struct{})}
}

// WebSocket returns the underlying connection (to close it with a code).
func (c *Conn) WebSocket() *websocket.Conn { return c.ws }

// Reader returns the stream of data channel ch (Stdin, Stdout or Stderr)
// as Run receives it. It ends with io.EOF when the peer closes the
// channel or sends its status, and with Run's error otherwise. Closing it
// drops what arrives later. Call it before Run.
func (c *Conn) Reader(ch byte) *io.PipeReader {
	p, ok := c.pipes[ch]
	if !ok {
		r, w := io.Pipe()
		p = &pipe{r: r, w: w}
		c.pipes[ch] = p
	}
	return p.r
}

// Resizes delivers the peer's resize messages; when the consumer falls
// behind, the oldest pending size is replaced, since only the latest one
// matters.
func (c *Conn) Resizes() <-chan Size { return c.resizes }

// Done is closed when Run returns.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Status returns the peer's exit status once Run has received it.
func (c *Conn) Status() (ExitStatus, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.status == nil {
		return ExitStatus{}, false
	}
	return *c.status, true
}

// Err is why Run ended (nil before; io.EOF after a status or a normal
// close).
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Run reads messages until the connection ends or a status arrives, and
// hands each to its reader; readers are served in the order messages
// arrive, so read every registered channel concurrently. It returns nil after a status or a normal
// closure, and the error otherwise; either way every reader ends.
func (c *Conn) Run(ctx context.Context) error {
	// A reader that stopped reading must not hold the loop past ctx.
	stop := context.AfterFunc(ctx, func() {
		for _, p := range c.pipes {
			p.r.CloseWithError(ctx.Err())
		}
	})
	defer stop()
	err := c.run(ctx)
	end := err
	if end == nil {
		end = io.EOF
	}
	for _, p := range c.pipes {
		p.w.CloseWithError(end)
	}
	c.mu.Lock()
	c.err = end
	c.mu.Unlock()
	close(c.done)
	return err
}

func (c *Conn) run(ctx context.Context) error {
	for {
		typ, b, err := c.ws.Read(ctx)
		if err != nil {
			if websocket.CloseStatus(err) == websocket.StatusNormalClosure {
				return nil
			}
			return err
		}
		if typ != websocket.MessageBinary {
			return errors.New("stream: text message on a framed session")
		}
		m, err := Decode(b)
		if err != nil {
			return err
		}
		switch m.Channel {
		case Status:
			st, _ := DecodeStatus(m.Payload)
			c.mu.Lock()
			c.status = &st
			c.mu.Unlock()
			return nil
		case Resize:
			sz, _ := DecodeSize(m.Payload)
			c.pushResize(sz)
		case Close:
			if p, ok := c.pipes[m.Payload[0]]; ok {
				p.w.Close()
			}
		default:
			if p, ok := c.pipes[m.Channel]; ok && len(m.Payload) > 0 {
				// A reader that closed its end answers ErrClosedPipe:
				// what it no longer wants is dropped.
				_, _ = p.w.Write(m.Payload)
			}
		}
	}
}

func (c *Conn) pushResize(sz Size) {
	for {
		select {
		case c.resizes <- sz:
			return
		default:
		}
		select {
		case <-c.resizes:
		default:
		}
	}
}

// Send writes p on channel ch, split into messages of at most MaxPayload.
func (c *Conn) Send(ctx context.Context, ch byte, p []byte) error {
	for len(p) > 0 {
		n := min(len(p), MaxPayload)
		if err := c.write(ctx, Encode(ch, p[:n])); err != nil {
			return err
		}
		p = p[n:]
	}
	return nil
}

func (c *Conn) write(ctx context.Context, msg []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.ws.Write(ctx, websocket.MessageBinary, msg)
}

// SendStatus sends the exit status, the last message of the process side.
func (c *Conn) SendStatus(ctx context.Context, st ExitStatus) error {
	b, _ := json.Marshal(st)
	return c.write(ctx, Encode(Status, b))
}

// SendResize sends a terminal's new size.
func (c *Conn) SendResize(ctx context.Context, sz Size) error {
	b, _ := json.Marshal(sz)
	return c.write(ctx, Encode(Resize, b))
}

// CloseChannel tells the peer that data channel ch ends (stdin's EOF).
func (c *Conn) CloseChannel(ctx context.Context, ch byte) error {
	return c.write(ctx, []byte{Close, ch})
}

// Writer returns an io.WriteCloser of channel ch whose Close sends the
// channel's close message. Its writes use ctx.
func (c *Conn) Writer(ctx context.Context, ch byte) io.WriteCloser {
	return &chanWriter{c: c, ctx: ctx, ch: ch}
}

type chanWriter struct {
	c   *Conn
	ctx context.Context
	ch  byte
}

func (w *chanWriter) Write(p []byte) (int, error) {
	if err := w.c.Send(w.ctx, w.ch, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (w *chanWriter) Close() error { return w.c.CloseChannel(w.ctx, w.ch) }
