//go:build linux

package files

import (
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpucloud/gpucloud/agent"
	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/internal/batchconn"
	"github.com/gpucloud/gpucloud/internal/pki"
)

// Direct copies (docs/DATA.md, "Direct copies"): where the operator lets
// tenants reach the agents, the agent listens (--direct-listen) and serves
// the files protocol on connections that bring a grant the server signed
// (agentapi.DirectGrant), checked offline against the cloud's CA. The data
// then crosses one TLS connection, client to agent, with no server in its
// path.

// Limits of the direct listener.
const (
	// helloTimeout bounds a connection's handshake and grant.
	helloTimeout = 10 * time.Second
	// MaxDirectPerTenant is how many direct connections one tenant may
	// hold open on a host at once, whatever grants it has.
	MaxDirectPerTenant = 32
	// maxHandshakes bounds the connections not yet admitted (in their
	// handshake or hello): more are closed at once, so that a flood of
	// connections without grants holds no more than this.
	maxHandshakes = 128
)

// Direct serves direct sessions: copies and port forwards. Its zero
// value is not usable: set Handler, CA, HostID and Cert.
type Direct struct {
	// Handler serves each connection's files session.
	Handler *Handler
	// CA is the cloud's CA certificate, whose key signs grants.
	CA *x509.Certificate
	// HostID is this host's ID: a grant for another host is refused.
	HostID string
	// Cert is the listener's certificate (pki.SelfSigned); clients pin
	// its fingerprint, which the agent reports in its inventory.
	Cert tls.Certificate
	// Now is the clock grants' expiry is checked with (time.Now when nil).
	Now func() time.Time
	Log *slog.Logger
	// Reports takes each grant's report (agentapi.DirectReport) once the
	// grant has expired and its last connection closed, or when Serve
	// ends; Serve runs it. Nil: grants are only logged.
	Reports *Reporter
	// SweepEvery is how often expired grants are looked for (10 s when
	// zero; a grant whose last connection closes after it expired is
	// reported at once).
	SweepEvery time.Duration

	mu       sync.Mutex
	grants   map[string]*grantUse // by grant ID, until it expires
	byTenant map[string]int       // open connections
	pending  int                  // connections not yet admitted
}

// grantUse is what a grant has opened: the makings of its report.
type grantUse struct {
	token   string // the grant as presented, which the report carries
	conns   int    // open now
	opened  int    // admitted in all
	in, out int64  // bytes from and to the client, of connections closed
	first   time.Time
	last    time.Time
	expires time.Time
	cut     bool // the agent's stop ended a connection
}

// sweepEvery is how often the listener looks for grants to report, by
// default: those expired whose connections have all closed.
const sweepEvery = 10 * time.Second

// Serve accepts connections on ln until ctx ends or ln fails, serving
// each on its own goroutine; it waits for them before it returns. With
// no listener (ln nil: an agent that takes tunnelled sessions only) it
// runs until ctx ends, sweeping and reporting grants.
func (d *Direct) Serve(ctx context.Context, ln net.Listener) error {
	var wg sync.WaitGroup
	// Every grant is reported once its connections have ended.
	defer d.reportAll()
	defer wg.Wait()
	if ln != nil {
		stop := context.AfterFunc(ctx, func() { ln.Close() })
		defer stop()
	}
	// The sweeper and the reporter stop with Serve, whatever ends it.
	bg, cancel := context.WithCancel(ctx)
	defer cancel()
	if d.Reports != nil {
		wg.Add(1)
		go func() { defer wg.Done(); d.Reports.Run(bg) }()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		every := d.SweepEvery
		if every <= 0 {
			every = sweepEvery
		}
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-bg.Done():
				return
			case <-t.C:
				d.report(d.sweep(d.now(), false))
			}
		}
	}()
	if ln == nil {
		<-ctx.Done()
		return nil
	}
	cfg := d.tlsConfig()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			// Out of file descriptors, or a connection reset before it
			// was accepted: the listener itself is still good.
			d.log().Warn("direct files listener: accept failed", "err", err)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		if !d.startHandshake() {
			c.Close()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.serveConn(ctx, batchconn.Server(c, cfg))
		}()
	}
}

