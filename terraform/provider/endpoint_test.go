package provider_test

import (
	"fmt"
	"regexp"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
)

// endpointConfig is a queue-mode endpoint "echo" with the image and max
// given, and an HTTP-mode one "web" beside it.
func endpointConfig(tn *tenant, image string, max int) string {
	return tn.config(fmt.Sprintf(`
resource "gpucloud_endpoint" "echo" {
  name      = "echo"
  image     = %q
  offerings = ["l4.1x"]
  command   = ["/usr/local/bin/echoworker"]
  env       = { GREETING = "hi" }
  min       = 0
  max       = %d
  retries   = 1
}
resource "gpucloud_endpoint" "web" {
  name      = "web"
  mode      = "http"
  image     = "busybox:1"
  offerings = ["l4.1x"]
  port      = 9000
}`, image, max))
}

// TestEndpoint: two endpoints (queue and HTTP mode, min 0: no worker)
// created with the server's defaults filled in and their URLs; import by
// ID and by name; max changed in place (the same endpoint, generation
// 1); a new image in place (generation 2); a bad max is an error on max
// and changes nothing; drift (deleted out of band: the plan makes
// another); destroy waits until both are deleted.
func TestEndpoint(t *testing.T) {
	c := endpointCloud(t)
	a := c.newTenant(t)
	var id, webID string
	getEndpoint := func(want func(*api.EndpointDetail) error) resource.TestCheckFunc {
		return func(*terraform.State) error {
			d, err := a.Client.GetEndpoint(t.Context(), id)
			if err != nil {
				return err
			}
			return want(d)
		}
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		CheckDestroy: checkGone(t, "gpucloud_endpoint", func(id string) error {
			d, err := a.Client.GetEndpoint(t.Context(), id)
			if err == nil && d.State == cloud.EndpointDeleted {
				return cloud.Errorf(cloud.NotFound, "deleted")
			}
			if err == nil {
				return fmt.Errorf("endpoint %s is %s", id, d.State)
			}
			return err
		}),
		Steps: []resource.TestStep{
			{
				Config: endpointConfig(a, "busybox:1", 2),
				Check: resource.ComposeAggregateTestCheckFunc(
					saveID("gpucloud_endpoint.echo", &id),
					saveID("gpucloud_endpoint.web", &webID),
					resource.TestMatchResourceAttr("gpucloud_endpoint.echo", "id", regexp.MustCompile(`^ep-`)),
					resource.TestCheckResourceAttr("gpucloud_endpoint.echo", "state", "active"),
					resource.TestCheckResourceAttr("gpucloud_endpoint.echo", "generation", "1"),
					resource.TestCheckResourceAttr("gpucloud_endpoint.echo", "image", "busybox:1"),
					resource.TestCheckResourceAttr("gpucloud_endpoint.echo", "mode", "queue"),
					resource.TestCheckResourceAttr("gpucloud_endpoint.echo", "port", "8080"),
					resource.TestCheckResourceAttr("gpucloud_endpoint.echo", "health_path", "/health"),
					resource.TestCheckResourceAttr("gpucloud_endpoint.echo", "concurrency", "1"),
					resource.TestCheckResourceAttr("gpucloud_endpoint.echo", "retries", "1"),
					resource.TestCheckResourceAttr("gpucloud_endpoint.echo", "url", c.srv.URL+"/v1/endpoints/echo/run"),
					resource.TestCheckResourceAttr("gpucloud_endpoint.web", "url", c.srv.URL+"/v1/endpoints/web/http/"),
					resource.TestCheckResourceAttr("gpucloud_endpoint.web", "max", "3"), // max(3, min)
					resource.TestCheckResourceAttr("gpucloud_endpoint.web", "port", "9000"),
					getEndpoint(func(d *api.EndpointDetail) error {
						s := d.Spec
						if s.Image != "docker.io/library/busybox:1" || s.Max != 2 || s.Min != 0 || s.Env["GREETING"] != "hi" || len(d.Workers) != 0 {
							return fmt.Errorf("endpoint %s: %+v, %d workers", id, s, len(d.Workers))
						}
						return nil
					}),
				),
			},
			// An import reads the image in its canonical form
			// (docker.io/library/busybox:1): the form written is not
			// on the server.
			{ResourceName: "gpucloud_endpoint.echo", ImportState: true, ImportStateVerify: true, ImportStateVerifyIgnore: []string{"timeouts", "image"}},
			{ResourceName: "gpucloud_endpoint.web", ImportState: true, ImportStateId: "web", ImportStateVerify: true, ImportStateVerifyIgnore: []string{"timeouts", "image"}},
			{
				// max in place: the same endpoint, the same generation.
				Config: endpointConfig(a, "busybox:1", 4),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("gpucloud_endpoint.echo", plancheck.ResourceActionUpdate),
					plancheck.ExpectResourceAction("gpucloud_endpoint.web", plancheck.ResourceActionNoop),
				}},
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttrPtr("gpucloud_endpoint.echo", "id", &id),
					resource.TestCheckResourceAttr("gpucloud_endpoint.echo", "max", "4"),
					resource.TestCheckResourceAttr("gpucloud_endpoint.echo", "generation", "1"),
					getEndpoint(func(d *api.EndpointDetail) error {
						if d.Spec.Max != 4 || d.Status.Generation != 1 {
							return fmt.Errorf("endpoint %s after update: max %d, generation %d", id, d.Spec.Max, d.Status.Generation)
						}
						return nil
					}),
				),
			},
			{
				// A new image in place: generation 2, the workers roll over.
				Config: endpointConfig(a, "busybox:1.36", 4),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("gpucloud_endpoint.echo", plancheck.ResourceActionUpdate),
					plancheck.ExpectUnknownValue("gpucloud_endpoint.echo", tfjsonpath.New("generation")),
				}},
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttrPtr("gpucloud_endpoint.echo", "id", &id),
					resource.TestCheckResourceAttr("gpucloud_endpoint.echo", "generation", "2"),
					resource.TestCheckResourceAttr("gpucloud_endpoint.echo", "image", "busybox:1.36"),
					getEndpoint(func(d *api.EndpointDetail) error {
						if d.Spec.Image != "docker.io/library/busybox:1.36" || d.Status.Generation != 2 || d.Spec.Max != 4 {
							return fmt.Errorf("endpoint %s after the new image: %+v, generation %d", id, d.Spec, d.Status.Generation)
						}
						return nil
					}),
				),
			},
			{
				// Bad input: an error on max, naming the line, and nothing
				// changes.
				Config:      endpointConfig(a, "busybox:1.36", 200),
				ExpectError: regexp.MustCompile(`(?s)Cannot update the endpoint.*max\s+=\s+200.*invalid_argument`),
			},
			{
				Config:   endpointConfig(a, "busybox:1.36", 4),
				PlanOnly: true, // the failed update changed nothing
			},
			{
				// Deleted out of band: the plan makes another.
				PreConfig: func() {
					if _, err := a.Client.DeleteEndpoint(t.Context(), id); err != nil {
						t.Fatal(err)
					}
				},
				Config: endpointConfig(a, "busybox:1.36", 4),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("gpucloud_endpoint.echo", plancheck.ResourceActionCreate),
				}},
				Check: resource.ComposeAggregateTestCheckFunc(
					checkNewID("gpucloud_endpoint.echo", &id),
					resource.TestCheckResourceAttr("gpucloud_endpoint.echo", "generation", "1"),
				),
			},
		},
	})
	// Destroyed: the tenant has no endpoint left.
	es, err := a.Client.Endpoints(t.Context(), "", false)
	if err != nil || len(es) != 0 {
		t.Fatalf("live endpoints after destroy: %v, %v", es, err)
	}
}

