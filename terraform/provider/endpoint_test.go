package provider_test

import (
	"fmt"
	"regexp"
	"slices"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
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
// attribute its field names, and leaves no endpoint.
func TestEndpointCreateErrors(t *testing.T) {
	c := endpointCloud(t)
	for _, tc := range []struct {
		name, body string
		want       string
	}{
		{"an unknown offering", `
resource "gpucloud_endpoint" "bad" {
  name      = "bad"
  image     = "busybox:1"
  offerings = ["l4.1x", "no-such.1x"]
}`, `(?s)Cannot create the endpoint.*offerings\s+=.*invalid_argument`},
		{"a block volume", `
resource "gpucloud_volume" "disk" {
  name     = "disk"
  size_gib = 10
}
resource "gpucloud_endpoint" "bad" {
  name      = "bad"
  image     = "busybox:1"
  offerings = ["l4.1x"]
  volumes   = [gpucloud_volume.disk.id]
}`, `(?s)Cannot create the endpoint.*volumes\s+=\s+\[gpucloud_volume\.disk\.id\].*block volume.*invalid_argument`},
		{"a warm pool over max", `
resource "gpucloud_endpoint" "bad" {
  name      = "bad"
  image     = "busybox:1"
  offerings = ["l4.1x"]
  max       = 2
  warm      = 3
}`, `(?s)Cannot create the endpoint.*warm\s+=\s+3.*invalid_argument`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := c.newTenant(t)
			resource.Test(t, resource.TestCase{
				ProtoV6ProviderFactories: factories,
				Steps:                    []resource.TestStep{{Config: a.config(tc.body), ExpectError: regexp.MustCompile(tc.want)}},
			})
			if es, err := a.Client.Endpoints(t.Context(), "", true); err != nil || len(es) != 0 {
				t.Fatalf("endpoints after a refused create: %v, %v", es, err)
			}
		})
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

// warmConfig is an endpoint "pool" with the warm pool and the volumes
// given (HCL expressions), beside two shared volumes and a block one.
func warmConfig(tn *tenant, warm int, volumes string) string {
	return tn.config(fmt.Sprintf(`
resource "gpucloud_volume" "data" {
  name     = "data"
  size_gib = 10
  kind     = "shared"
}
resource "gpucloud_volume" "more" {
  name     = "more"
  size_gib = 10
  kind     = "shared"
}
resource "gpucloud_volume" "disk" {
  name     = "disk"
  size_gib = 10
}
resource "gpucloud_endpoint" "pool" {
  name      = "pool"
  image     = "busybox:1"
  offerings = ["l4.1x"]
  max       = 3
  warm      = %d
  volumes   = %s
}`, warm, volumes))
}

// TestEndpointWarmVolumes: an endpoint created with a warm pool and a
// shared volume of the same configuration; imported; warm changed in
// place (the same generation); the volumes changed in place (the
// workers roll over: generation 2); a block volume refused on volumes,
// changing nothing; destroy leaves nothing. Every apply is followed by
// an empty plan (the test framework's own check).
func TestEndpointWarmVolumes(t *testing.T) {
	c := endpointCloud(t)
	a := c.newTenant(t)
	var id, data, more string
	spec := func(warm int, vols ...*string) resource.TestCheckFunc {
		return func(*terraform.State) error {
			d, err := a.Client.GetEndpoint(t.Context(), id)
			if err != nil {
				return err
			}
			want := make([]string, len(vols))
			for i, v := range vols {
				want[i] = *v
			}
			if d.Spec.Warm != warm || !slices.Equal(d.Spec.Volumes, want) {
				return fmt.Errorf("endpoint %s: warm %d, volumes %v; want %d, %v", id, d.Spec.Warm, d.Spec.Volumes, warm, want)
			}
			return nil
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
				Config: warmConfig(a, 1, "[gpucloud_volume.data.id]"),
				Check: resource.ComposeAggregateTestCheckFunc(
					saveID("gpucloud_endpoint.pool", &id),
					saveID("gpucloud_volume.data", &data),
					saveID("gpucloud_volume.more", &more),
					resource.TestCheckResourceAttr("gpucloud_endpoint.pool", "warm", "1"),
					resource.TestCheckResourceAttr("gpucloud_endpoint.pool", "volumes.#", "1"),
					resource.TestCheckResourceAttrPair("gpucloud_endpoint.pool", "volumes.0", "gpucloud_volume.data", "id"),
					resource.TestCheckResourceAttr("gpucloud_endpoint.pool", "generation", "1"),
					spec(1, &data),
				),
			},
			{ResourceName: "gpucloud_endpoint.pool", ImportState: true, ImportStateVerify: true, ImportStateVerifyIgnore: []string{"timeouts", "image"}},
			{
				// warm in place: the same endpoint, the same generation.
				Config: warmConfig(a, 2, "[gpucloud_volume.data.id]"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("gpucloud_endpoint.pool", plancheck.ResourceActionUpdate),
					plancheck.ExpectKnownValue("gpucloud_endpoint.pool", tfjsonpath.New("generation"), knownvalue.Int64Exact(1)),
				}},
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttrPtr("gpucloud_endpoint.pool", "id", &id),
					resource.TestCheckResourceAttr("gpucloud_endpoint.pool", "warm", "2"),
					resource.TestCheckResourceAttr("gpucloud_endpoint.pool", "generation", "1"),
					spec(2, &data),
				),
			},
			{
				// Other volumes in place: the workers roll over.
				Config: warmConfig(a, 2, "[gpucloud_volume.more.id, gpucloud_volume.data.id]"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("gpucloud_endpoint.pool", plancheck.ResourceActionUpdate),
					plancheck.ExpectUnknownValue("gpucloud_endpoint.pool", tfjsonpath.New("generation")),
				}},
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttrPtr("gpucloud_endpoint.pool", "id", &id),
					resource.TestCheckResourceAttr("gpucloud_endpoint.pool", "generation", "2"),
					resource.TestCheckResourceAttrPair("gpucloud_endpoint.pool", "volumes.0", "gpucloud_volume.more", "id"),
					resource.TestCheckResourceAttrPair("gpucloud_endpoint.pool", "volumes.1", "gpucloud_volume.data", "id"),
					spec(2, &more, &data),
				),
			},
			{
				// A block volume: an error on volumes, and nothing changes.
				Config:      warmConfig(a, 0, "[gpucloud_volume.disk.id]"),
				ExpectError: regexp.MustCompile(`(?s)Cannot update the endpoint.*volumes\s+=\s+\[gpucloud_volume\.disk\.id\].*block volume.*invalid_argument`),
			},
			{
				Config:   warmConfig(a, 2, "[gpucloud_volume.more.id, gpucloud_volume.data.id]"),
				PlanOnly: true, // the failed update changed nothing
				Check:    spec(2, &more, &data),
			},
			{
				// Both dropped: warm back to 0, no volume (sent as []).
				Config: warmConfig(a, 0, "null"),
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr("gpucloud_endpoint.pool", "warm", "0"),
					resource.TestCheckNoResourceAttr("gpucloud_endpoint.pool", "volumes"),
					resource.TestCheckResourceAttr("gpucloud_endpoint.pool", "generation", "3"),
					spec(0),
				),
			},
		},
	})
}
