package controlplane

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
)

// TestAgentClientCertificates: a replica that serves TLS signs an agent's
// client certificate at join (named after the host) and accepts the
// credential only with it; a plain-HTTP replica (development, loopback)
// issues none and accepts the credential alone.
func TestAgentClientCertificates(t *testing.T) {
	ctx := context.Background()
	inv := func(id string) *agentapi.Inventory {
		h := fleet.MockHost(id, "L4", 1)
		h.State = ""
		return &agentapi.Inventory{Host: *h}
	}
	join := func(s *Replica, host string) (*agentapi.JoinResponse, []byte) {
		t.Helper()
		jt, err := client.New(s.URL, s.AdminToken, s.HTTPClient()).CreateJoinToken(ctx, api.CreateJoinTokenRequest{Name: "j"})
		if err != nil {
			t.Fatal(err)
		}
		keyPEM, csrPEM, err := agentapi.NewClientKey()
		if err != nil {
			t.Fatal(err)
		}
		jr, err := agentapi.NewClient(s.URL, "", s.HTTPClient()).Join(ctx, agentapi.JoinRequest{JoinToken: jt.Secret, Inventory: inv(host), CSR: string(csrPEM)})
		if err != nil {
			t.Fatalf("join: %v", err)
		}
		return jr, keyPEM
	}

	s, err := Start(ctx, Config{DB: "sqlite://" + filepath.Join(t.TempDir(), "tls.db"), Listen: "127.0.0.1:0", Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	jr, keyPEM := join(s, "node-1")
	cert, err := agentapi.ClientCertificate([]byte(jr.Certificate), keyPEM, "node-1")
	if err != nil {
		t.Fatalf("the join's certificate: %v", err)
	}
	if _, err := agentapi.NewClient(s.URL, jr.Credential, s.HTTPClient()).Assignments(ctx); cloud.ErrorCode(err) != cloud.Unauthenticated {
		t.Errorf("TLS, the credential alone: %v; want unauthenticated", err)
	}
	hc, err := agentapi.TLSClient(s.CAPEM(), cert)
	if err != nil {
		t.Fatal(err)
	}
	defer hc.CloseIdleConnections()
	if _, err := agentapi.NewClient(s.URL, jr.Credential, hc).Assignments(ctx); err != nil {
		t.Errorf("TLS, with the host's certificate: %v", err)
	}

	p, err := Start(ctx, Config{DB: "sqlite://" + filepath.Join(t.TempDir(), "plain.db"), Listen: "127.0.0.1:0", Log: quiet, TLS: TLS{Plain: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	jr, _ = join(p, "node-2")
	if jr.Certificate != "" {
		t.Errorf("a plain-HTTP replica issued a client certificate")
	}
	if _, err := agentapi.NewClient(p.URL, jr.Credential, p.HTTPClient()).Assignments(ctx); err != nil {
		t.Errorf("plain HTTP, the credential alone: %v", err)
	}
}

// TestAgentSessionResumes: an agent's client resumes its TLS session
// when it reconnects (a ticket instead of a full handshake), and the
// resumed connection still carries the host's verified certificate, so
// its credential is accepted; another host's credential is not.
func TestAgentSessionResumes(t *testing.T) {
	ctx := context.Background()
	s, err := Start(ctx, Config{DB: "sqlite://" + filepath.Join(t.TempDir(), "tls.db"), Listen: "127.0.0.1:0", Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	join := func(host string) (string, *http.Client) {
		t.Helper()
		jt, err := client.New(s.URL, s.AdminToken, s.HTTPClient()).CreateJoinToken(ctx, api.CreateJoinTokenRequest{Name: host})
		if err != nil {
			t.Fatal(err)
		}
		keyPEM, csrPEM, err := agentapi.NewClientKey()
		if err != nil {
			t.Fatal(err)
		}
		h := fleet.MockHost(host, "L4", 1)
		h.State = ""
		jr, err := agentapi.NewClient(s.URL, "", s.HTTPClient()).Join(ctx, agentapi.JoinRequest{JoinToken: jt.Secret,
			Inventory: &agentapi.Inventory{Host: *h}, CSR: string(csrPEM)})
		if err != nil {
			t.Fatal(err)
		}
		cert, err := agentapi.ClientCertificate([]byte(jr.Certificate), keyPEM, host)
		if err != nil {
			t.Fatal(err)
		}
		hc, err := agentapi.TLSClient(s.CAPEM(), cert)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(hc.CloseIdleConnections)
		return jr.Credential, hc
	}
	cred1, hc1 := join("node-1")
	cred2, _ := join("node-2")
	get := func(cred string) (int, bool) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, "GET", s.URL+"/v1/agent/assignments", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+cred)
		resp, err := hc1.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode, resp.TLS != nil && resp.TLS.DidResume
	}
	if code, resumed := get(cred1); code != http.StatusOK || resumed {
		t.Fatalf("first connection: %d, resumed %v; want 200 on a full handshake", code, resumed)
	}
	hc1.CloseIdleConnections()
	if code, resumed := get(cred1); code != http.StatusOK || !resumed {
		t.Errorf("reconnection: %d, resumed %v; want 200 on a resumed session", code, resumed)
	}
	hc1.CloseIdleConnections()
	if code, resumed := get(cred2); code != http.StatusUnauthorized || !resumed {
		t.Errorf("another host's credential on node-1's resumed session: %d (resumed %v); want 401", code, resumed)
	}
}
