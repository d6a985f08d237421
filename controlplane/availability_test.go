package controlplane

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/testkit"
)

// TestOfferingAvailability: once the leader's scheduler has seen the
// fleet, GET /v1/offerings says which offerings its hosts can run and how
// many have room, any member may read it, and a create of an offering no
// host could ever run is refused at once instead of waiting forever.
func TestOfferingAvailability(t *testing.T) {
	s := start(t, "sqlite://"+filepath.Join(t.TempDir(), "gpucloud.db"))
	defer s.Close(context.Background())
	testkit.Eventually(t, 0, "leadership", s.IsLeader)
	ctx := context.Background()
	addHost(t, s.Store, fleet.MockHost("l40s-1", "L40S", 2))
	admin := client.New(s.URL, s.AdminToken, s.HTTPClient())
	tn, err := admin.CreateTenant(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	u, err := admin.CreateUser(ctx, tn.ID, api.CreateUserRequest{Name: "dev"})
	if err != nil {
		t.Fatal(err)
	}
	member := client.New(s.URL, u.Secret, s.HTTPClient())
	var list *api.OfferingList
	testkit.Eventually(t, 0, "availability of l40s.2x", func() bool {
		list, err = member.OfferingList(ctx)
		return err == nil && list.Availability["l40s.2x"].Hosts == 1
	})
	if a := list.Availability["l40s.2x"]; a.FitsNow != 1 {
		t.Errorf("l40s.2x: %+v", a)
	}
	if a, ok := list.Availability["h200.1x"]; !ok || a.Hosts != 0 || a.Reasons["wrong GPU model"] != 1 {
		t.Errorf("h200.1x: %+v (present %v)", a, ok)
	}
	_, err = member.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "h200.mig.1g.18gb"}, "")
	if cloud.ErrorCode(err) != cloud.Invalid || !strings.Contains(err.Error(), "could ever run") {
		t.Fatalf("create h200.mig.1g.18gb: %v", err)
	}
	if _, err := member.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "l40s.2x"}, ""); err != nil {
		t.Fatal(err)
	}
	// Full now, but possible: accepted, and it waits.
	testkit.Eventually(t, 0, "l40s.2x full", func() bool {
		list, err = member.OfferingList(ctx)
		a := list.Availability["l40s.2x"]
		return err == nil && a.Hosts == 1 && a.FitsNow == 0
	})
	if _, err := member.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "l40s.2x"}, ""); err != nil {
		t.Errorf("a full but possible offering: %v", err)
	}
}
