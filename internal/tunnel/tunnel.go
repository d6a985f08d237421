// Package tunnel turns an authenticated HTTPS request into a raw TCP
// connection, for the server to splice to another one in the kernel
// (docs/ACCESS.md, "Tunnels").
//
// A tunnel carries a TLS 1.3 session of its own, end to end between a
// client and a host agent (the direct sessions' protocol, a grant bound to
// the client's key and the agent's pinned certificate): the server that
// joins the two legs never holds the keys, and moves the bytes with
// splice(2) instead of decrypting and encrypting every one.
//
// Each leg starts as an HTTP/1.1 request over the server's TLS, which
// authenticates it (a tenant's token, an agent's client certificate); the
// server answers 101 Switching Protocols with Upgrade: Protocol. Then both
// ends leave the outer TLS in an order that loses no byte to a TLS read
// buffer:
//
//  1. the server sends its close_notify after the 101;
//  2. the peer reads the 101 and then end of stream (that close_notify),
//     and sends its own close_notify; it then reads the raw connection;
//  3. the server reads end of stream (the peer's close_notify); nothing
//     can follow it yet, since the peer waits for step 4;
//  4. when the server has joined the leg to its other end, it writes one
//     raw byte, Ready, and splices.
//
// A close_notify of TLS 1.3 closes one direction and not the connection
// (RFC 8446, 6.1); what follows them is the TCP connection's own.
package tunnel

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// Protocol is the Upgrade token of a tunnel request.
const Protocol = "gpucloud-tunnel/1"

// Ready is the raw byte the server sends on a leg once it is joined.
const Ready byte = 0x17

// dropTimeout bounds each end's wait for the other's close_notify and
// for Ready.
const dropTimeout = 15 * time.Second

// Upgrade answers a tunnel request with 101 and leaves the outer TLS
// (steps 1 and 3); it returns the raw connection, on which the caller
// writes Ready (WriteReady) once the leg is joined. The request's
// connection must be TLS, HTTP/1.1; any bytes the client sent after its
// request are an error.
func Upgrade(w http.ResponseWriter) (net.Conn, error) {
	c, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return nil, fmt.Errorf("tunnel: %w", err)
	}
	fail := func(err error) (net.Conn, error) {
		c.Close()
		return nil, fmt.Errorf("tunnel: %w", err)
	}
	if brw.Reader.Buffered() > 0 {
		return fail(errors.New("the client sent bytes after its request"))
	}
	tc, ok := c.(*tls.Conn)
	if !ok {
		return fail(errors.New("a tunnel needs the server's TLS"))
	}
	_ = tc.SetDeadline(time.Now().Add(dropTimeout))
	if _, err := io.WriteString(tc, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: "+Protocol+"\r\n\r\n"); err != nil {
		return fail(err)
	}
	if err := tc.CloseWrite(); err != nil {
		return fail(err)
	}
	if err := readEnd(tc); err != nil {
		return fail(fmt.Errorf("waiting for the client's close_notify: %w", err))
	}
	raw := Unwrap(tc.NetConn())
	// CloseWrite left the write deadline at its time.
	_ = raw.SetDeadline(time.Time{})
	return raw, nil
}

// WriteReady tells a leg that it is joined (step 4).
func WriteReady(c net.Conn) error {
	_ = c.SetWriteDeadline(time.Now().Add(dropTimeout))
	_, err := c.Write([]byte{Ready})
	_ = c.SetWriteDeadline(time.Time{})
	return err
}

// readEnd reads r to its end, refusing any data before it.
func readEnd(r io.Reader) error {
	var b [1]byte
	n, err := r.Read(b[:])
	for n == 0 && err == nil {
		n, err = r.Read(b[:])
	}
	if n > 0 {
		return errors.New("data where the end of the outer TLS was expected")
	}
	if err == io.EOF {
		return nil
	}
	return err
}

// Leave is the client's side of a tunnel request answered 101 (step 2):
// tc is the connection the request went over, br the reader its response
// was read through. It returns the raw connection once the server has
// written Ready.
func Leave(tc *tls.Conn, br *bufio.Reader) (net.Conn, error) {
	_ = tc.SetDeadline(time.Now().Add(dropTimeout))
	if br.Buffered() > 0 {
		return nil, errors.New("tunnel: the server sent bytes after its 101")
	}
	if err := readEnd(br); err != nil {
		return nil, fmt.Errorf("tunnel: waiting for the server's close_notify: %w", err)
	}
	if err := tc.CloseWrite(); err != nil {
		return nil, fmt.Errorf("tunnel: %w", err)
	}
	raw := Unwrap(tc.NetConn())
	_ = raw.SetDeadline(time.Now().Add(dropTimeout))
	var b [1]byte
	if _, err := io.ReadFull(raw, b[:]); err != nil {
		return nil, fmt.Errorf("tunnel: waiting for the server to join the other end: %w", err)
	}
	if b[0] != Ready {
		return nil, fmt.Errorf("tunnel: the server sent %#x where %#x (ready) was expected", b[0], Ready)
	}
	_ = raw.SetDeadline(time.Time{})
	return raw, nil
}

// Unwrap is the connection under wrappers that embed one (as
// batchconn.Conn does): the *net.TCPConn where there is one, so that
// io.Copy between two legs splices.
func Unwrap(c net.Conn) net.Conn {
	for {
		if _, ok := c.(*net.TCPConn); ok {
			return c
		}
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return c
		}
		c = u.NetConn()
	}
}

// Join copies bytes both ways between two legs until both directions
// have ended, passing each end's half-close on (a failed direction closes
// both legs); between TCP connections io.Copy splices. It closes both
// and returns the bytes carried a to b and b to a.
func Join(a, b net.Conn) (ab, ba int64) {
	done := make(chan int64, 1)
	go func() { done <- pass(b, a) }()
	ba = pass(a, b)
	ab = <-done
	a.Close()
	b.Close()
	return ab, ba
}

// pass copies src to dst: at src's end it half-closes dst, and when
// either fails it closes both.
func pass(dst, src net.Conn) int64 {
	n, err := io.Copy(dst, src)
	if err != nil {
		dst.Close()
		src.Close()
		return n
	}
	if cw, ok := dst.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
		return n
	}
	dst.Close()
	return n
}
