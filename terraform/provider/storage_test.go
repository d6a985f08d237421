package provider_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"

	"github.com/gpucloud/gpucloud/cloud"
)

// TestVolumeAndPlacementGroup: create with the server's defaults known
// after apply, import, drift (each deleted out of band: the plan creates
// it again), replace on a change the API cannot make (a volume's size, a
// group's strategy), destroy.
func TestVolumeAndPlacementGroup(t *testing.T) {
	c := sharedCloud(t)
	a := c.newTenant(t)
	cfg := func(size int, strategy string) string {
		return a.config(fmt.Sprintf(`
resource "gpucloud_volume" "data" {
  name     = "data"
  size_gib = %d
  tags     = { team = "ml" }
}
resource "gpucloud_placement_group" "pg" {
  name     = "train"
  strategy = %q
}`, size, strategy))
	}
	var vol, pg string
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		CheckDestroy: resource.ComposeAggregateTestCheckFunc(
			checkGone(t, "gpucloud_volume", func(id string) error { _, err := a.Client.GetVolume(t.Context(), id); return err }),
			checkGone(t, "gpucloud_placement_group", func(id string) error {
				g, err := a.Client.GetPlacementGroup(t.Context(), id)
				if err == nil && g.DeletedAt != nil {
					return cloud.Errorf(cloud.NotFound, "deleted")
				}
				return err
			}),
		),
		Steps: []resource.TestStep{
			{
				Config: cfg(10, "cluster"),
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr("gpucloud_volume.data", "size_gib", "10"),
					resource.TestCheckResourceAttr("gpucloud_volume.data", "kind", "block"),
					resource.TestCheckNoResourceAttr("gpucloud_volume.data", "zone"),
					resource.TestCheckResourceAttr("gpucloud_volume.data", "tags.team", "ml"),
					resource.TestCheckNoResourceAttr("gpucloud_volume.data", "instance_id"),
					resource.TestCheckResourceAttr("gpucloud_placement_group.pg", "by_rack", "false"),
					saveID("gpucloud_volume.data", &vol),
					saveID("gpucloud_placement_group.pg", &pg),
				),
			},
			{ResourceName: "gpucloud_volume.data", ImportState: true, ImportStateVerify: true},
			{ResourceName: "gpucloud_placement_group.pg", ImportState: true, ImportStateVerify: true},
			{
				PreConfig: func() {
					_, err := a.Client.DeleteVolume(t.Context(), vol)
					err = errors.Join(err, a.Client.DeletePlacementGroup(t.Context(), pg))
					if err != nil {
						t.Fatal(err)
					}
				},
				Config: cfg(10, "cluster"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("gpucloud_volume.data", plancheck.ResourceActionCreate),
					plancheck.ExpectResourceAction("gpucloud_placement_group.pg", plancheck.ResourceActionCreate),
				}},
				Check: resource.ComposeAggregateTestCheckFunc(checkNewID("gpucloud_volume.data", &vol), checkNewID("gpucloud_placement_group.pg", &pg)),
			},
			{
				Config: cfg(20, "spread"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("gpucloud_volume.data", plancheck.ResourceActionDestroyBeforeCreate),
					plancheck.ExpectResourceAction("gpucloud_placement_group.pg", plancheck.ResourceActionDestroyBeforeCreate),
				}},
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr("gpucloud_volume.data", "size_gib", "20"),
					resource.TestCheckResourceAttr("gpucloud_placement_group.pg", "strategy", "spread"),
				),
			},
		},
	})
}
