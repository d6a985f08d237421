package rest

import (
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpucloud/gpucloud/internal/batchconn"
)

// A WebSocket client must mask what it sends, and coder/websocket masks
// through its 4 KiB write buffer, writing each 4 KiB to the connection as
// it fills: over TLS, a record, an encryption and a syscall per 4 KiB.
// Profiles of a port-forward (docs/BENCHMARKS.md) spent more time in
// those writes than in all the others of the relay. The upgraded
// connection of a dialled WebSocket is therefore given a coalescing
// writer: writes are queued, and one goroutine hands what has queued to
// the connection in one write, so that a stream of 4 KiB writes becomes
// TLS records of 16 KiB. A lone small write (a keystroke, a status) goes
// out at once: the flusher is idle and takes it as it comes.

// coalesceMax bounds what a connection queues: a writer waits while this
// much is pending.
const coalesceMax = 256 << 10

// upgradeTransport wraps the body of a 101 Switching Protocols response,
// the upgraded connection, in a coalescing writer; batch is the
// connection under its TLS when dialTLS dialled it.
type upgradeTransport struct {
	base  http.RoundTripper
	batch atomic.Pointer[batchconn.Conn]
}

func (t *upgradeTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		return resp, err
	}
	if rwc, ok := resp.Body.(io.ReadWriteCloser); ok {
		resp.Body = newCoalescer(rwc, t.batch.Load())
	}
	return resp, nil
}

// coalescer is an io.ReadWriteCloser whose writes are queued and written
// by one goroutine, several at a time. Write returns once its bytes are
// queued; an error of the connection is returned by the writes after it.
// Close first lets the flusher write what is queued, for at most
// closeDrain: coder/websocket closes the connection when a read's context
// ends, e.g. as a net.Conn adapter closes while its last message (a
// port-forward's final bytes, a close frame) is still queued.
type coalescer struct {
	rwc   io.ReadWriteCloser
	batch *batchconn.Conn // under rwc's TLS: each write's records go in one (nil: none)

	mu      sync.Mutex
	cond    sync.Cond
	pending []byte // queued, not yet taken by the flusher
	spare   []byte // the flusher's last buffer, for reuse
	running bool   // the flusher goroutine is started
	writing bool   // the flusher is writing what it took
	closing bool   // Close was called: no more writes
	err     error  // the connection's write error, or net.ErrClosed
}

func newCoalescer(rwc io.ReadWriteCloser, batch *batchconn.Conn) *coalescer {
	c := &coalescer{rwc: rwc, batch: batch}
	c.cond.L = &c.mu
	return c
}

func (c *coalescer) Read(p []byte) (int, error) { return c.rwc.Read(p) }

func (c *coalescer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for len(p) > 0 {
		for c.err == nil && !c.closing && len(c.pending) >= coalesceMax {
			c.cond.Wait()
		}
		if c.err != nil {
			return n, c.err
		}
		if c.closing {
			return n, net.ErrClosed
		}
		k := min(len(p), coalesceMax-len(c.pending))
		c.pending = append(c.pending, p[:k]...)
		n += k
		p = p[k:]
		if !c.running {
			c.running = true
			go c.flush()
		}
		c.cond.Broadcast()
	}
	return n, nil
}

// flush writes what is pending until the connection fails or closes.
func (c *coalescer) flush() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		for c.err == nil && len(c.pending) == 0 {
			c.cond.Wait()
		}
		if c.err != nil {
			return
		}
		out := c.pending
		c.pending = c.spare[:0]
		c.writing = true
		c.cond.Broadcast() // room for the writers
		c.mu.Unlock()
		c.batch.Hold()
		_, err := c.rwc.Write(out)
		if rerr := c.batch.Release(); err == nil {
			err = rerr
		}
		c.mu.Lock()
		c.spare = out[:0]
		c.writing = false
		c.cond.Broadcast() // Close may be waiting for the queue to drain
		if err != nil && c.err == nil {
			c.err = err
			c.cond.Broadcast()
		}
	}
}

// closeDrain bounds how long Close waits for the queue to drain (a peer
// that stopped reading).
const closeDrain = 2 * time.Second

func (c *coalescer) Close() error {
	c.mu.Lock()
	c.closing = true
	timedOut := false
	t := time.AfterFunc(closeDrain, func() {
		c.mu.Lock()
		timedOut = true
		c.cond.Broadcast()
		c.mu.Unlock()
	})
	for c.err == nil && !timedOut && (len(c.pending) > 0 || c.writing) {
		c.cond.Wait()
	}
	t.Stop()
	if c.err == nil {
		c.err = net.ErrClosed
	}
	c.cond.Broadcast()
	c.mu.Unlock()
	return c.rwc.Close()
}
