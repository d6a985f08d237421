package sshd

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
)

// directTCPIPReq is a direct-tcpip channel's extra data (RFC 4254, 7.2).
type directTCPIPReq struct {
	Host     string
	Port     uint32
	OrigHost string
	OrigPort uint32
}

// dialTimeout bounds the connection to a port in the instance.
const dialTimeout = 10 * time.Second

// loopbackNames are the destinations a forward may name: the instance
// itself. Another address would make the agent a proxy into the host's
// networks.
var loopbackNames = map[string]bool{"localhost": true, "127.0.0.1": true, "::1": true, "[::1]": true}

// directTCPIP serves ssh -L and VS Code Remote's forwards: a connection to
// a port inside the instance, bytes moved both ways until either side
// ends.
func (s *server) directTCPIP(ctx context.Context, nch ssh.NewChannel) {
	var r directTCPIPReq
	if err := ssh.Unmarshal(nch.ExtraData(), &r); err != nil {
		_ = nch.Reject(ssh.ConnectionFailed, "malformed direct-tcpip request")
		return
	}
	switch {
	case s.cfg.Dial == nil:
		_ = nch.Reject(ssh.Prohibited, "port forwarding is off")
		return
	case !loopbackNames[r.Host]:
		_ = nch.Reject(ssh.Prohibited, "forward to localhost:PORT, a port inside the instance")
		return
	case r.Port == 0 || r.Port > 65535:
		_ = nch.Reject(ssh.ConnectionFailed, fmt.Sprintf("port %d is out of range", r.Port))
		return
	}
	dctx, cancel := context.WithTimeout(ctx, dialTimeout)
	c, err := s.cfg.Dial(dctx, uint16(r.Port))
	cancel()
	if err != nil {
		_ = nch.Reject(ssh.ConnectionFailed, fmt.Sprintf("connect to port %d in the instance: %v", r.Port, err))
		return
	}
	defer c.Close()
	ch, reqs, err := nch.Accept()
	if err != nil {
		return
	}
	defer ch.Close()
	go ssh.DiscardRequests(reqs)
	stop := context.AfterFunc(ctx, func() { c.Close(); ch.Close() })
	defer stop()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(c, ch)
		closeWrite(c)
	}()
	go func() {
		defer wg.Done()
		_, _ = io.Copy(ch, c)
		_ = ch.CloseWrite()
	}()
	wg.Wait()
}

// closeWrite half-closes c where it can, else closes it.
func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}
