package provider_test

import (
	"fmt"
	"regexp"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/gpucloud/gpucloud/api"
)

// networkConfig is a network with a subnet, a group and its rules: SSH
// from a CIDR, everything from the group's own members, and port (a
// change replaces that rule only).
func networkConfig(tn *tenant, port int) string {
	return tn.config(fmt.Sprintf(`
resource "gpucloud_network" "net" {
  name = "train"
  cidr = "10.20.0.0/16"
}
resource "gpucloud_subnet" "a" {
  network_id = gpucloud_network.net.id
  name       = "a"
  cidr       = "10.20.1.0/24"
  zone       = "tf-a"
}
resource "gpucloud_security_group" "sg" {
  network_id  = gpucloud_network.net.id
  name        = "cluster"
  description = "the training cluster"
}
resource "gpucloud_security_group_rule" "ssh" {
  security_group_id = gpucloud_security_group.sg.id
  direction         = "ingress"
  protocol          = "tcp"
  from_port         = 22
  to_port           = 22
  cidr              = "0.0.0.0/0"
}
resource "gpucloud_security_group_rule" "self" {
  security_group_id      = gpucloud_security_group.sg.id
  direction              = "ingress"
  protocol               = "all"
  peer_security_group_id = gpucloud_security_group.sg.id
}
resource "gpucloud_security_group_rule" "out" {
  security_group_id = gpucloud_security_group.sg.id
  direction         = "egress"
  protocol          = "tcp"
  from_port         = %d
  to_port           = %d
  cidr              = "0.0.0.0/0"
  description       = "https"
}`, port, port))
}

// TestNetworking: a network, a subnet, a security group and three rules
// (created in parallel on one group: the provider's changes to a group
// take turns, each with the group's version as If-Match); import of each
// (a rule as GROUP/RULE); drift of a rule revoked and a subnet deleted out
// of band (both created again); a changed rule replaced alone; a rule
// added by another client between the provider's read and its authorize
// is a conflict, not an overwrite (TestRuleConflict); destroy.
func TestNetworking(t *testing.T) {
	c := sharedCloud(t)
	a := c.newTenant(t)
	var netID, subnetID, sgID, ruleID string
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		CheckDestroy: resource.ComposeAggregateTestCheckFunc(
			checkGone(t, "gpucloud_network", func(id string) error { _, err := a.Client.GetNetwork(t.Context(), id); return err }),
			checkGone(t, "gpucloud_subnet", func(id string) error { _, err := a.Client.GetSubnet(t.Context(), id); return err }),
			checkGone(t, "gpucloud_security_group", func(id string) error { _, err := a.Client.GetSecurityGroup(t.Context(), id); return err }),
		),
		Steps: []resource.TestStep{
			{
				Config: networkConfig(a, 443),
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttrSet("gpucloud_network.net", "vni"),
					resource.TestCheckResourceAttr("gpucloud_network.net", "default", "false"),
					resource.TestCheckResourceAttr("gpucloud_security_group_rule.self", "protocol", "all"),
					resource.TestCheckNoResourceAttr("gpucloud_security_group_rule.self", "from_port"),
					resource.TestCheckResourceAttrPair("gpucloud_security_group_rule.self", "peer_security_group_id", "gpucloud_security_group.sg", "id"),
					saveID("gpucloud_network.net", &netID),
					saveID("gpucloud_subnet.a", &subnetID),
					saveID("gpucloud_security_group.sg", &sgID),
					saveID("gpucloud_security_group_rule.ssh", &ruleID),
					func(_ *terraform.State) error {
						g, err := a.Client.GetSecurityGroup(t.Context(), sgID)
						if err != nil {
							return err
						}
						// The API's default egress rule, and ours.
						if len(g.Ingress) != 2 || len(g.Egress) != 2 {
							return fmt.Errorf("group has %d ingress and %d egress rules, want 2 and 2", len(g.Ingress), len(g.Egress))
						}
						return nil
					},
				),
			},
			{ResourceName: "gpucloud_network.net", ImportState: true, ImportStateVerify: true},
			{ResourceName: "gpucloud_subnet.a", ImportState: true, ImportStateVerify: true},
			{ResourceName: "gpucloud_security_group.sg", ImportState: true, ImportStateVerify: true},
			{ResourceName: "gpucloud_security_group_rule.out", ImportState: true, ImportStateVerify: true,
				ImportStateIdFunc: func(s *terraform.State) (string, error) {
					return s.RootModule().Resources["gpucloud_security_group_rule.out"].Primary.Attributes["security_group_id"] + "/" +
						s.RootModule().Resources["gpucloud_security_group_rule.out"].Primary.ID, nil
				}},
			{
				PreConfig: func() {
					g, err := a.Client.GetSecurityGroup(t.Context(), sgID)
					if err != nil {
						t.Fatal(err)
					}
					if _, err := a.Client.Revoke(t.Context(), sgID, api.RevokeRequest{RuleID: ruleID}, g.Version); err != nil {
						t.Fatal(err)
					}
				},
				Config: networkConfig(a, 443),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("gpucloud_security_group_rule.ssh", plancheck.ResourceActionCreate),
					plancheck.ExpectResourceAction("gpucloud_security_group_rule.out", plancheck.ResourceActionNoop),
					plancheck.ExpectResourceAction("gpucloud_security_group.sg", plancheck.ResourceActionNoop),
				}},
				Check: checkNewID("gpucloud_security_group_rule.ssh", &ruleID),
			},
			{
				Config: networkConfig(a, 8443),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("gpucloud_security_group_rule.out", plancheck.ResourceActionDestroyBeforeCreate),
					plancheck.ExpectResourceAction("gpucloud_security_group_rule.ssh", plancheck.ResourceActionNoop),
				}},
				Check: resource.TestCheckResourceAttr("gpucloud_security_group_rule.out", "from_port", "8443"),
			},
			{
				PreConfig: func() {
					if err := a.Client.DeleteSubnet(t.Context(), subnetID); err != nil {
						t.Fatal(err)
					}
				},
				Config: networkConfig(a, 8443),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("gpucloud_subnet.a", plancheck.ResourceActionCreate),
				}},
				Check: checkNewID("gpucloud_subnet.a", &subnetID),
			},
			{
				// A bad CIDR: the API's invalid_argument names the
				// attribute.
				Config:      networkConfig(a, 8443) + `resource "gpucloud_network" "bad" {` + "\n" + `  name = "bad"` + "\n" + `  cidr = "10.0.0.1/16"` + "\n}\n",
				ExpectError: regexp.MustCompile(`(?s)cidr.*invalid_argument`),
			},
		},
	})
}
