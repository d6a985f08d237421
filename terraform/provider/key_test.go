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

// Two ed25519 public keys (made for the tests; their private halves were
// thrown away).
const (
	testKey1 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFHoJHIwgkl8IdB4Ab0eQNNUYoiVI+MVdTAlEW+OTlpO tf@test"
	testKey2 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBK9bTzVWXdj2F4V6eKcyJ6J7BJ8Xwz2t3R1OTTeG4sZ tf@other"
)

// TestKey: create, read, import, drift (deleted out of band: the plan
// creates it again), replace on a change, destroy; every apply followed
// by an empty plan (terraform-plugin-testing checks it after each step).
func TestKey(t *testing.T) {
	c := sharedCloud(t)
	a := c.newTenant(t)
	cfg := func(name, key string) string {
		return a.config(fmt.Sprintf(`
resource "gpucloud_key" "k" {
  name       = %q
  public_key = %q
}`, name, key))
	}
	var id string
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		CheckDestroy:             checkGone(t, "gpucloud_key", func(id string) error { _, err := a.Client.GetKey(t.Context(), id); return err }),
		Steps: []resource.TestStep{
			{
				Config: cfg("laptop", testKey1),
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr("gpucloud_key.k", "name", "laptop"),
					resource.TestCheckResourceAttr("gpucloud_key.k", "type", "ssh-ed25519"),
					resource.TestMatchResourceAttr("gpucloud_key.k", "fingerprint", regexp.MustCompile(`^SHA256:`)),
					resource.TestCheckResourceAttrSet("gpucloud_key.k", "created_at"),
					saveID("gpucloud_key.k", &id),
				),
			},
			{ResourceName: "gpucloud_key.k", ImportState: true, ImportStateVerify: true},
			{
				// Deleted outside Terraform: the refresh drops it and
				// the plan creates it again.
				PreConfig: func() {
					if err := a.Client.DeleteKey(t.Context(), id); err != nil {
						t.Fatal(err)
					}
				},
				Config: cfg("laptop", testKey1),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("gpucloud_key.k", plancheck.ResourceActionCreate),
				}},
				Check: checkNewID("gpucloud_key.k", &id),
			},
			{
				// The API cannot change a key: a new one replaces it.
				Config: cfg("laptop", testKey2),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("gpucloud_key.k", plancheck.ResourceActionDestroyBeforeCreate),
				}},
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr("gpucloud_key.k", "public_key", testKey2),
					checkNewID("gpucloud_key.k", &id),
				),
			},
		},
	})
}

// saveID keeps the resource's ID in *id.
func saveID(name string, id *string) resource.TestCheckFunc {
	return func(s *terraform.State) error {
		rs, ok := s.RootModule().Resources[name]
		if !ok {
			return fmt.Errorf("%s not in state", name)
		}
		*id = rs.Primary.ID
		return nil
	}
}

// checkNewID checks that the resource's ID is not *id (it was created
// again) and keeps the new one.
func checkNewID(name string, id *string) resource.TestCheckFunc {
	return func(s *terraform.State) error {
		old := *id
		if err := saveID(name, id)(s); err != nil {
			return err
		}
		if *id == old {
			return fmt.Errorf("%s: still %s, want a new resource", name, old)
		}
		return nil
	}
}

// checkGone checks after destroy that every resource of type typ in the
// last state is gone from the server (get answers not_found).
func checkGone(t *testing.T, typ string, get func(id string) error) resource.TestCheckFunc {
	return func(s *terraform.State) error {
		for _, rs := range s.RootModule().Resources {
			if rs.Type != typ {
				continue
			}
			if err := get(rs.Primary.ID); !cloud.IsNotFound(err) {
				return fmt.Errorf("%s %s after destroy: %v, want not_found", typ, rs.Primary.ID, err)
			}
		}
		return nil
	}
}
