package e2e

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agent/gpu/sim"
	"github.com/gpucloud/gpucloud/agent/runtime/containerd"
	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/store/pgtest"
)

// TestEndpointWarmPool: an endpoint with warm 1, on containers and on
// both stores, fills its pool (a worker created, made ready, then paused:
// its container frozen); a job arriving with no running worker resumes
// the paused one, which runs it to completion; the pool is refilled
// meanwhile and, once idle, the endpoint is back to one paused worker. Another
// tenant cannot see the endpoint.
func TestEndpointWarmPool(t *testing.T) {
	ch := startContainerHost(t)
	ch.importImageWith(t, echoImage, containerd.ImageConfig{Cmd: []string{"/usr/local/bin/echoworker"}},
		containerd.File{Path: "/usr/local/bin/echoworker", Mode: 0o755, Data: buildStatic(t, "echoworker")})
	t.Run("sqlite", func(t *testing.T) { testEndpointWarmPool(t, ch, "sqlite://"+filepath.Join(t.TempDir(), "gpucloud.db")) })
	t.Run("postgres", func(t *testing.T) { testEndpointWarmPool(t, ch, pgtest.URL(t)) })
}

func testEndpointWarmPool(t *testing.T, ch *containerHost, db string) {
	spec := sim.Spec{ID: "sim-warm", Zone: "zone-a", GPUs: sim.GPUSpec{Model: "L4", Count: 4}}
	c := startClusterOn(t, db, nil, nil, ch.runtimeOf, spec)
	ctx := t.Context()
	_, alice, _ := c.member("acme", "alice")
	_, bob, _ := c.member("globex", "bob")
	if _, err := alice.CreateEndpoint(ctx, api.CreateEndpointRequest{Name: "pool", EndpointSpec: cloud.EndpointSpec{
		Image: echoImage, Offerings: []string{"l4.1x"}, Max: 2, Warm: 1, IdleTimeoutSeconds: 2, TimeoutSeconds: 30}}, ""); err != nil {
		t.Fatal(err)
	}
	paused := func() (string, string) {
		d, err := alice.GetEndpoint(ctx, "pool")
		if err != nil || len(d.Workers) != 1 || d.Workers[0].State != cloud.Paused {
			return "", fmt.Sprintf("%+v %v", d, err)
		}
		return d.Workers[0].ID, ""
	}
	var w string
	c.until("the pool's worker to be paused", func() (bool, string) {
		var why string
		w, why = paused()
		return w != "" && ch.frozen(t, w), why
	})
	if _, err := bob.GetEndpoint(ctx, "pool"); cloud.ErrorCode(err) != cloud.NotFound {
		t.Fatalf("another tenant: %v", err)
	}

	began := time.Now()
	j, err := alice.RunJobSync(ctx, "pool", json.RawMessage(`{"msg":"warm"}`), 60*time.Second, "")
	if err != nil || j.State != cloud.JobCompleted || j.Worker != w {
		t.Fatalf("a job at the paused worker %s: %+v, %v", w, j, err)
	}
	t.Logf("start from a paused worker, request to answer: %v", time.Since(began).Round(time.Millisecond))
	var out struct {
		Echo map[string]string `json:"echo"`
	}
	if err := json.Unmarshal(j.Output, &out); err != nil || out.Echo["msg"] != "warm" {
		t.Fatalf("output %s (%v)", j.Output, err)
	}
	// The pool is refilled while the resumed worker serves (a second
	// worker is launched, and paused once ready: it never served), and
	// once the endpoint is idle the resumed worker goes at its idle
	// timeout, leaving one worker, paused.
	c.until("the pool to be refilled and the endpoint idle", func() (bool, string) {
		d, err := alice.GetEndpoint(ctx, "pool")
		if err != nil || d.Status.LaunchSeq < 2 {
			return false, fmt.Sprintf("no second launch: %+v %v", d, err)
		}
		id, why := paused()
		return id != "" && ch.frozen(t, id), why
	})
}

// frozen reports whether some host's runtime on the daemon has workload
// id paused.
func (ch *containerHost) frozen(t *testing.T, id string) bool {
	ch.mu.Lock()
	rts := append([]*trackingContainers(nil), ch.rts...)
	ch.mu.Unlock()
	for _, rt := range rts {
		if p, err := rt.Paused(t.Context(), id); err == nil {
			return p
		}
	}
	return false
}
