package containerd

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"
)

// The instance metadata endpoint inside the container.
//
// The runtime serves each instance's metadata (Spec.Metadata) inside the
// container's own network namespace, at MetadataAddr: an address it adds
// to the namespace's loopback interface, so that the workload's requests
// never leave its namespace. Nothing listens on the host for it, and no
// other namespace can reach that listener: another instance that connects
// to the same address reaches its own. The agent's process serves it (a
// socket belongs to the namespace it was made in, whichever thread serves
// it), so the endpoint needs neither a route to the host nor a rule that
// lets the instance reach the host. A new agent (after a restart) serves
// it again when the agent starts the instance again: the address and URL
// stay the same.

// MetadataAddr is where a workload reaches its metadata endpoint: the
// link-local address clouds use for it, on port 80.
var MetadataAddr = netip.AddrPortFrom(netip.AddrFrom4([4]byte{169, 254, 169, 254}), 80)

// MetadataURL implements runtime.MetadataServer: the URL of MetadataAddr.
func (r *Runtime) MetadataURL() string { return metadataURL() }

func metadataURL() string {
	if MetadataAddr.Port() == 80 {
		return "http://" + MetadataAddr.Addr().String()
	}
	return "http://" + MetadataAddr.String()
}

// metadataServer serves an instance's metadata handler inside the network
// namespace of process pid (the container's init).
func metadataServer(h http.Handler, pid uint32) (io.Closer, error) {
	if h == nil {
		return nil, errors.New("no metadata handler")
	}
	ln, err := listenInNetns("/proc/"+strconv.FormatUint(uint64(pid), 10)+"/ns/net", MetadataAddr)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second,
		IdleTimeout: time.Minute, MaxHeaderBytes: 16 << 10}
	lim := &limitListener{Listener: ln, slots: make(chan struct{}, MaxMetadataConns)}
	go func() { _ = srv.Serve(lim) }() // Serve returns ErrServerClosed on Close
	return closer{srv: srv, ln: ln}, nil
}

// MaxMetadataConns bounds the connections a workload may hold open to its
// metadata endpoint at once: each is a file descriptor of the agent's, so
// that a workload cannot starve the agent of them. One more is closed at
// once.
const MaxMetadataConns = 32

// limitListener closes the connections beyond its slots.
type limitListener struct {
	net.Listener
	slots chan struct{}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.slots <- struct{}{}:
			return &slotConn{Conn: c, free: func() { <-l.slots }}, nil
		default:
			c.Close()
		}
	}
}

// slotConn gives its slot back when closed.
type slotConn struct {
	net.Conn
	once sync.Once
	free func()
}

func (c *slotConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.free)
	return err
}

// closer closes a metadata server and its listener.
type closer struct {
	srv *http.Server
	ln  net.Listener
}

func (c closer) Close() error {
	err := c.srv.Close()
	_ = c.ln.Close() // closed by the server once it serves; not before
	return err
}