// tlsConfig is the direct sessions' TLS: 1.3, the listener's
// certificate. The client's certificate is asked for, not checked against
// any CA: the grant names the one it must be (DirectGrant.ClientKey), and
// the handshake proves the client holds its key.
func (d *Direct) tlsConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{d.Cert}, ClientAuth: tls.RequestClientCert}
}

// startHandshake counts a connection not yet admitted, or answers false
// when maxHandshakes are.
func (d *Direct) startHandshake() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.pending >= maxHandshakes {
		return false
	}
	d.pending++
	return true
}

// ServeTunnel serves one direct session that came through the server
// (agentapi.SessionTunnel): raw is the tunnel's connection, on which the
// client's TLS handshake and grant follow as on the listener's. It
// returns when the session ends.
func (d *Direct) ServeTunnel(ctx context.Context, raw net.Conn) {
	if !d.startHandshake() {
		raw.Close()
		return
	}
	d.serveConn(ctx, batchconn.Server(raw, d.tlsConfig()))
}

func (d *Direct) log() *slog.Logger {
	if d.Log == nil {
		return slog.Default()
	}
	return d.Log
}

func (d *Direct) now() time.Time {
	if d.Now == nil {
		return time.Now()
	}
	return d.Now()
}

// serveConn checks one connection's grant and serves its session.
func (d *Direct) serveConn(ctx context.Context, c *batchconn.Gathered) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(helloTimeout))
	g, err := d.admit(c)
	d.mu.Lock()
	d.pending--
	d.mu.Unlock()
	if err != nil {
		fe := &agentapi.FileError{Code: agentapi.FilePermission, Message: err.Error()}
		d.log().Info("direct files connection refused", "remote", c.RemoteAddr().String(), "err", err)
		_ = agentapi.WriteDirectLine(c, agentapi.DirectWelcome{Error: fe})
		return
	}
	var n counted
	// A connection still open when ctx ends is cut by the agent's stop.
	defer func() { d.leave(g, &n, ctx.Err() != nil) }()
	if g.Kind == agentapi.SessionForward {
		d.serveForward(ctx, c, g, &n)
		return
	}
	if err := agentapi.WriteDirectLine(c, agentapi.DirectWelcome{}); err != nil {
		return
	}
	_ = c.SetDeadline(time.Time{})
	if err := d.Handler.serveTarget(ctx, g.SessionID, g.Actor, g.Target, &countingConn{ReadWriteCloser: c, n: &n}); err != nil {
		d.log().Info("direct files session ended", "session", g.SessionID, "grant", g.ID, "err", err)
	}
}

