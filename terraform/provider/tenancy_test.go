package provider_test

import (
	"context"
	"fmt"
	"regexp"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
)

// TestTenantIsolation: a provider with tenant B's token cannot import
// tenant A's resources, of every type (addresses and their associations,
// spot requests, groups and commitments included): each import fails with the API's
// not_found, as for an ID that does not exist. (A's resources in B's state
// would leave it on refresh through the same not_found.)
func TestTenantIsolation(t *testing.T) {
	c := sharedCloud(t)
	a, b := c.newTenant(t), c.newTenant(t)
	ctx := t.Context()
	key, err := a.Client.ImportKey(ctx, api.ImportKeyRequest{Name: "a", PublicKey: testKey1}, "")
	if err != nil {
		t.Fatal(err)
	}
	vol, err := a.Client.CreateVolume(ctx, api.CreateVolumeRequest{Name: "a", SizeGiB: 1}, "")
	if err != nil {
		t.Fatal(err)
	}
	pg, err := a.Client.CreatePlacementGroup(ctx, api.CreatePlacementGroupRequest{Name: "a", Strategy: "spread"}, "")
	if err != nil {
		t.Fatal(err)
	}
	net, err := a.Client.CreateNetwork(ctx, api.CreateNetworkRequest{Name: "a", CIDR: "10.40.0.0/16"}, "")
	if err != nil {
		t.Fatal(err)
	}
	sub, err := a.Client.CreateSubnet(ctx, api.CreateSubnetRequest{Network: net.ID, Name: "a", CIDR: "10.40.1.0/24", Zone: "tf-a"}, "")
	if err != nil {
		t.Fatal(err)
	}
	sg, err := a.Client.CreateSecurityGroup(ctx, api.CreateSecurityGroupRequest{Network: net.ID, Name: "a"}, "")
	if err != nil {
		t.Fatal(err)
	}
	in, err := a.Client.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "l4.1x", Command: []string{"sleep", "600"}}, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Client.TerminateInstance(t.Context(), in.ID, 0) })
	addr, err := a.Client.AllocateAddress(ctx, api.AllocateAddressRequest{InstanceID: in.ID}, "")
	if err != nil {
		t.Fatal(err)
	}
	pool := c.spotPool(t)
	sr, err := a.Client.CreateSpotRequest(ctx, api.CreateSpotRequestRequest{Pools: []cloud.Pool{pool.Pool}, MaxPrice: new(money.MustParse("0.000001")), Command: []string{"sleep", "600"}}, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Client.CancelSpotRequest(context.Background(), sr.ID, true, 0) })
	grp, err := a.Client.CreateGroup(ctx, api.CreateGroupRequest{Name: "a", Template: cloud.GroupTemplate{Offerings: []string{"l4.1x"}}, Min: 0, Max: 1}, "")
	if err != nil {
		t.Fatal(err)
	}
	cm, err := a.Client.CreateCommitment(ctx, api.CreateCommitmentRequest{Plan: cloud.PlanRetainer, Offering: "l4.1x", Quantity: 1, Term: "1h"}, "")
	if err != nil {
		t.Fatal(err)
	}
	var steps []resource.TestStep
	for _, tc := range []struct {
		typ, body, id string
	}{
		{"gpucloud_key", `public_key = "x"`, key.ID},
		{"gpucloud_volume", `name = "x"` + "\n" + `size_gib = 1`, vol.ID},
		{"gpucloud_placement_group", `name = "x"` + "\n" + `strategy = "spread"`, pg.ID},
		{"gpucloud_network", `name = "x"` + "\n" + `cidr = "10.0.0.0/16"`, net.ID},
		{"gpucloud_subnet", `network_id = "x"` + "\n" + `name = "x"` + "\n" + `cidr = "10.0.0.0/24"` + "\n" + `zone = "x"`, sub.ID},
		{"gpucloud_security_group", `network_id = "x"` + "\n" + `name = "x"`, sg.ID},
		{"gpucloud_security_group_rule", `security_group_id = "x"` + "\n" + `direction = "egress"` + "\n" + `protocol = "all"` + "\n" + `cidr = "0.0.0.0/0"`, sg.ID + "/" + sg.Egress[0].ID},
		{"gpucloud_instance", `offering = "l4.1x"`, in.ID},
		{"gpucloud_address", ``, addr.ID},
		{"gpucloud_address_association", `address_id = "x"` + "\n" + `instance_id = "x"`, addr.ID},
		{"gpucloud_spot_request", `pool {` + "\n" + `offering = "l4.1x"` + "\n}", sr.ID},
		{"gpucloud_group", `name = "x"` + "\n" + `offerings = ["l4.1x"]` + "\n" + `min = 0` + "\n" + `max = 1`, grp.ID},
		{"gpucloud_commitment", `plan = "retainer"` + "\n" + `offering = "l4.1x"` + "\n" + `quantity = 1` + "\n" + `term = "1h"`, cm.ID},
	} {
		steps = append(steps, resource.TestStep{
			Config:        b.config(fmt.Sprintf("resource %q \"theirs\" {\n%s\n}", tc.typ, tc.body)),
			ResourceName:  tc.typ + ".theirs",
			ImportState:   true,
			ImportStateId: tc.id,
			ExpectError:   regexp.MustCompile(`(?s)Cannot import.*\(not_found\)`),
		})
	}
	resource.Test(t, resource.TestCase{ProtoV6ProviderFactories: factories, Steps: steps})
	// A's own provider imports the same IDs (the check above is not
	// one that every import fails).
	resource.Test(t, resource.TestCase{ProtoV6ProviderFactories: factories, Steps: []resource.TestStep{{
		Config:        a.config(`resource "gpucloud_volume" "mine" {` + "\n" + `name = "a"` + "\n" + `size_gib = 1` + "\n}"),
		ResourceName:  "gpucloud_volume.mine",
		ImportState:   true,
		ImportStateId: vol.ID,
		ImportStateCheck: func(is []*terraform.InstanceState) error {
			if len(is) != 1 || is[0].ID != vol.ID {
				return fmt.Errorf("imported %v, want volume %s", is, vol.ID)
			}
			return nil
		},
	}}})
}
