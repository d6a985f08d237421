// Package batchconn gathers the TLS records of one large write into one
// system call.
//
// crypto/tls writes every record it seals (at most 16 KiB of data) to its
// connection by itself: a 256 KiB message is sixteen writes, each a
// syscall and, on loopback, a trip through the receiving TCP stack. A
// Conn sits under a *tls.Conn; between Hold and Release what TLS writes is
// gathered and written at Release in one write. The relay and the
// WebSocket clients hold around each bulk write they hand to TLS
// (relay.Splice, internal/rest's coalescer). One TLS hop of 256 KiB
// messages over loopback went from 1.09 to 1.31 GB/s (BenchmarkTLSWrite,
// medians of four, on the project's 2-core VM; docs/BENCHMARKS.md).
//
// Outside a hold, writes pass straight through. Every write to the
// connection, held or not, goes through one lock, so that a write TLS
// makes from another goroutine meanwhile (a WebSocket's pong, an alert)
// lands in order behind what is gathered. Close does not take the lock:
// it closes the connection at once, failing a write that blocks (and
// dropping what a hold had gathered), as closing a net.Conn does.
package batchconn

import (
	"bufio"
	"context"
	"crypto/tls"
	"net"
	"sync"
)

// maxGather bounds what a hold gathers before it writes: a write larger
// than this goes out in several.
const maxGather = 512 << 10

var bufs = sync.Pool{New: func() any { b := make([]byte, 0, maxGather+32<<10); return &b }}

// Conn is a connection whose writes can be gathered. A nil *Conn's Hold
// and Release do nothing, so that callers need not ask whether a
// connection has one.
type Conn struct {
	net.Conn

	mu    sync.Mutex
	holds int
	buf   *[]byte // gathered, while held
	err   error   // a gathered write's failure, returned by the next write
}

// New wraps c.
func New(c net.Conn) *Conn { return &Conn{Conn: c} }

// NetConn is the connection c wraps.
func (c *Conn) NetConn() net.Conn { return c.Conn }

// Write writes p, or gathers it while the connection is held.
func (c *Conn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return 0, c.err
	}
	if c.holds == 0 {
		return c.Conn.Write(p)
	}
	if c.buf == nil {
		c.buf = bufs.Get().(*[]byte)
	}
	*c.buf = append(*c.buf, p...)
	if len(*c.buf) >= maxGather {
		if err := c.flushLocked(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// flushLocked writes what is gathered.
func (c *Conn) flushLocked() error {
	if c.buf == nil || len(*c.buf) == 0 {
		return nil
	}
	_, err := c.Conn.Write(*c.buf)
	*c.buf = (*c.buf)[:0]
	if err != nil && c.err == nil {
		c.err = err
	}
	return err
}

// Hold starts gathering writes until the matching Release.
func (c *Conn) Hold() {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.holds++
	c.mu.Unlock()
}

// Release ends a Hold; the last one writes what was gathered, and
// returns that write's error.
func (c *Conn) Release() error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.holds == 0 {
		return nil
	}
	c.holds--
	if c.holds > 0 {
		return nil
	}
	err := c.flushLocked()
	if c.buf != nil {
		bufs.Put(c.buf)
		c.buf = nil
	}
	return err
}

// Listener wraps each connection it accepts in a Conn.
type Listener struct{ net.Listener }

func (l Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return New(c), nil
}

type ctxKey struct{}

// ConnContext is an http.Server's ConnContext: it keeps the Conn under
// a TLS connection (one a Listener accepted) in the context of the
// connection's requests, for From.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if bc, ok := c.(*Conn); ok {
		return context.WithValue(ctx, ctxKey{}, bc)
	}
	return ctx
}

// From is the Conn of a request's connection, as ConnContext kept it;
// nil when it has none.
func From(ctx context.Context) *Conn {
	bc, _ := ctx.Value(ctxKey{}).(*Conn)
	return bc
}

// Gathered is a TLS connection over a Conn whose every Write is held:
// the records of one write leave in one system call. For connections that
// carry bulk data in large writes (a direct copy's files protocol, whose
// writes are up to 256 KiB). Its reads are buffered under TLS too
// (ReadBuffer): crypto/tls reads the socket about a record at a time,
// and a 1 GiB copy over loopback cost about a tenth less CPU reading 256
// KiB at a time (BenchmarkGatheredRead; docs/BENCHMARKS.md).
type Gathered struct {
	*tls.Conn
	under *Conn
}

// ReadBuffer is the read buffer under a Gathered connection's TLS.
const ReadBuffer = 256 << 10

// bufferedConn reads c through a buffer.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufferedConn) Read(p []byte) (int, error) { return b.r.Read(p) }

func gathered(c net.Conn) *Conn {
	return New(&bufferedConn{Conn: c, r: bufio.NewReaderSize(c, ReadBuffer)})
}

// ReadBatch reads into p what has arrived: it waits for the first bytes
// as Read does, then goes on reading while a whole TLS record is already
// in the read buffer (so that no further read waits) and p has room. A
// relay that writes what it reads elsewhere then writes in batches of up
// to len(p), not a record (16 KiB) at a time, without holding back bytes
// that have arrived.
func (g *Gathered) ReadBatch(p []byte) (int, error) {
	n, err := g.Conn.Read(p)
	for err == nil && n < len(p) && g.recordBuffered() {
		var m int
		m, err = g.Conn.Read(p[n:])
		n += m
	}
	if n > 0 {
		return n, nil // an error comes again at the next read
	}
	return n, err
}

// recordBuffered reports whether a whole TLS record waits in the read
// buffer.
func (g *Gathered) recordBuffered() bool {
	b, ok := g.under.Conn.(*bufferedConn)
	if !ok || b.r.Buffered() < 5 {
		return false
	}
	hdr, err := b.r.Peek(5)
	if err != nil {
		return false
	}
	return b.r.Buffered() >= 5+(int(hdr[3])<<8|int(hdr[4]))
}

// Client is tls.Client over c, gathered; Server likewise tls.Server.
func Client(c net.Conn, cfg *tls.Config) *Gathered {
	u := gathered(c)
	return &Gathered{Conn: tls.Client(u, cfg), under: u}
}

// Server is tls.Server over c, gathered.
func Server(c net.Conn, cfg *tls.Config) *Gathered {
	u := gathered(c)
	return &Gathered{Conn: tls.Server(u, cfg), under: u}
}

// Write writes p through TLS, its records gathered into one write.
func (g *Gathered) Write(p []byte) (int, error) {
	// The handshake first, outside the hold: held, its first flight
	// would wait for the answer it asks for.
	if err := g.Conn.Handshake(); err != nil {
		return 0, err
	}
	g.under.Hold()
	n, err := g.Conn.Write(p)
	if rerr := g.under.Release(); err == nil {
		err = rerr
	}
	return n, err
}
