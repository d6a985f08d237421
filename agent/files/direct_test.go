//go:build linux

package files

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/internal/filexfer"
	"github.com/gpucloud/gpucloud/internal/pki"
)

// directServer runs a direct listener of host "h-1" trusting ca, over
// volumes in a temporary directory, with the clock now.
func directServer(t *testing.T, ca *pki.CA, now func() time.Time) (addr, fp, vols string) {
	t.Helper()
	d, ln, addr, fp, vols := directListener(t, ca)
	d.Now = now
	done := make(chan error, 1)
	go func() { done <- d.Serve(t.Context(), ln) }()
	t.Cleanup(func() {
		ln.Close()
		<-done
	})
	return addr, fp, vols
}

// directListener opens (and does not serve) a direct listener of host
// "h-1" trusting ca, over volumes in a temporary directory.
func directListener(t *testing.T, ca *pki.CA) (d *Direct, ln net.Listener, addr, fp, vols string) {
	t.Helper()
	vols = t.TempDir()
	h := &Handler{VolumeDir: func(id string, _ bool, _ int64) (string, func(), error) {
		d := filepath.Join(vols, id)
		return d, func() {}, os.MkdirAll(d, 0o750)
	}}
	d, ln, addr, fp, err := ListenDirect("127.0.0.1:0", "", "h-1", pki.EncodeCert(ca.Cert), "", h, nil)
	if err != nil {
		t.Fatal(err)
	}
	return d, ln, addr, fp, vols
}

// The tests' client key: the certificate a test's client presents, and
// its fingerprint, which grantFor binds grants to.
var (
	clientOnce sync.Once
	clientCert tls.Certificate
	clientKey  string
)

func testClient(t *testing.T) (tls.Certificate, string) {
	t.Helper()
	var err error
	clientOnce.Do(func() { clientCert, clientKey, err = pki.SelfSigned("test client", time.Now(), time.Hour) })
	if err != nil {
		t.Fatal(err)
	}
	return clientCert, clientKey
}

// dialDirect opens a direct connection with grant tok, presenting the
// tests' client certificate, returning it with the agent's welcome.
func dialDirect(t *testing.T, addr, fp, tok string) (*tls.Conn, agentapi.DirectWelcome) {
	t.Helper()
	cert, _ := testClient(t)
	return dialDirectAs(t, addr, fp, tok, []tls.Certificate{cert})
}

// dialDirectAs is dialDirect presenting certs.
func dialDirectAs(t *testing.T, addr, fp, tok string, certs []tls.Certificate) (*tls.Conn, agentapi.DirectWelcome) {
	t.Helper()
	cfg, err := pki.PinnedLeafConfig(fp)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Certificates = certs
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if err := agentapi.WriteDirectLine(c, agentapi.DirectHello{Grant: tok}); err != nil {
		t.Fatal(err)
	}
	var w agentapi.DirectWelcome
	if err := agentapi.ReadDirectLine(c, &w); err != nil {
		t.Fatalf("welcome: %v", err)
	}
	c.SetDeadline(time.Time{})
	return c, w
}

// grantFor signs g with ca, bound to the tests' client key unless it
// names another.
func grantFor(t *testing.T, ca *pki.CA, g agentapi.DirectGrant) string {
	t.Helper()
	if g.ClientKey == "" {
		_, g.ClientKey = testClient(t)
	}
	return signGrant(t, ca, g)
}

