package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"sync"

	"github.com/coder/websocket"
	"github.com/gpucloud/gpucloud/internal/rest"
	"github.com/gpucloud/gpucloud/internal/stream"
)

// ExecOptions is an exec session (docs/ACCESS.md).
type ExecOptions struct {
	// Command is the command line, one element per argument.
	Command []string
	// TTY runs it on a terminal of Size (0: 80x24), resized by each value
	// of Resize; its output all comes on Stdout.
	TTY    bool
	Size   stream.Size
	Resize <-chan stream.Size
	// Stdin, when not nil, is sent as the command's input; its EOF ends
	// the input.
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
}

// Exec runs a command in a running instance and returns how it ended:
// the exit status the instance's agent sent, once every byte of its
// output is written. A session refused before it starts (another
// tenant's instance, a stopped one, the limit of sessions) is a
// *cloud.Error as any call's; a session that ends without a status is an
// error that says why.
func (c *Client) Exec(ctx context.Context, id string, o ExecOptions) (*stream.ExitStatus, error) {
	q := url.Values{"command": o.Command}
	if o.TTY {
		q.Set("tty", "1")
	}
	if o.Stdin != nil {
		q.Set("stdin", "1")
	}
	if o.Size.Cols > 0 && o.Size.Rows > 0 {
		q.Set("cols", strconv.Itoa(int(o.Size.Cols)))
		q.Set("rows", strconv.Itoa(int(o.Size.Rows)))
	}
	ws, err := c.r.DialWebSocket(ctx, rest.PathOf("instances", id, "exec")+"?"+q.Encode(), []string{stream.Subprotocol})
	if err != nil {
		return nil, err
	}
	defer ws.CloseNow()
	s := stream.NewConn(ws)
	var copies sync.WaitGroup
	for ch, w := range map[byte]io.Writer{stream.Stdout: o.Stdout, stream.Stderr: o.Stderr} {
		r := s.Reader(ch)
		if w == nil {
			w = io.Discard
		}
		copies.Go(func() { _, _ = io.Copy(w, r) })
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { _ = s.Run(runCtx) }()
	if o.Stdin != nil {
		// Not waited for: a terminal's reader blocks until the next key.
		go func() {
			w := s.Writer(runCtx, stream.Stdin)
			if _, err := io.Copy(w, o.Stdin); err == nil {
				_ = w.Close()
			}
		}()
	}
	if o.Resize != nil {
		go func() {
			for {
				select {
				case sz := <-o.Resize:
					_ = s.SendResize(runCtx, sz)
				case <-s.Done():
					return
				}
			}
		}()
	}
	<-s.Done()
	copies.Wait()
	if st, ok := s.Status(); ok {
		ws.Close(websocket.StatusNormalClosure, "")
		return &st, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return nil, sessionEnded(s.Err())
}

// sessionEnded says why a session ended without an exit status.
func sessionEnded(err error) error {
	var ce websocket.CloseError
	if errors.As(err, &ce) && ce.Reason != "" {
		return fmt.Errorf("the session ended without an exit status: %s", ce.Reason)
	}
	return fmt.Errorf("the session ended without an exit status: %w", err)
}

// PortForward opens one TCP connection to port inside a running
// instance, through the server and the instance's host agent. Each call
// is one connection; close it when done.
func (c *Client) PortForward(ctx context.Context, id string, port int) (net.Conn, error) {
	ws, err := c.r.DialWebSocket(ctx, rest.PathOf("instances", id, "port-forward")+"?port="+strconv.Itoa(port), nil)
	if err != nil {
		return nil, err
	}
	// The connection outlives ctx, which bounds the dial only.
	return &chunkedConn{Conn: websocket.NetConn(context.Background(), ws, websocket.MessageBinary)}, nil
}

// chunkedConn writes at most forwardChunk bytes per message, so that no
// message is held whole anywhere in memory, while each is large enough
// that its frames and TLS records are few.
type chunkedConn struct{ net.Conn }

const forwardChunk = 256 << 10

func (c *chunkedConn) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k := min(len(p), forwardChunk)
		m, err := c.Conn.Write(p[:k])
		n += m
		if err != nil {
			return n, err
		}
		p = p[k:]
	}
	return n, nil
}

// PortURL is the address at which the server proxies HTTP to the
// published port of instance id (docs/ACCESS.md, "Published HTTP ports"),
// with its trailing slash; requests to it carry the client's bearer token
// (Authorization: Bearer ...).
func (c *Client) PortURL(id string, port int) string {
	return c.r.URL(rest.PathOf("instances", id, "ports", strconv.Itoa(port)) + "/")
}
