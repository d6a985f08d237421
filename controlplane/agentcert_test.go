package controlplane

import (
	"context"
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
