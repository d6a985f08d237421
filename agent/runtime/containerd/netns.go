package containerd

import (
	"io"
	"net"
	"strconv"
	"sync"
	"time"
)

// The instance metadata endpoint inside the container.
//
// The agent serves each instance's metadata on the host's loopback
// (GPUCLOUD_METADATA_URL, http://127.0.0.1:N). A container has a network
// namespace of its own, whose loopback is not the host's, so the runtime
// listens on the same address inside the container's namespace and
// forwards each connection to the instance's own endpoint on the host: the
// workload uses the URL it was given, and reaches its own metadata and
// nothing else of the host. The instance network (Config.Network) will
// replace this with a link-local address.

// proxy forwards connections from a listener in a container's network
// namespace to an address in the host's.
type proxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]bool
	closed bool
}

// metadataProxy listens on the metadata URL's address inside the network
// namespace of process pid (the container's init) and forwards to the
// same address on the host.
func (r *Runtime) metadataProxy(metadataURL string, pid uint32) (io.Closer, error) {
	addr, err := metadataURLAddr(metadataURL)
	if err != nil {
		return nil, err
	}
	ln, err := listenInNetns("/proc/"+strconv.FormatUint(uint64(pid), 10)+"/ns/net", addr)
	if err != nil {
		return nil, err
	}
	p := &proxy{ln: ln, target: addr, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

func (p *proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.forward(c)
	}
}

// track records a connection to close with the proxy; false once closed.
func (p *proxy) track(c net.Conn, on bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on && p.closed {
		return false
	}
	if on {
		p.conns[c] = true
	} else {
		delete(p.conns, c)
	}
	return true
}

func (p *proxy) forward(c net.Conn) {
	defer p.wg.Done()
	defer c.Close()
	up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		return
	}
	defer up.Close()
	if !p.track(c, true) || !p.track(up, true) {
		return
	}
	defer p.track(c, false)
	defer p.track(up, false)
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go cp(up, c)
	go cp(c, up)
	<-done
	<-done
}

// Close stops listening and closes the open connections.
func (p *proxy) Close() error {
	err := p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}
