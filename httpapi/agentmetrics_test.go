package httpapi

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/cloud"
)

func amFloat(v float64) *float64 { return &v }

// TestAgentMetricsAndLock: the agent routes of metrics and completion
// locks, for the host's own instances only and for agent credentials only.
func TestAgentMetricsAndLock(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	agentA, _ := e.join(inventory("node-a", "L4", 1))
	agentB, hostB := e.join(inventory("node-b", "H100", 1))
	in := e.mustCreate(e.acme, "h100.1x")
	e.schedule()
	if got := e.instance(in.ID); got.HostID != hostB {
		t.Fatalf("placed on %q", got.HostID)
	}
	at := e.clock.Now()
	rep := agentapi.MetricsReport{Samples: []agentapi.InstanceSample{{InstanceID: in.ID, At: at, GPUUtilization: amFloat(0.5), CPUUtilization: amFloat(0.125)}}}
	lock := agentapi.LockRequest{Locked: true, Reason: "saving step 7"}

	// Only agent credentials open the routes.
	for name, token := range map[string]string{"a member": e.acmeToken, "an admin": e.adminToken} {
		c := e.agentClient(token)
		wantCode(t, c.ReportMetrics(ctx, rep), cloud.PermissionDenied)
		_, err := c.SetScaleInLock(ctx, in.ID, lock)
		if cloud.ErrorCode(err) != cloud.PermissionDenied {
			t.Errorf("%s locks: %v", name, err)
		}
	}
	// Another host's agent: not_found, naming the instance; nothing written.
	before := e.counts()
	ce := wantCode(t, agentA.ReportMetrics(ctx, rep), cloud.NotFound)
	if ce.Details["id"] != in.ID || ce.Details["field"] != "samples[0].instance_id" {
		t.Errorf("details %v", ce.Details)
	}
	_, err := agentA.SetScaleInLock(ctx, in.ID, lock)
	wantCode(t, err, cloud.NotFound)
	e.unchanged(before, "another host's metrics and lock")
	if ps := e.agentMetricPoints(e.acmeID); len(ps) != 0 {
		t.Fatalf("refused report wrote %+v", ps)
	}

	if err := agentB.ReportMetrics(ctx, rep); err != nil {
		t.Fatal(err)
	}
	ps := e.agentMetricPoints(e.acmeID)
	if len(ps) != 2 || ps[0].InstanceID != in.ID || ps[0].Name != cloud.MetricGPUUtilization || ps[0].Value != 0.5 ||
		ps[1].Name != cloud.MetricCPUUtilization || ps[1].Value != 0.125 || !ps[0].At.Equal(at) {
		t.Fatalf("points %+v", ps)
	}
	bad := rep
	bad.Samples = []agentapi.InstanceSample{{InstanceID: in.ID, At: at, GPUUtilization: amFloat(2)}}
	wantCode(t, agentB.ReportMetrics(ctx, bad), cloud.Invalid)

	si, err := agentB.SetScaleInLock(ctx, in.ID, lock)
	if err != nil || si.Lock == nil || si.Lock.Reason != "saving step 7" || !si.Lock.At.Equal(e.clock.Now()) {
		t.Fatalf("lock = %+v, %v", si, err)
	}
	if got := e.instance(in.ID); got.ScaleIn == nil || got.ScaleIn.Lock == nil || got.ScaleIn.Lock.Reason != "saving step 7" {
		t.Fatalf("the tenant sees %+v", got.ScaleIn)
	}
	si, err = agentB.SetScaleInLock(ctx, in.ID, agentapi.LockRequest{})
	if err != nil || si == nil || si.Held() {
		t.Fatalf("release = %+v, %v", si, err)
	}
	_, err = agentB.SetScaleInLock(ctx, in.ID, agentapi.LockRequest{Locked: true, Reason: "bell\a"})
	wantCode(t, err, cloud.Invalid)

	// The strict decoder: unknown fields are refused.
	for path, body := range map[string]string{
		"/v1/agent/metrics": `{"samples": [], "extra": 1}`,
		"/v1/agent/instances/" + in.ID + "/scale-in-lock": `{"locked": true, "until": "later"}`,
	} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.srv.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+agentB.token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("POST %s with an unknown field: %d", path, resp.StatusCode)
		}
	}
}

// agentMetricPoints lists a tenant's metric points.
func (e *env) agentMetricPoints(tenant string) []cloud.MetricPoint {
	e.t.Helper()
	var ps []cloud.MetricPoint
	err := e.store.Tx(context.Background(), func(tx cloud.Tx) (err error) {
		ps, err = tx.ListMetrics(context.Background(), cloud.MetricFilter{TenantID: tenant})
		return err
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return ps
}