// serveForward connects to the grant's port inside its instance, answers
// the client (with why, when it cannot), and copies bytes both ways until
// both sides have ended, each end's close passed on as a half-close.
func (d *Direct) serveForward(ctx context.Context, c *batchconn.Gathered, g *agentapi.DirectGrant, cnt *counted) {
	if d.Handler.Dialer == nil {
		_ = agentapi.WriteDirectLine(c, agentapi.DirectWelcome{Error: &agentapi.FileError{Code: agentapi.FileInvalid,
			Message: "this host's runtime cannot forward ports"}})
		return
	}
	dctx, cancel := context.WithTimeout(ctx, helloTimeout)
	tcp, err := d.Handler.Dialer.Dial(dctx, g.Target.InstanceID, g.Port)
	cancel()
	if err != nil {
		_ = agentapi.WriteDirectLine(c, agentapi.DirectWelcome{Error: &agentapi.FileError{Code: agentapi.FileNotFound,
			Message: fmt.Sprintf("connecting to port %d in instance %s failed: %v", g.Port, g.Target.InstanceID, err)}})
		return
	}
	defer tcp.Close()
	if err := agentapi.WriteDirectLine(c, agentapi.DirectWelcome{}); err != nil {
		return
	}
	_ = c.SetDeadline(time.Time{})
	stop := context.AfterFunc(ctx, func() { c.Close(); tcp.Close() })
	defer stop()
	done := make(chan struct{}, 2)
	go func() {
		// The instance's bytes out, 256 KiB a write (one system call
		// each, gathered).
		n, _ := io.CopyBuffer(c, struct{ io.Reader }{tcp}, make([]byte, 256<<10)) // the buffer, not tcp's WriteTo
		cnt.out.Add(n)
		_ = c.CloseWrite()
		done <- struct{}{}
	}()
	go func() {
		// The client's bytes in, as many records as have arrived a
		// write.
		buf := make([]byte, 256<<10)
		for {
			n, err := c.ReadBatch(buf)
			cnt.in.Add(int64(n))
			if n > 0 {
				if _, werr := tcp.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		if cw, ok := tcp.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			tcp.Close()
		}
		done <- struct{}{}
	}()
	<-done
	<-done
}

// admit reads the hello and checks its grant: the CA's signature, this
// host, not expired, under its connections and its tenant's.
func (d *Direct) admit(c *batchconn.Gathered) (*agentapi.DirectGrant, error) {
	g, token, err := d.check(c)
	if err != nil {
		return nil, err
	}
	return g, d.count(g, token)
}

// check reads the hello and checks its grant: the CA's signature, this
// host, a known kind, not expired. It answers the grant and its token.
func (d *Direct) check(c *batchconn.Gathered) (*agentapi.DirectGrant, string, error) {
	if err := c.Handshake(); err != nil {
		return nil, "", fmt.Errorf("TLS handshake: %w", err)
	}
	var hello agentapi.DirectHello
	if err := agentapi.ReadDirectLine(c, &hello); err != nil {
		return nil, "", fmt.Errorf("reading the hello: %w", err)
	}
	payload, err := pki.VerifyToken(d.CA, agentapi.DirectGrantPurpose, hello.Grant)
	if err != nil {
		return nil, "", fmt.Errorf("grant refused: %w", err)
	}
	var g agentapi.DirectGrant
	if err := json.Unmarshal(payload, &g); err != nil {
		return nil, "", fmt.Errorf("grant refused: its payload: %w", err)
	}
	if g.HostID != d.HostID {
		return nil, "", fmt.Errorf("grant refused: it is for host %s, and this is %s", g.HostID, d.HostID)
	}
	if g.ID == "" || g.TenantID == "" || g.Target.VolumeID == "" && g.Target.InstanceID == "" {
		return nil, "", errors.New("grant refused: it names no grant, tenant or target")
	}
	switch g.Kind {
	case agentapi.SessionFiles:
	case agentapi.SessionForward:
		if g.Target.InstanceID == "" || g.Port < 1 || g.Port > 65535 {
			return nil, "", errors.New("grant refused: a port forward's needs an instance and a port")
		}
	default:
		return nil, "", fmt.Errorf("grant refused: it is for sessions of kind %q, which this agent does not take directly", g.Kind)
	}
	if exp := time.Unix(g.Expires, 0); !d.now().Before(exp) {
		return nil, "", fmt.Errorf("grant refused: it expired at %s (ask for another)", exp.UTC().Format(time.RFC3339))
	}
	if g.ClientKey == "" {
		return nil, "", errors.New("grant refused: it is bound to no client key")
	}
	if peer := c.ConnectionState().PeerCertificates; len(peer) == 0 || pki.Fingerprint(peer[0]) != g.ClientKey {
		return nil, "", errors.New("grant refused: this connection does not hold the key the grant was made for (a grant works only for the client that asked for it)")
	}
	return &g, hello.Grant, nil
}

// count admits a connection of grant g (presented as token) under its
// grant's limit and its tenant's.
func (d *Direct) count(g *agentapi.DirectGrant, token string) error {
	now := d.now()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.grants == nil {
		d.grants, d.byTenant = map[string]*grantUse{}, map[string]int{}
	}
	u := d.grants[g.ID]
	if u == nil {
		u = &grantUse{token: token, expires: time.Unix(g.Expires, 0)}
		d.grants[g.ID] = u
	}
	if u.conns >= agentapi.MaxDirectConns {
		return fmt.Errorf("grant refused: it has %d connections open, the most one grant opens", u.conns)
	}
	if d.byTenant[g.TenantID] >= MaxDirectPerTenant {
		return fmt.Errorf("grant refused: the tenant has %d direct connections open on this host, the limit", d.byTenant[g.TenantID])
	}
	if u.opened == 0 {
		u.first = now
	}
	u.conns++
	u.opened++
	d.byTenant[g.TenantID]++
	return nil
}

// leave ends a connection of g, adding what it carried (n) to its grant's
// figures (and whether the agent's stop cut it), and reports the grant
// when it was the last connection of an expired grant.
func (d *Direct) leave(g *agentapi.DirectGrant, n *counted, cut bool) {
	now := d.now()
	d.mu.Lock()
	if u := d.grants[g.ID]; u != nil {
		u.conns--
		u.in += n.in.Load()
		u.out += n.out.Load()
		u.last = now
		u.cut = u.cut || cut
	}
	if d.byTenant[g.TenantID]--; d.byTenant[g.TenantID] <= 0 {
		delete(d.byTenant, g.TenantID)
	}
	d.mu.Unlock()
	d.report(d.sweep(now, false))
}

// sweep takes out the grants that are done: expired with no connection
// open (every grant, when all is set, as Serve ends), and answers the
// reports of those that opened any.
func (d *Direct) sweep(now time.Time, all bool) []agentapi.DirectReport {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []agentapi.DirectReport
	for id, u := range d.grants {
		if !all && (u.conns > 0 || now.Before(u.expires)) {
			continue
		}
		delete(d.grants, id)
		if u.opened == 0 {
			continue
		}
		last := u.last
		if last.Before(u.first) {
			last = u.first
		}
		out = append(out, agentapi.DirectReport{Grant: u.token, Connections: u.opened, BytesIn: u.in, BytesOut: u.out,
			First: u.first, Last: last, Cut: u.cut})
	}
	return out
}

// report hands reports to the reporter, and logs them.
func (d *Direct) report(reports []agentapi.DirectReport) {
	for _, r := range reports {
		d.log().Info("direct grant done", "connections", r.Connections, "bytes_in", r.BytesIn, "bytes_out", r.BytesOut,
			"duration", r.Last.Sub(r.First), "cut", r.Cut)
	}
	if d.Reports != nil {
		d.Reports.Add(reports...)
	}
}

// reportAll reports every grant as Serve ends, expired or not.
func (d *Direct) reportAll() { d.report(d.sweep(d.now(), true)) }

// counted is what one connection carried.
type counted struct{ in, out atomic.Int64 }

// countingConn counts a files session's bytes.
type countingConn struct {
	io.ReadWriteCloser
	n *counted
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.ReadWriteCloser.Read(p)
	c.n.in.Add(int64(n))
	return n, err
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.ReadWriteCloser.Write(p)
	c.n.out.Add(int64(n))
	return n, err
}

// ListenDirect opens the direct-session listener of host hostID at listen
// (host:port; port 0 picks one), trusting grants signed by the CA in
// caPEM, with a self-signed certificate: the one kept in keyDir
// (direct.crt and direct.key, 0600) while it has more than a month to
// live, else a fresh one kept there (none kept when keyDir is empty), so
// that its fingerprint, which the inventory reports and clients pin,
// stays the same across restarts. advertise is where clients
// reach it (the listener's own address when empty, which must then name
// a host, not every address). It returns the server, its listener (to
// Serve), and the address and fingerprint the agent reports
// (agent.Config.DirectAddr and DirectFingerprint).
func ListenDirect(listen, advertise, hostID string, caPEM []byte, keyDir string, h *Handler, log *slog.Logger) (d *Direct, ln net.Listener, addr, fingerprint string, err error) {
	d, fingerprint, err = NewDirect(hostID, caPEM, keyDir, h, log)
	if err != nil {
		return nil, nil, "", "", err
	}
	ln, err = net.Listen("tcp", listen)
	if err != nil {
		return nil, nil, "", "", fmt.Errorf("direct sessions: --direct-listen %s: %w", listen, err)
	}
	addr = advertise
	if addr == "" {
		addr = ln.Addr().String()
		if ap, perr := netip.ParseAddrPort(addr); perr == nil && ap.Addr().IsUnspecified() {
			ln.Close()
			return nil, nil, "", "", fmt.Errorf("direct sessions: --direct-listen %s listens on every address: say where clients reach it with --direct-advertise HOST:PORT", listen)
		}
	}
	return d, ln, addr, fingerprint, nil
}

// NewDirect is ListenDirect without a listener: the server of the direct
// sessions that come through the server's tunnels (Direct.ServeTunnel;
// Serve it with a nil listener for its grants' reports), and the
// fingerprint the agent reports (agent.Config.DirectFingerprint).
func NewDirect(hostID string, caPEM []byte, keyDir string, h *Handler, log *slog.Logger) (*Direct, string, error) {
	if hostID == "" {
		return nil, "", errors.New("direct sessions: the agent's host ID is unknown (it has not joined)")
	}
	if len(caPEM) == 0 {
		return nil, "", errors.New("direct sessions need the cloud's CA to check grants with, which this agent does not keep " +
			"(it keeps it when its join token names the CA's fingerprint, as the tokens of a TLS server do)")
	}
	ca, err := pki.ParseCert(caPEM)
	if err != nil {
		return nil, "", fmt.Errorf("direct sessions: the cloud's CA: %w", err)
	}
	cert, fp, err := listenerCert(keyDir, hostID, time.Now())
	if err != nil {
		return nil, "", fmt.Errorf("direct sessions: the listener's certificate: %w", err)
	}
	return &Direct{Handler: h, CA: ca, HostID: hostID, Cert: cert, Log: log}, fp, nil
}

// The listener's kept certificate and key, in the agent's data directory.
const (
	directCertFile = "direct.crt"
	directKeyFile  = "direct.key"
	// directRenew is how long a kept certificate must still live to be
	// used again.
	directRenew = 30 * 24 * time.Hour
)

// listenerCert is the kept certificate of host hostID's listener in dir,
// or a new one, kept there (dir "": a new one, not kept).
func listenerCert(dir, hostID string, now time.Time) (tls.Certificate, string, error) {
	name := "gpucloud direct " + hostID
	if dir == "" {
		return pki.SelfSigned(name, now, pki.ClientLifetime)
	}
	certPath, keyPath := filepath.Join(dir, directCertFile), filepath.Join(dir, directKeyFile)
	if certPEM, err := os.ReadFile(certPath); err == nil {
		if keyPEM, err := os.ReadFile(keyPath); err == nil {
			c, cerr := pki.ParseCert(certPEM)
			pair, perr := tls.X509KeyPair(certPEM, keyPEM)
			if cerr == nil && perr == nil && c.Subject.CommonName == name && now.Add(directRenew).Before(c.NotAfter) {
				pair.Leaf = c
				return pair, pki.Fingerprint(c), nil
			}
		}
	}
	cert, fp, err := pki.SelfSigned(name, now, pki.ClientLifetime)
	if err != nil {
		return tls.Certificate{}, "", err
	}
	keyPEM, err := pki.EncodeKey(cert.PrivateKey.(crypto.Signer))
	if err != nil {
		return tls.Certificate{}, "", err
	}
	// The key first: a certificate is only ever beside its own key.
	if err := agent.WriteSecret(keyPath, keyPEM); err != nil {
		return tls.Certificate{}, "", err
	}
	if err := agent.WriteSecret(certPath, pki.EncodeCert(cert.Leaf)); err != nil {
		return tls.Certificate{}, "", err
	}
	return cert, fp, nil
}
