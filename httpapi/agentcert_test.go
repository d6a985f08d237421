package httpapi

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/internal/pki"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/store/sqlstore"
	"github.com/gpucloud/gpucloud/testkit"
)

// newMTLSEnv is newEnv served over TLS 1.3 as serve does it: a server
// certificate of a CA of its own, client certificates of that CA verified
// when given, agents' certificates signed at join and required with their
// credentials.
func newMTLSEnv(t *testing.T) (*env, *pki.CA) {
	t.Helper()
	st := testkit.Backends()[0].Open(t)
	ca, err := pki.NewCA("test cloud", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.ServerCert([]string{"127.0.0.1", "localhost"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	logs := &bytes.Buffer{}
	clock := testkit.NewClock(testkit.Epoch)
	svc := service.New(st, nil, service.Options{Now: clock.Now,
		SignAgentCert: func(csr []byte, host string) ([]byte, error) { return ca.SignClient(csr, host, time.Now()) }})
	h := New(svc, Options{Logger: slog.New(slog.NewTextHandler(&syncWriter{w: logs}, nil)), RequireAgentCert: true})
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes
	srv.TLS = &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert},
		ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: ca.Pool()}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	tok, created, err := svc.Accounts.Bootstrap(context.Background())
	if err != nil || !created {
		t.Fatalf("bootstrap: %v, %v", created, err)
	}
	a := &testkit.API{T: t, Store: st, Services: svc, Server: srv, URL: srv.URL, Clock: clock, AdminToken: tok}
	a.Admin = a.Client(tok)
	acme := a.Member("acme", "acme-dev")
	return &env{API: a, t: t, store: st, srv: srv, clock: clock, logs: logs, adminToken: tok, admin: a.Admin,
		acmeID: acme.TenantID, acme: acme.Client, acmeUser: acme.User, acmeToken: acme.Token}, ca
}

// mtlsClient is an HTTP client that trusts the env's server and presents
// certs.
func (e *env) mtlsClient(certs ...tls.Certificate) *http.Client {
	tr := e.srv.Client().Transport.(*http.Transport).Clone()
	tr.TLSClientConfig.Certificates = certs
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	e.t.Cleanup(hc.CloseIdleConnections)
	return hc
}

// mtlsJoin joins a host as an agent does (a key and CSR with the join),
// and returns its credential and the client certificate the join issued.
func (e *env) mtlsJoin(inv *agentapi.Inventory) (string, tls.Certificate) {
	e.t.Helper()
	keyPEM, csrPEM, err := agentapi.NewClientKey()
	if err != nil {
		e.t.Fatal(err)
	}
	jr, err := e.agentClient("").Join(context.Background(), agentapi.JoinRequest{JoinToken: e.joinToken("join-" + inv.Host.ID),
		Inventory: inv, CSR: string(csrPEM)})
	if err != nil {
		e.t.Fatalf("join %s: %v", inv.Host.ID, err)
	}
	cert, err := agentapi.ClientCertificate([]byte(jr.Certificate), keyPEM, inv.Host.ID)
	if err != nil {
		e.t.Fatalf("join %s: %v", inv.Host.ID, err)
	}
	return jr.Credential, cert
}

// TestAgentMutualTLS: over TLS, an agent credential works only from a
// connection that presents its host's client certificate: a status report
// with the credential alone (a stolen credential), with another host's
// certificate or with a certificate of another CA is refused, and changes
// nothing; with the host's own it is accepted. A join without a CSR is an
// agent too old for it; a re-join's credential and certificate replace the
// old pair, whose credential is revoked.
func TestAgentMutualTLS(t *testing.T) {
	e, _ := newMTLSEnv(t)
	ctx := context.Background()
	cred1, cert1 := e.mtlsJoin(inventory("node-1", "L4", 1))
	_, cert2 := e.mtlsJoin(inventory("node-2", "H100", 1))
	if cert1.Leaf.Subject.CommonName != "node-1" || cert2.Leaf.Subject.CommonName != "node-2" {
		t.Fatalf("certificates name %q and %q", cert1.Leaf.Subject.CommonName, cert2.Leaf.Subject.CommonName)
	}

	// An agent that sends no CSR is too old for this server.
	before := testkit.CountRows(t, e.store)
	_, err := e.agentClient("").Join(ctx, agentapi.JoinRequest{JoinToken: e.joinToken("old"), Inventory: inventory("node-3", "L4", 1)})
	var ce *cloud.Error
	if cloud.ErrorCode(err) != cloud.Invalid || !errors.As(err, &ce) || ce.Details["reason"] != service.AgentTooOld {
		t.Fatalf("join without a CSR: %v", err)
	}

	in := e.mustCreate(e.acme, "l4.1x")
	if n := e.schedule(); n != 1 {
		t.Fatalf("placed %d, want 1", n)
	}
	if in = e.instance(in.ID); in.HostID != "node-1" || in.State != cloud.Scheduled {
		t.Fatalf("instance %+v; want scheduled on node-1", in)
	}
	before = testkit.CountRows(t, e.store)
	// Certificates for node-1 from another cloud's CA, one of another
	// name, one named like this one's.
	foreign := func(caName string) tls.Certificate {
		other, err := pki.NewCA(caName, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		key, csr, _ := pki.NewClientKey("node-1")
		certPEM, _ := other.SignClient(csr, "node-1", time.Now())
		keyPEM, _ := pki.EncodeKey(key)
		c, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	running := agentapi.StatusReport{Phase: agentapi.PhaseRunning}
	for name, hc := range map[string]*http.Client{
		"no client certificate":      e.mtlsClient(),
		"another host's certificate": e.mtlsClient(cert2),
		// The server names its CA in its certificate request, so the
		// client does not even send this one.
		"another CA's certificate": e.mtlsClient(foreign("another cloud")),
	} {
		stolen := agentapi.NewClient(e.srv.URL, cred1, hc)
		err := stolen.ReportStatus(ctx, in.ID, running)
		if !errors.As(err, &ce) || ce.Code != cloud.Unauthenticated || !strings.Contains(ce.Message, "client certificate of the credential's host") {
			t.Errorf("status report with %s: %v; want unauthenticated", name, err)
		}
		if err := stolen.AppendLogs(ctx, in.ID, []byte("forged\n")); cloud.ErrorCode(err) != cloud.Unauthenticated {
			t.Errorf("log lines with %s: %v", name, err)
		}
		if _, err := stolen.Assignments(ctx); cloud.ErrorCode(err) != cloud.Unauthenticated {
			t.Errorf("assignments with %s: %v", name, err)
		}
		if err := errOf(stolen.Heartbeat(ctx, agentapi.HeartbeatRequest{Inventory: inventory("node-1", "L4", 8)})); cloud.ErrorCode(err) != cloud.Unauthenticated {
			t.Errorf("heartbeat with %s: %v", name, err)
		}
	}
	// A certificate of another CA named like this one's is sent, and
	// does not get past the handshake.
	if err := agentapi.NewClient(e.srv.URL, cred1, e.mtlsClient(foreign("test cloud"))).ReportStatus(ctx, in.ID, running); err == nil {
		t.Error("status report with another CA's certificate accepted")
	}
	if after := testkit.CountRows(t, e.store); after != before {
		t.Errorf("refused agent requests wrote: %+v -> %+v", before, after)
	}
	if got := e.instance(in.ID); got.State != cloud.Scheduled {
		t.Fatalf("after refused reports the instance is %s", got.State)
	}

	// The host's own certificate: accepted.
	agent1 := agentapi.NewClient(e.srv.URL, cred1, e.mtlsClient(cert1))
	if err := agent1.ReportStatus(ctx, in.ID, running); err != nil {
		t.Fatalf("status report with the host's certificate: %v", err)
	}
	if got := e.instance(in.ID); got.State != cloud.Running {
		t.Fatalf("after the report the instance is %s", got.State)
	}

	// A re-join presents the host's credential from a connection with the
	// host's certificate: the credential alone (stolen) or with another
	// host's certificate is refused and changes nothing.
	keyPEM, csrPEM, err := agentapi.NewClientKey()
	if err != nil {
		t.Fatal(err)
	}
	jt := e.joinToken("again")
	rejoin := func(hc *http.Client) (*agentapi.JoinResponse, error) {
		return agentapi.NewClient(e.srv.URL, "", hc).Join(ctx, agentapi.JoinRequest{JoinToken: jt,
			Inventory: inventory("node-1", "L4", 1), CSR: string(csrPEM), Credential: cred1})
	}
	for name, hc := range map[string]*http.Client{"no certificate": e.srv.Client(), "node-2's certificate": e.mtlsClient(cert2)} {
		before := testkit.CountRows(t, e.store)
		_, err := rejoin(hc)
		if ce := wantCode(t, err, cloud.Conflict); ce.Details["reason"] != "host_exists" {
			t.Errorf("a re-join with %s: %+v", name, ce)
		}
		if after := testkit.CountRows(t, e.store); after != before {
			t.Errorf("a re-join with %s wrote: %+v -> %+v", name, before, after)
		}
	}
	// The re-join: the old credential is revoked, so the old pair opens
	// nothing; the new pair works.
	jr, err := rejoin(e.mtlsClient(cert1))
	if err != nil {
		t.Fatalf("re-join with the host's credential and certificate: %v", err)
	}
	cred1b := jr.Credential
	cert1b, err := agentapi.ClientCertificate([]byte(jr.Certificate), keyPEM, "node-1")
	if err != nil {
		t.Fatal(err)
	}
	if err := errOf(agent1.Heartbeat(ctx, agentapi.HeartbeatRequest{})); cloud.ErrorCode(err) != cloud.Unauthenticated {
		t.Errorf("the revoked credential with its certificate: %v", err)
	}
	if err := errOf(agentapi.NewClient(e.srv.URL, cred1b, e.mtlsClient(cert1b)).Heartbeat(ctx, agentapi.HeartbeatRequest{})); err != nil {
		t.Errorf("the re-join's credential and certificate: %v", err)
	}
}

// TestAgentCredentialCachedLonger: over mutual TLS, a server trusts an
// agent credential it looked up for DefaultAgentTokenCacheTTL (the
// heartbeat timeout), not the users' DefaultTokenCacheTTL, so that a
// heartbeat every few seconds costs no look-up; the credential still
// opens nothing without its host's certificate, and a member's token is
// looked up again after DefaultTokenCacheTTL as before.
func TestAgentCredentialCachedLonger(t *testing.T) {
	e, _ := newMTLSEnv(t)
	ctx := context.Background()
	cred, cert := e.mtlsJoin(inventory("node-1", "L4", 1))
	agent := agentapi.NewClient(e.srv.URL, cred, e.mtlsClient(cert))
	txs := func() int64 { return e.store.(interface{ Counts() sqlstore.Counts }).Counts().Begins }
	// lookups is how many transactions f ran beside want others.
	lookups := func(what string, want int64, f func() error) int64 {
		t.Helper()
		before := txs()
		if err := f(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return txs() - before - want
	}
	beat := func() error { return errOf(agent.Heartbeat(ctx, agentapi.HeartbeatRequest{})) }
	list := func() error { return errOf(e.acme.ListInstances(ctx, client.ListInstancesOptions{})) }
	lookups("the first heartbeat", 1, beat)
	lookups("the member's first call", 1, list)
	e.clock.Advance(DefaultTokenCacheTTL + time.Second)
	if n := lookups("a heartbeat after the users' TTL", 1, beat); n != 0 {
		t.Errorf("the agent's credential was looked up again %d times after %v", n, DefaultTokenCacheTTL+time.Second)
	}
	if n := lookups("the member's call after the users' TTL", 1, list); n != 1 {
		t.Errorf("the member's token was looked up %d times after its TTL; want 1", n)
	}
	// Cached, the credential alone is still refused.
	if err := errOf(e.agentClient(cred).Heartbeat(ctx, agentapi.HeartbeatRequest{})); cloud.ErrorCode(err) != cloud.Unauthenticated {
		t.Errorf("the cached credential without its certificate: %v; want unauthenticated", err)
	}
	e.clock.Advance(DefaultAgentTokenCacheTTL)
	if n := lookups("a heartbeat after the agents' TTL", 1, beat); n != 1 {
		t.Errorf("the agent's credential was looked up %d times after %v; want 1", n, DefaultAgentTokenCacheTTL)
	}
}
