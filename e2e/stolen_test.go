package e2e

import (
	"bytes"
	"net/http"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/store/pgtest"
)

// TestStolenAgentCredential is issue 9's "stolen bearer string" attack:
// a workload that read its host's agent credential tries it against the
// server, from where it runs, without the host's client certificate (or
// with its own host's, which the same tenant might hold). It cannot
// forge a status report for its neighbour's instance, read the
// neighbour's assignment (and its secret environment), inject lines into
// the neighbour's log or rewrite the host's inventory; nothing changes.
// The real agents, which joined with a certificate request, run the
// workload over mutual TLS all along. An agent too old to send a
// certificate request cannot join.
func TestStolenAgentCredential(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { testStolenCredential(t, "sqlite://"+filepath.Join(t.TempDir(), "gpucloud.db")) })
	t.Run("postgres", func(t *testing.T) { testStolenCredential(t, pgtest.URL(t)) })
}

func testStolenCredential(t *testing.T, db string) {
	c := startCluster(t, db, l4Host("sim-l4-a", "zone-a", 1), l4Host("sim-l4-b", "zone-a", 1))
	ctx := t.Context()
	_, alice, _ := c.member("acme", "alice")
	in, err := alice.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "l4.1x", Command: []string{"sh", "-c", "echo started; sleep 600"},
		Env: map[string]string{"HF_TOKEN": "hf_secret_of_acme"}}, "")
	if err != nil {
		t.Fatal(err)
	}
	in = c.waitState(alice, in.ID, cloud.Running) // reported by its agent, over mutual TLS
	victim := c.hosts[in.HostID]
	var neighbour *simHost
	for _, h := range c.hosts {
		if h.id != victim.id {
			neighbour = h
		}
	}
	c.until("the workload's output to reach the server", func() (bool, string) {
		page, err := alice.InstanceLogs(ctx, in.ID, 0)
		return err == nil && strings.Contains(page.Data, "started"), "no output yet"
	})
	before, hostBefore := c.snapshot(), c.hostSpecs()[victim.id]

	failed := agentapi.StatusReport{Phase: agentapi.PhaseFailed, Message: "forged"}
	for name, hc := range map[string]*http.Client{
		"the credential alone":                          c.hc, // trusts the cloud's CA, presents no certificate
		"the credential and another host's certificate": neighbour.hc,
	} {
		stolen := agentapi.NewClient(c.srv.URL, victim.cred, hc)
		unauthenticated := func(what string, err error) {
			t.Helper()
			if cloud.ErrorCode(err) != cloud.Unauthenticated || !strings.Contains(err.Error(), "client certificate") {
				t.Errorf("%s with %s: %v; want unauthenticated, naming the client certificate", what, name, err)
			}
		}
		unauthenticated("a forged status report", stolen.ReportStatus(ctx, in.ID, failed))
		unauthenticated("injected log lines", stolen.AppendLogs(ctx, in.ID, []byte("forged line\n")))
		as, err := stolen.Assignments(ctx)
		unauthenticated("reading the host's assignments", err)
		if as != nil {
			t.Errorf("assignments with %s: %+v", name, as)
		}
		inv := agentapi.Inventory{Host: hostBefore.Spec}
		inv.Host.State, inv.Host.GPUs, inv.Host.Labels = "", inv.Host.GPUs[:1], map[string]string{"forged": "true"}
		unauthenticated("a forged inventory", errOf(stolen.Heartbeat(ctx, agentapi.HeartbeatRequest{Inventory: &inv})))
	}
	if after := c.snapshot(); !reflect.DeepEqual(before, after) {
		t.Errorf("the stolen credential's requests changed something:\nbefore %+v\nafter  %+v", before, after)
	}
	if h := c.hostSpecs()[victim.id]; h.Version != hostBefore.Version || h.Spec.Labels["forged"] != "" {
		t.Errorf("the host after a forged inventory: version %d (was %d), labels %v", h.Version, hostBefore.Version, h.Spec.Labels)
	}
	if got := c.get(alice, in.ID); got.State != cloud.Running {
		t.Errorf("after the forged reports the instance is %s (%s)", got.State, got.Reason)
	}
	if page, err := alice.InstanceLogs(ctx, in.ID, 0); err != nil || strings.Contains(page.Data, "forged") {
		t.Errorf("the instance's log: %+v, %v", page, err)
	}

	// An agent that predates client certificates sends no CSR: refused,
	// saying so.
	jt, err := c.admin.CreateJoinToken(ctx, api.CreateJoinTokenRequest{Name: "old-agent"})
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"join_token":"` + jt.Secret + `","inventory":{"host":{"id":"old","gpus":[]}}}`)
	resp, err := c.hc.Post(c.srv.URL+"/v1/agent/join", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	out.ReadFrom(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(out.String(), "too old") {
		t.Errorf("join without a CSR: %d %s", resp.StatusCode, out.String())
	}
}

// errOf is the error of a call that also answers a value.
func errOf[T any](_ T, err error) error { return err }