// TestEndpointCreateErrors: a create the API refuses is an error on the
// attribute its field names, and leaves nothing.
func TestEndpointCreateErrors(t *testing.T) {
	c := endpointCloud(t)
	a := c.newTenant(t)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{{
			Config: a.config(`
resource "gpucloud_endpoint" "bad" {
  name      = "bad"
  image     = "busybox:1"
  offerings = ["l4.1x", "no-such.1x"]
}`),
			ExpectError: regexp.MustCompile(`(?s)Cannot create the endpoint.*offerings\s+=.*invalid_argument`),
		}},
	})
	if es, err := a.Client.Endpoints(t.Context(), "", true); err != nil || len(es) != 0 {
		t.Fatalf("endpoints after a refused create: %v, %v", es, err)
	}
}

// TestEndpointNeedsContainers: on a cloud without a container host (the
// shared cloud's hosts run processes) the server refuses an endpoint,
// and the provider says why; the reason endpointCloud exists.
func TestEndpointNeedsContainers(t *testing.T) {
	c := sharedCloud(t)
	a := c.newTenant(t)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{{
			Config: a.config(`
resource "gpucloud_endpoint" "x" {
  name      = "x"
  image     = "busybox:1"
  offerings = ["l4.1x"]
}`),
			ExpectError: regexp.MustCompile(`(?s)Cannot create the endpoint.*no host of this cloud runs\s+containers`),
		}},
	})
}

// TestEndpointTenantIsolation: tenant B's provider can import tenant A's
// endpoint neither by ID nor by name (not_found, as for none), nor read
// it through the API; A's own provider imports it by name.
func TestEndpointTenantIsolation(t *testing.T) {
	c := endpointCloud(t)
	a, b := c.newTenant(t), c.newTenant(t)
	e, err := a.Client.CreateEndpoint(t.Context(), api.CreateEndpointRequest{Name: "private",
		EndpointSpec: cloud.EndpointSpec{Image: "busybox:1", Offerings: []string{"l4.1x"}}}, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Client.DeleteEndpoint(t.Context(), e.ID) })
	body := `
resource "gpucloud_endpoint" "theirs" {
  name      = "private"
  image     = "busybox:1"
  offerings = ["l4.1x"]
}`
	var steps []resource.TestStep
	for _, ref := range []string{e.ID, "private"} {
		steps = append(steps, resource.TestStep{
			Config:        b.config(body),
			ResourceName:  "gpucloud_endpoint.theirs",
			ImportState:   true,
			ImportStateId: ref,
			ExpectError:   regexp.MustCompile(`(?s)Cannot import endpoint.*\(not_found\)`),
		})
	}
	resource.Test(t, resource.TestCase{ProtoV6ProviderFactories: factories, Steps: steps})
	if _, err := b.Client.GetEndpoint(t.Context(), e.ID); !cloud.IsNotFound(err) {
		t.Fatalf("tenant B reads A's endpoint: %v, want not_found", err)
	}
	resource.Test(t, resource.TestCase{ProtoV6ProviderFactories: factories, Steps: []resource.TestStep{{
		Config:        a.config(body),
		ResourceName:  "gpucloud_endpoint.theirs",
		ImportState:   true,
		ImportStateId: "private",
		ImportStateCheck: func(is []*terraform.InstanceState) error {
			if len(is) != 1 || is[0].ID != e.ID || is[0].Attributes["name"] != "private" {
				return fmt.Errorf("imported %v, want endpoint %s", is, e.ID)
			}
			return nil
		},
	}}})
}
