package provider_test

import (
	"fmt"
	"regexp"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/gpucloud/gpucloud/cloud"
)

// clusterConfig is a two-node cluster: a volume each, a spread placement
// group, on a subnet with a security group, running command.
func clusterConfig(tn *tenant, command string) string {
	return tn.config(fmt.Sprintf(`
resource "gpucloud_network" "net" {
  name = "cluster"
  cidr = "10.30.0.0/16"
}
resource "gpucloud_subnet" "a" {
  network_id = gpucloud_network.net.id
  name       = "a"
  cidr       = "10.30.1.0/24"
  zone       = "tf-a"
}
resource "gpucloud_security_group" "sg" {
  network_id = gpucloud_network.net.id
  name       = "cluster"
}
resource "gpucloud_placement_group" "pg" {
  name     = "cluster"
  strategy = "spread"
}
resource "gpucloud_volume" "ckpt" {
  count    = 2
  name     = "ckpt-${count.index}"
  size_gib = 1
}
resource "gpucloud_instance" "node" {
  count              = 2
  name               = "node-${count.index}"
  offering           = "l4.1x"
  command            = [%q, "600"]
  env                = { RANK = tostring(count.index) }
  subnet_id          = gpucloud_subnet.a.id
  security_group_ids = [gpucloud_security_group.sg.id]
  placement_group_id = gpucloud_placement_group.pg.id
  volume_ids         = [gpucloud_volume.ckpt[count.index].id]
  tags               = { job = "train" }
  timeouts {
    create = "2m"
  }
}`, command))
}

// TestInstance: a two-node cluster whose instances run (create waits for
// it) on different hosts (spread), with their volumes attached and
// addresses in the subnet; import; drift (one terminated out of band: the
// plan creates it again, the other untouched); a changed command replaces
// both; an instance that cannot be placed fails its create within the
// timeout, saying why with the scheduler's host counts by reason; destroy
// waits until each is terminated.
func TestInstance(t *testing.T) {
	c := sharedCloud(t)
	a := c.newTenant(t)
	var node0 string
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		CheckDestroy: checkGone(t, "gpucloud_instance", func(id string) error {
			in, err := a.Client.GetInstance(t.Context(), id)
			if err == nil && in.State == cloud.Terminated {
				return cloud.Errorf(cloud.NotFound, "terminated")
			}
			if err == nil {
				return fmt.Errorf("instance %s is %s", id, in.State)
			}
			return err
		}),
		Steps: []resource.TestStep{
			{
				Config: clusterConfig(a, "sleep"),
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr("gpucloud_instance.node.0", "state", "running"),
					resource.TestCheckResourceAttr("gpucloud_instance.node.1", "state", "running"),
					resource.TestCheckResourceAttr("gpucloud_instance.node.0", "zone", "tf-a"),
					resource.TestMatchResourceAttr("gpucloud_instance.node.0", "private_address", regexp.MustCompile(`^10\.30\.1\.`)),
					resource.TestCheckResourceAttrPair("gpucloud_instance.node.0", "network_id", "gpucloud_network.net", "id"),
					resource.TestCheckResourceAttr("gpucloud_instance.node.0", "market", "on_demand"),
					func(s *terraform.State) error {
						vol := s.RootModule().Resources["gpucloud_volume.ckpt.1"].Primary.ID
						node := s.RootModule().Resources["gpucloud_instance.node.1"].Primary.ID
						v, err := a.Client.GetVolume(t.Context(), vol)
						if err != nil || v.InstanceID != node {
							return fmt.Errorf("volume %s: attached to %v (%v), want %s", vol, v, err, node)
						}
						return nil
					},
					func(s *terraform.State) error {
						h0 := s.RootModule().Resources["gpucloud_instance.node.0"].Primary.Attributes["host_id"]
						h1 := s.RootModule().Resources["gpucloud_instance.node.1"].Primary.Attributes["host_id"]
						if h0 == "" || h0 == h1 {
							return fmt.Errorf("spread instances on hosts %q and %q, want two different hosts", h0, h1)
						}
						return nil
					},
					saveID("gpucloud_instance.node.0", &node0),
				),
			},
			{
				// Terraform cannot import to a counted address from
				// the test harness: import node 0 as another resource
				// and compare with node 0's state.
				Config:            clusterConfig(a, "sleep") + `resource "gpucloud_instance" "imported" { offering = "l4.1x" }`,
				ResourceName:      "gpucloud_instance.imported",
				ImportState:       true,
				ImportStateIdFunc: func(*terraform.State) (string, error) { return node0, nil },
				ImportStateCheck: func(is []*terraform.InstanceState) error {
					if len(is) != 1 {
						return fmt.Errorf("imported %d instances, want 1", len(is))
					}
					got := is[0].Attributes
					for k, want := range map[string]string{"id": node0, "name": "node-0", "offering": "l4.1x", "state": "running",
						"command.0": "sleep", "env.RANK": "0", "tags.job": "train", "volume_ids.#": "1", "security_group_ids.#": "1"} {
						if got[k] != want {
							return fmt.Errorf("imported %s = %q, want %q", k, got[k], want)
						}
					}
					return nil
				},
			},
			{
				PreConfig: func() {
					if _, err := a.Client.TerminateInstance(t.Context(), node0, 0); err != nil {
						t.Fatal(err)
					}
				},
				Config: clusterConfig(a, "sleep"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("gpucloud_instance.node[0]", plancheck.ResourceActionCreate),
					plancheck.ExpectResourceAction("gpucloud_instance.node[1]", plancheck.ResourceActionNoop),
				}},
				// Its volume detached with the terminate: the new
				// instance takes it.
				Check: resource.ComposeAggregateTestCheckFunc(
					checkNewID("gpucloud_instance.node.0", &node0),
					resource.TestCheckResourceAttr("gpucloud_instance.node.0", "state", "running"),
				),
			},
			{
				Config: clusterConfig(a, "/bin/sleep"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("gpucloud_instance.node[0]", plancheck.ResourceActionDestroyBeforeCreate),
					plancheck.ExpectResourceAction("gpucloud_instance.node[1]", plancheck.ResourceActionDestroyBeforeCreate),
					plancheck.ExpectResourceAction("gpucloud_volume.ckpt[0]", plancheck.ResourceActionNoop),
				}},
				Check: resource.TestCheckResourceAttr("gpucloud_instance.node.1", "command.0", "/bin/sleep"),
			},
			{
				// Three L4 instances on a spread group of two hosts:
				// the third never fits.
				Config: clusterConfig(a, "/bin/sleep") + `
resource "gpucloud_instance" "third" {
  offering           = "l4.1x"
  command            = ["sleep", "600"]
  placement_group_id = gpucloud_placement_group.pg.id
  timeouts {
    create = "3s"
  }
}`,
				ExpectError: regexp.MustCompile(`(?s)did not start.*still pending.*hosts`),
			},
		},
	})
}
