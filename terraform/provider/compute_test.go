package provider_test

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
)

// TestAddress: an address associated with a running instance; import of
// both; drift (disassociated out of band: the plan associates it again;
// released out of band: the plan allocates another and associates it);
// destroy releases it.
func TestAddress(t *testing.T) {
	c := sharedCloud(t)
	a := c.newTenant(t)
	cfg := a.config(`
resource "gpucloud_instance" "web" {
  offering = "l4.1x"
  command  = ["sleep", "600"]
}
resource "gpucloud_address" "ip" {
  zone = gpucloud_instance.web.zone
  tags = { role = "web" }
}
resource "gpucloud_address_association" "web" {
  address_id  = gpucloud_address.ip.id
  instance_id = gpucloud_instance.web.id
}`)
	var addr string
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		CheckDestroy: checkGone(t, "gpucloud_address", func(id string) error {
			ad, err := a.Client.GetAddress(t.Context(), id)
			if err == nil && ad.ReleasedAt != nil {
				return cloud.Errorf(cloud.NotFound, "released")
			}
			return err
		}),
		Steps: []resource.TestStep{
			{
				Config: cfg,
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestMatchResourceAttr("gpucloud_address.ip", "ip", regexp.MustCompile(`^\d+\.\d+\.\d+\.\d+$`)),
					resource.TestCheckResourceAttr("gpucloud_address.ip", "zone", "tf-a"),
					resource.TestCheckResourceAttrPair("gpucloud_address_association.web", "ip", "gpucloud_address.ip", "ip"),
					resource.TestCheckResourceAttrPair("gpucloud_address_association.web", "id", "gpucloud_address.ip", "id"),
					saveID("gpucloud_address.ip", &addr),
					func(*terraform.State) error {
						ad, err := a.Client.GetAddress(t.Context(), addr)
						if err != nil || ad.InstanceID == "" {
							return fmt.Errorf("address %s not associated: %+v, %v", addr, ad, err)
						}
						return nil
					},
				),
			},
			{ResourceName: "gpucloud_address.ip", ImportState: true, ImportStateVerify: true},
			{ResourceName: "gpucloud_address_association.web", ImportState: true, ImportStateVerify: true},
			{
				PreConfig: func() {
					if _, err := a.Client.DisassociateAddress(t.Context(), addr); err != nil {
						t.Fatal(err)
					}
				},
				Config: cfg,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("gpucloud_address_association.web", plancheck.ResourceActionCreate),
					plancheck.ExpectResourceAction("gpucloud_address.ip", plancheck.ResourceActionNoop),
				}},
			},
			{
				PreConfig: func() {
					if _, err := a.Client.ReleaseAddress(t.Context(), addr); err != nil {
						t.Fatal(err)
					}
				},
				Config: cfg,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("gpucloud_address.ip", plancheck.ResourceActionCreate),
					plancheck.ExpectResourceAction("gpucloud_address_association.web", plancheck.ResourceActionCreate),
				}},
				Check: checkNewID("gpucloud_address.ip", &addr),
			},
		},
	})
}

