package httpapi

import (
	"context"
	"testing"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
)

// TestDrainHost: a drain cordons the host and asks its running instances to
// stop; instances elsewhere and instances already stopping are left alone; a
// member may not drain; draining twice changes nothing more.
func TestDrainHost(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.putHost("l4-a", "L4", 2)
	e.putHost("l4-b", "L4", 2)
	a := e.setStateHost(e.mustCreate(e.acme, "l4.1x").ID, cloud.Running, "l4-a")
	b := e.setStateHost(e.mustCreate(e.acme, "l4.1x").ID, cloud.Running, "l4-b")

	if _, err := e.acme.DrainHost(ctx, "l4-a"); cloud.ErrorCode(err) != cloud.PermissionDenied {
		t.Fatalf("member drain: %v", err)
	}
	res, err := e.admin.DrainHost(ctx, "l4-a")
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Stopping) != 1 || res.Stopping[0].ID != a.ID {
		t.Fatalf("drain stopped %+v", res.Stopping)
	}
	if h := e.host("l4-a"); h.State != fleet.Cordoned {
		t.Fatalf("host state %s", h.State)
	}
	if in := e.instance(a.ID); in.State != cloud.Stopping {
		t.Fatalf("instance on the drained host is %s", in.State)
	}
	if in := e.instance(b.ID); in.State != cloud.Running {
		t.Fatalf("instance elsewhere is %s", in.State)
	}
	before := e.counts()
	if res, err := e.admin.DrainHost(ctx, "l4-a"); err != nil || len(res.Stopping) != 0 {
		t.Fatalf("second drain: %+v, %v", res, err)
	}
	e.unchanged(before, "second drain")
	if _, err := e.admin.DrainHost(ctx, "nope"); cloud.ErrorCode(err) != cloud.NotFound {
		t.Fatalf("unknown host: %v", err)
	}
}