// signGrant signs g with ca as it is.
func signGrant(t *testing.T, ca *pki.CA, g agentapi.DirectGrant) string {
	t.Helper()
	b, _ := json.Marshal(g)
	tok, err := ca.SignToken(agentapi.DirectGrantPurpose, b)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestDirectGrants: what the direct listener admits and what it refuses,
// and a copy over an admitted connection.
func TestDirectGrants(t *testing.T) {
	ca, other := mustCA(t), mustCA(t)
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	addr, fp, vols := directServer(t, ca, func() time.Time { return now })
	good := agentapi.DirectGrant{ID: "fg-1", Kind: agentapi.SessionFiles, HostID: "h-1", TenantID: "tn-a", Actor: "u-a", SessionID: "ses-1",
		Target: agentapi.FilesTarget{VolumeID: "v-1"}, Expires: now.Add(time.Minute).Unix()}
	with := func(f func(*agentapi.DirectGrant)) agentapi.DirectGrant { g := good; f(&g); return g }

	t.Run("a copy", func(t *testing.T) {
		c, w := dialDirect(t, addr, fp, grantFor(t, ca, good))
		if w.Error != nil {
			t.Fatalf("refused: %v", w.Error)
		}
		data := bytes.Repeat([]byte("direct "), 100000)
		fc := filexfer.NewClient(c)
		if _, err := fc.Put("/x.bin", bytes.NewReader(data), 0, int64(len(data)), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(vols, "v-1", "x.bin"))
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("the file on the host: %d bytes, %v", len(got), err)
		}
	})

	t.Run("a client that holds no key, or another", func(t *testing.T) {
		other, _, err := pki.SelfSigned("another client", now, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		for _, certs := range [][]tls.Certificate{nil, {other}} {
			_, w := dialDirectAs(t, addr, fp, grantFor(t, ca, good), certs)
			if w.Error == nil || !strings.Contains(w.Error.Message, "does not hold the key") {
				t.Errorf("%d certificates, not the grant's: welcome %+v", len(certs), w.Error)
			}
		}
	})

	for _, tt := range []struct {
		desc, tok, want string
	}{
		{"another host's", grantFor(t, ca, with(func(g *agentapi.DirectGrant) { g.HostID = "h-2" })), "for host h-2"},
		{"expired", grantFor(t, ca, with(func(g *agentapi.DirectGrant) { g.Expires = now.Unix() })), "expired"},
		{"signed by another CA", grantFor(t, other, good), "not the cloud CA's"},
		{"signed for another purpose", func() string {
			b, _ := json.Marshal(good)
			tok, _ := ca.SignToken("something else", b)
			return tok
		}(), "not the cloud CA's"},
		{"without a target", grantFor(t, ca, with(func(g *agentapi.DirectGrant) { g.Target = agentapi.FilesTarget{} })), "no grant, tenant or target"},
		{"without a tenant", grantFor(t, ca, with(func(g *agentapi.DirectGrant) { g.TenantID = "" })), "no grant, tenant or target"},
		{"not a token", "hello", "grant refused"},
		{"of another kind", grantFor(t, ca, with(func(g *agentapi.DirectGrant) { g.Kind = agentapi.SessionExec })), "of kind \"exec\""},
		{"without a kind", grantFor(t, ca, with(func(g *agentapi.DirectGrant) { g.Kind = "" })), "of kind \"\""},
		{"a forward without a port", grantFor(t, ca, with(func(g *agentapi.DirectGrant) {
			g.Kind, g.Target = agentapi.SessionForward, agentapi.FilesTarget{InstanceID: "i-1"}
		})), "needs an instance and a port"},
		{"bound to no key", signGrant(t, ca, good), "bound to no client key"},
		{"bound to another client's key", grantFor(t, ca, with(func(g *agentapi.DirectGrant) { g.ClientKey = "sha256:" + strings.Repeat("ab", 32) })),
			"does not hold the key"},
	} {
		t.Run(tt.desc, func(t *testing.T) {
			c, w := dialDirect(t, addr, fp, tt.tok)
			if w.Error == nil || w.Error.Code != agentapi.FilePermission || !strings.Contains(w.Error.Message, tt.want) {
				t.Fatalf("welcome %+v; want permission refused, saying %q", w.Error, tt.want)
			}
			// And the connection is closed.
			if _, err := c.Read(make([]byte, 1)); err == nil {
				t.Error("the connection stayed open")
			}
		})
	}

	t.Run("connections per grant and per tenant", func(t *testing.T) {
		g := with(func(g *agentapi.DirectGrant) { g.ID = "fg-many" })
		var open []*tls.Conn
		for range agentapi.MaxDirectConns {
			c, w := dialDirect(t, addr, fp, grantFor(t, ca, g))
			if w.Error != nil {
				t.Fatalf("connection %d refused: %v", len(open)+1, w.Error)
			}
			open = append(open, c)
		}
		if _, w := dialDirect(t, addr, fp, grantFor(t, ca, g)); w.Error == nil || !strings.Contains(w.Error.Message, "the most one grant opens") {
			t.Fatalf("connection %d of one grant: %+v; want refused", agentapi.MaxDirectConns+1, w.Error)
		}
		// Up to the tenant's limit with other grants, then refused.
		for i := agentapi.MaxDirectConns; i < MaxDirectPerTenant; i++ {
			c, w := dialDirect(t, addr, fp, grantFor(t, ca, with(func(g *agentapi.DirectGrant) { g.ID = "fg-more" + string(rune('a'+i/agentapi.MaxDirectConns)) })))
			if w.Error != nil {
				t.Fatalf("tenant connection %d refused: %v", i+1, w.Error)
			}
			open = append(open, c)
		}
		if _, w := dialDirect(t, addr, fp, grantFor(t, ca, with(func(g *agentapi.DirectGrant) { g.ID = "fg-last" }))); w.Error == nil || !strings.Contains(w.Error.Message, "the limit") {
			t.Fatalf("tenant connection %d: %+v; want refused", MaxDirectPerTenant+1, w.Error)
		}
		// Another tenant is not held up by this one's.
		if _, w := dialDirect(t, addr, fp, grantFor(t, ca, with(func(g *agentapi.DirectGrant) { g.ID = "fg-b"; g.TenantID = "tn-b" }))); w.Error != nil {
			t.Fatalf("another tenant refused: %v", w.Error)
		}
		// A closed connection frees its place.
		open[0].Close()
		deadline := time.Now().Add(5 * time.Second)
		for {
			_, w := dialDirect(t, addr, fp, grantFor(t, ca, g))
			if w.Error == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("after a close, still refused: %v", w.Error)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

// fakeDialer dials ports of "i-1" on loopback.
type fakeDialer struct{}

func (fakeDialer) Dial(ctx context.Context, id string, port int) (net.Conn, error) {
	if id != "i-1" {
		return nil, errors.New("instance " + id + " is not running here")
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
}

// TestDirectForward: a forward grant's connection reaches the port inside
// the instance, both ways, each side's end passed on as a half-close; a
// port nothing listens on, and a runtime that cannot dial, are answered
// with why.
func TestDirectForward(t *testing.T) {
	ca := mustCA(t)
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				// Echo everything, upper-cased, until the client's
				// half-close, then a last line.
				b, _ := io.ReadAll(c)
				c.Write(bytes.ToUpper(b))
				c.Write([]byte("|end"))
			}()
		}
	}()
	port := echo.Addr().(*net.TCPAddr).Port
	listen := func(h *Handler) (string, string) {
		d, ln, addr, fp, err := ListenDirect("127.0.0.1:0", "", "h-1", pki.EncodeCert(ca.Cert), "", h, nil)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- d.Serve(t.Context(), ln) }()
		t.Cleanup(func() { ln.Close(); <-done })
		return addr, fp
	}
	addr, fp := listen(&Handler{Dialer: fakeDialer{}})
	grant := func(id string, port int) string {
		return grantFor(t, ca, agentapi.DirectGrant{ID: "fg-fw", Kind: agentapi.SessionForward, HostID: "h-1", TenantID: "tn-a",
			Target: agentapi.FilesTarget{InstanceID: id}, Port: port, Expires: time.Now().Add(time.Minute).Unix()})
	}

	c, w := dialDirect(t, addr, fp, grant("i-1", port))
	if w.Error != nil {
		t.Fatalf("refused: %v", w.Error)
	}
	payload := bytes.Repeat([]byte("forwarded "), 200000) // 2 MB: many records
	go func() {
		c.Write(payload)
		c.CloseWrite()
	}()
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	if want := append(bytes.ToUpper(payload), "|end"...); !bytes.Equal(got, want) {
		t.Fatalf("got %d bytes back, want %d", len(got), len(want))
	}

	// A port nothing listens on.
	closed, _ := net.Listen("tcp", "127.0.0.1:0")
	closedPort := closed.Addr().(*net.TCPAddr).Port
	closed.Close()
	if _, w := dialDirect(t, addr, fp, grant("i-1", closedPort)); w.Error == nil || !strings.Contains(w.Error.Message, "connecting to port") {
		t.Errorf("a closed port: %+v", w.Error)
	}
	// An instance this host does not run.
	if _, w := dialDirect(t, addr, fp, grant("i-2", port)); w.Error == nil || !strings.Contains(w.Error.Message, "not running here") {
		t.Errorf("another instance: %+v", w.Error)
	}
	// A runtime that cannot dial.
	addr, fp = listen(&Handler{})
	if _, w := dialDirect(t, addr, fp, grant("i-1", port)); w.Error == nil || !strings.Contains(w.Error.Message, "cannot forward ports") {
		t.Errorf("no dialer: %+v", w.Error)
	}
}

// TestDirectHandshakeFlood: connections that never finish their
// handshake hold at most maxHandshakes places; the next is closed at once,
// and once they go a granted connection is admitted again.
func TestDirectHandshakeFlood(t *testing.T) {
	ca := mustCA(t)
	addr, fp, _ := directServer(t, ca, time.Now)
	var idle []net.Conn
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	for range maxHandshakes {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
	}
	cfg, err := pki.PinnedLeafConfig(fp)
	if err != nil {
		t.Fatal(err)
	}
	tok := grantFor(t, ca, agentapi.DirectGrant{ID: "fg-1", Kind: agentapi.SessionFiles, HostID: "h-1", TenantID: "tn-a", Target: agentapi.FilesTarget{VolumeID: "v-1"},
		Expires: time.Now().Add(time.Minute).Unix()})
	// The listener takes the idle ones in its own time: wait until a new
	// one is turned away.
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr, cfg.Clone())
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatalf("a handshake succeeded with %d connections pending", maxHandshakes)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, c := range idle {
		c.Close()
	}
	idle = nil
	for {
		_, w := dialDirect(t, addr, fp, tok)
		if w.Error == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the flood left, still refused: %v", w.Error)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestListenDirectRefuses: no host ID, no CA, or a listen address on
// every interface without an advertised one.
func TestListenDirectRefuses(t *testing.T) {
	caPEM := pki.EncodeCert(mustCA(t).Cert)
	for _, tt := range []struct {
		desc, listen, host string
		ca                 []byte
		want               string
	}{
		{"no host", "127.0.0.1:0", "", caPEM, "host ID is unknown"},
		{"no CA", "127.0.0.1:0", "h-1", nil, "need the cloud's CA"},
		{"every address", "0.0.0.0:0", "h-1", caPEM, "--direct-advertise"},
	} {
		t.Run(tt.desc, func(t *testing.T) {
			_, ln, _, _, err := ListenDirect(tt.listen, "", tt.host, tt.ca, "", &Handler{}, nil)
			if ln != nil {
				ln.Close()
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("ListenDirect: %v; want %q", err, tt.want)
			}
		})
	}
}

func mustCA(t *testing.T) *pki.CA {
	t.Helper()
	ca, err := pki.NewCA("test cloud", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// TestListenerCertKept: the listener's certificate is kept in the data
// directory (0600) and used again while it has more than a month to
// live, so that its fingerprint survives a restart; one near its end,
// another host's or a damaged one is replaced.
func TestListenerCertKept(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	_, fp, err := listenerCert(dir, "h-1", now)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{directCertFile, directKeyFile} {
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v", f, fi, err)
		}
	}
	if _, again, err := listenerCert(dir, "h-1", now.Add(24*time.Hour)); err != nil || again != fp {
		t.Fatalf("after a restart: %s, %v; want the kept %s", again, err, fp)
	}
	if _, near, _ := listenerCert(dir, "h-1", now.Add(pki.ClientLifetime-directRenew+time.Hour)); near == fp {
		t.Error("a certificate with under a month left was used again")
	}
	_, kept, _ := listenerCert(dir, "h-1", now)
	if _, other, _ := listenerCert(dir, "h-2", now); other == kept {
		t.Error("another host's certificate was used")
	}
	_, kept, _ = listenerCert(dir, "h-1", now)
	os.WriteFile(filepath.Join(dir, directKeyFile), []byte("not a key"), 0o600)
	if _, fresh, err := listenerCert(dir, "h-1", now); err != nil || fresh == kept {
		t.Errorf("a damaged key: %s, %v; want a new certificate", fresh, err)
	}
	if _, a, _ := listenerCert("", "h-1", now); a == "" {
		t.Error("no certificate without a directory")
	}
}