// TestSpotRequest: a spot job with a checkpoint volume: created and waited
// for until its instance runs with the volume attached; import; drift
// (cancelled out of band: the plan makes another); a new max_price
// replaces it; destroy cancels it and waits until its instance is
// terminated, so that the volume is deleted after it.
func TestSpotRequest(t *testing.T) {
	c := sharedCloud(t)
	a := c.newTenant(t)
	pool := c.spotPool(t)
	cfg := func(maxPrice string) string {
		return a.config(fmt.Sprintf(`
resource "gpucloud_volume" "ckpt" {
  name     = "ckpt"
  size_gib = 1
}
resource "gpucloud_spot_request" "job" {
  name                 = "train"
  type                 = "persistent"
  max_price            = %q
  volume_ids           = [gpucloud_volume.ckpt.id]
  command              = ["sleep", "600"]
  env                  = { CKPT = "/volumes/ckpt" }
  wait_for_fulfillment = true
  pool {
    offering = %q
  }
  timeouts {
    create = "1m"
  }
}`, maxPrice, pool.Offering))
	}
	var id string
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		CheckDestroy: resource.ComposeAggregateTestCheckFunc(
			checkGone(t, "gpucloud_spot_request", func(id string) error {
				sr, err := a.Client.GetSpotRequest(t.Context(), id)
				if err == nil && sr.State == cloud.SpotCancelled {
					if in, err := a.Client.GetInstance(t.Context(), sr.InstanceID); err == nil && in.State != cloud.Terminated {
						return fmt.Errorf("instance %s is %s", in.ID, in.State)
					}
					return cloud.Errorf(cloud.NotFound, "cancelled")
				}
				return err
			}),
			checkGone(t, "gpucloud_volume", func(id string) error { _, err := a.Client.GetVolume(t.Context(), id); return err }),
		),
		Steps: []resource.TestStep{
			{
				Config: cfg("50"),
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr("gpucloud_spot_request.job", "state", "active"),
					resource.TestCheckResourceAttr("gpucloud_spot_request.job", "max_price", "50"),
					resource.TestCheckResourceAttr("gpucloud_spot_request.job", "interruption", "terminate"),
					resource.TestCheckResourceAttr("gpucloud_spot_request.job", "launches", "1"),
					saveID("gpucloud_spot_request.job", &id),
					func(s *terraform.State) error {
						vol := s.RootModule().Resources["gpucloud_volume.ckpt"].Primary.ID
						inID := s.RootModule().Resources["gpucloud_spot_request.job"].Primary.Attributes["instance_id"]
						in, err := a.Client.GetInstance(t.Context(), inID)
						if err != nil || in.State != cloud.Running || in.Market != cloud.MarketSpot {
							return fmt.Errorf("spot instance %s: %+v, %v", inID, in, err)
						}
						v, err := a.Client.GetVolume(t.Context(), vol)
						if err != nil || v.InstanceID != inID {
							return fmt.Errorf("volume %s attached to %v (%v), want %s", vol, v, err, inID)
						}
						return nil
					},
				),
			},
			{ResourceName: "gpucloud_spot_request.job", ImportState: true, ImportStateVerify: true,
				ImportStateVerifyIgnore: []string{"wait_for_fulfillment", "timeouts", "max_price"}}, // max_price: 50.00, the same amount (sameAmount)
			{
				PreConfig: func() {
					if _, err := a.Client.CancelSpotRequest(t.Context(), id, true, 0); err != nil {
						t.Fatal(err)
					}
					waitTerminated(t, a, id)
				},
				Config: cfg("50"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("gpucloud_spot_request.job", plancheck.ResourceActionCreate),
				}},
				Check: checkNewID("gpucloud_spot_request.job", &id),
			},
			{
				Config: cfg("40.5"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("gpucloud_spot_request.job", plancheck.ResourceActionDestroyBeforeCreate),
				}},
				Check: resource.ComposeAggregateTestCheckFunc(
					checkNewID("gpucloud_spot_request.job", &id),
					resource.TestCheckResourceAttr("gpucloud_spot_request.job", "max_price", "40.5"),
				),
			},
		},
	})
}

// waitTerminated waits until the spot request's instance is terminated.
func waitTerminated(t *testing.T, tn *tenant, request string) {
	t.Helper()
	err := waitFor(30*time.Second, func() bool {
		sr, err := tn.Client.GetSpotRequest(t.Context(), request)
		if err != nil || sr.InstanceID == "" {
			return err == nil
		}
		in, err := tn.Client.GetInstance(t.Context(), sr.InstanceID)
		return err == nil && in.State == cloud.Terminated
	})
	if err != nil {
		t.Fatalf("spot request %s's instance: %v", request, err)
	}
}

// outOfBand is a plan check that makes a change outside Terraform
// between the plan and its apply (the saved plan is applied without a
// refresh): a concurrent change.
type outOfBand func(ctx context.Context) error

func (f outOfBand) CheckPlan(ctx context.Context, _ plancheck.CheckPlanRequest, resp *plancheck.CheckPlanResponse) {
	resp.Error = f(ctx)
}

// TestGroup: an autoscaling group with policies as nested blocks, created
// and waited for until its member runs; import; min, max, policies and
// the template changed in place (one update, the version moving on);
// a change made by another client between plan and apply is a conflict
// that says to apply again, and the next apply makes it; drift (deleted
// out of band: the plan makes another); destroy waits until it is
// deleted.
func TestGroup(t *testing.T) {
	c := sharedCloud(t)
	a := c.newTenant(t)
	cfg := func(max int, extra string) string {
		return a.config(fmt.Sprintf(`
resource "gpucloud_group" "serve" {
  name              = "serve"
  offerings         = ["l4.1x"]
  command           = ["sleep", "600"]
  min               = 1
  max               = %d
  wait_for_capacity = true
  budget_per_hour   = "100"
  instance_tags     = { app = "llm" }
  policy {
    name        = "nightly"
    type        = "scheduled"
    cron        = "0 3 1 1 *"
    set_desired = 1
  }
%s
  timeouts {
    create = "1m"
  }
}`, max, extra))
	}
	queuePolicy := `
  policy {
    name   = "queue"
    type   = "step"
    metric = "custom:queue"
    target = 4
    step {
      lower          = 0
      change_percent = 50
    }
    step {
      upper          = 0
      change_percent = -25
    }
  }`
	var id string
	var version int64
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		CheckDestroy: checkGone(t, "gpucloud_group", func(id string) error {
			g, err := a.Client.GetGroup(t.Context(), id)
			if err == nil && g.State == cloud.GroupDeleted {
				return cloud.Errorf(cloud.NotFound, "deleted")
			}
			if err == nil {
				return fmt.Errorf("group %s is %s", id, g.State)
			}
			return err
		}),
		Steps: []resource.TestStep{
			{
				Config: cfg(2, ""),
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr("gpucloud_group.serve", "desired", "1"),
					resource.TestCheckResourceAttr("gpucloud_group.serve", "state", "active"),
					resource.TestCheckResourceAttr("gpucloud_group.serve", "policy.0.set_desired", "1"),
					resource.TestCheckResourceAttr("gpucloud_group.serve", "budget_per_hour", "100"),
					saveID("gpucloud_group.serve", &id),
					func(*terraform.State) error {
						g, err := a.Client.GetGroup(t.Context(), id)
						if err != nil || len(g.Members) != 1 || g.Members[0].State != cloud.Running {
							return fmt.Errorf("group %s members: %+v, %v", id, g, err)
						}
						version = g.Version
						return nil
					},
				),
			},
			{ResourceName: "gpucloud_group.serve", ImportState: true, ImportStateVerify: true,
				ImportStateVerifyIgnore: []string{"wait_for_capacity", "timeouts", "version", "budget_per_hour"}}, // 100.00: the same amount
			{
				// An update in place, not a new group.
				Config: cfg(3, queuePolicy),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("gpucloud_group.serve", plancheck.ResourceActionUpdate),
				}},
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttrPtr("gpucloud_group.serve", "id", &id),
					resource.TestCheckResourceAttr("gpucloud_group.serve", "max", "3"),
					resource.TestCheckResourceAttr("gpucloud_group.serve", "policy.1.step.1.change_percent", "-25"),
					func(*terraform.State) error {
						g, err := a.Client.GetGroup(t.Context(), id)
						if err != nil || g.Max != 3 || len(g.Policies) != 2 || g.Version <= version {
							return fmt.Errorf("group %s after update: %+v, %v (version was %d)", id, g, err, version)
						}
						return nil
					},
				),
			},
			{
				// Another client changes the group between plan and
				// apply: the apply fails with a conflict, changing
				// nothing.
				Config: cfg(4, queuePolicy),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					outOfBand(func(ctx context.Context) error {
						g, err := a.Client.GetGroup(ctx, id)
						if err != nil {
							return err
						}
						_, err = a.Client.UpdateGroup(ctx, id, api.UpdateGroupRequest{Max: new(5)}, g.Version)
						return err
					}),
				}},
				ExpectError: regexp.MustCompile(`(?s)The group changed since Terraform read it.*apply again`),
			},
			{
				Config: cfg(4, queuePolicy),
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr("gpucloud_group.serve", "max", "4"),
					resource.TestCheckResourceAttrPtr("gpucloud_group.serve", "id", &id),
				),
			},
			{
				PreConfig: func() {
					if _, err := a.Client.DeleteGroup(t.Context(), id, 0); err != nil {
						t.Fatal(err)
					}
				},
				Config: cfg(4, queuePolicy),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("gpucloud_group.serve", plancheck.ResourceActionCreate),
				}},
				Check: checkNewID("gpucloud_group.serve", &id),
			},
		},
	})
}

// TestCommitment: a reservation bought with its fees as decimal strings;
// import; a plan that would destroy it (removed from the configuration)
// or replace it (another quantity) fails before its term ends, saying
// when it ends; a removed block with destroy = false forgets it, and it
// stays bought.
func TestCommitment(t *testing.T) {
	c := sharedCloud(t)
	a := c.newTenant(t)
	cfg := func(qty int) string {
		return a.config(fmt.Sprintf(`
resource "gpucloud_commitment" "r" {
  plan     = "reservation"
  offering = "l4.1x"
  quantity = %d
  term     = "1h"
  tags     = { team = "ml" }
}`, qty))
	}
	var id string
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{
			{
				Config: cfg(1),
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr("gpucloud_commitment.r", "payment", "no_upfront"),
					resource.TestMatchResourceAttr("gpucloud_commitment.r", "hourly_fee", decimal),
					resource.TestMatchResourceAttr("gpucloud_commitment.r", "upfront_fee", decimal),
					resource.TestCheckResourceAttrSet("gpucloud_commitment.r", "end"),
					saveID("gpucloud_commitment.r", &id),
				),
			},
			{ResourceName: "gpucloud_commitment.r", ImportState: true, ImportStateVerify: true},
			{
				Config:      a.config(""),
				ExpectError: regexp.MustCompile(`(?s)cannot be destroyed before its term ends.*runs\s+until\s+\d{4}-.*would\s+destroy\s+it`),
			},
			{
				Config:      cfg(2),
				ExpectError: regexp.MustCompile(`(?s)cannot be destroyed before its term ends.*would\s+replace\s+\(a\s+change\s+of.*quantity`),
			},
			{
				Config: a.config(`
removed {
  from = gpucloud_commitment.r
  lifecycle {
    destroy = false
  }
}`),
				Check: func(*terraform.State) error {
					cm, err := a.Client.GetCommitment(t.Context(), id)
					if err != nil || cm.Quantity != 1 {
						return fmt.Errorf("commitment %s after removed: %+v, %v", id, cm, err)
					}
					return nil
				},
			},
		},
	})
}
