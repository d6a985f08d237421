package provider_test

import (
	"fmt"
	"regexp"
	"strconv"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
)

// decimal is a money attribute: a decimal string, never a float's
// exponent form.
var decimal = regexp.MustCompile(`^[0-9]+\.[0-9]{2,6}$`)

// TestMarketDataSources: gpucloud_offerings filtered by mode, model and
// availability (the fleet's two L4 hosts run l4.* and nothing else),
// gpucloud_offering by name (an unknown name is an error on name),
// gpucloud_prices (money as decimal strings), gpucloud_spot_price (a
// pool's current price) and gpucloud_advise (the selection matrix from
// the live market: the options ranked, every one that fits now an L4,
// the others excluded with their reasons; a bad workload is an error on
// its attribute).
func TestMarketDataSources(t *testing.T) {
	c := sharedCloud(t)
	a := c.newTenant(t)
	pool := c.spotPool(t)
	cfg := a.config(fmt.Sprintf(`
data "gpucloud_offerings" "l4" {
  model     = "l4"
  mode      = "gpu"
  available = true
}
data "gpucloud_offerings" "runnable" {
  available = true
}
data "gpucloud_offerings" "h100" {
  model = "h100"
}
data "gpucloud_offering" "one" {
  name = "l4.1x"
}
data "gpucloud_prices" "l4" {
  kind     = "compute"
  offering = "l4.1x"
}
data "gpucloud_spot_price" "pool" {
  offering = %q
}
data "gpucloud_advise" "serve" {
  params        = "7B"
  precision     = "int8"
  hours_per_day = 8
  days          = 30
}
data "gpucloud_advise" "train" {
  params           = "1B"
  task             = "train"
  days             = 3
  checkpoint_every = "30m"
  deadline         = "4d"
  budget           = "100000"
  top              = 3
}`, pool.Offering))
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: factories,
		Steps: []resource.TestStep{
			{
				Config: cfg,
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr("data.gpucloud_offerings.l4", "names.0", "l4.1x"),
					resource.TestCheckResourceAttr("data.gpucloud_offerings.l4", "offerings.0.model", "L4"),
					resource.TestCheckResourceAttr("data.gpucloud_offerings.l4", "offerings.0.hosts", "2"),
					resource.TestCheckResourceAttrSet("data.gpucloud_offerings.l4", "offerings.0.fits_now"),
					checkAll("data.gpucloud_offerings.runnable", "offerings", "model", regexp.MustCompile(`^(L4|)$`)),
					checkCount("data.gpucloud_offerings.h100", "offerings", func(n int) bool { return n > 0 }),
					checkAll("data.gpucloud_offerings.h100", "offerings", "model", regexp.MustCompile(`^H100`)),
					resource.TestCheckResourceAttr("data.gpucloud_offering.one", "gpus", "1"),
					resource.TestCheckResourceAttr("data.gpucloud_offering.one", "mode", "gpu"),
					resource.TestMatchResourceAttr("data.gpucloud_prices.l4", "prices.0.amount", decimal),
					resource.TestCheckResourceAttr("data.gpucloud_prices.l4", "prices.0.offering", "l4.1x"),
					resource.TestCheckResourceAttr("data.gpucloud_spot_price.pool", "zone", pool.Zone),
					resource.TestMatchResourceAttr("data.gpucloud_spot_price.pool", "price", decimal), // it clears every 500 ms
					resource.TestMatchResourceAttr("data.gpucloud_spot_price.pool", "on_demand", decimal),
					resource.TestCheckResourceAttr("data.gpucloud_advise.serve", "options.0.rank", "1"),
					resource.TestMatchResourceAttr("data.gpucloud_advise.serve", "options.0.total", decimal),
					resource.TestMatchResourceAttr("data.gpucloud_advise.serve", "source", regexp.MustCompile(`^live`)),
					// What fits now is the fleet's: L4s, ranked first.
					resource.TestCheckResourceAttr("data.gpucloud_advise.serve", "options.0.fits_now", "yes"),
					resource.TestMatchResourceAttr("data.gpucloud_advise.serve", "options.0.offering", regexp.MustCompile(`^l4\.`)),
					resource.TestCheckResourceAttrPair("data.gpucloud_advise.serve", "best_offering", "data.gpucloud_advise.serve", "options.0.offering"),
					checkCount("data.gpucloud_advise.serve", "excluded", func(n int) bool { return n > 0 }),
					checkCount("data.gpucloud_advise.train", "options", func(n int) bool { return n == 3 }),
				),
			},
			{
				Config:      a.config(`data "gpucloud_offering" "x" { name = "no.such" }`),
				ExpectError: regexp.MustCompile(`(?s)no offering no\.such`),
			},
			{
				Config:      a.config(`data "gpucloud_advise" "x" { params = "seven" }`),
				ExpectError: regexp.MustCompile(`(?s)with data\.gpucloud_advise\.x.*params`),
			},
			{
				Config:      a.config(`data "gpucloud_advise" "x" {` + "\n" + `params = "7B"` + "\n" + `task = "train"` + "\n" + `precision = "int4"` + "\n}"),
				ExpectError: regexp.MustCompile(`(?s)inference format`),
			},
			{
				Config:      a.config(fmt.Sprintf(`data "gpucloud_spot_price" "x" {`+"\n"+`offering = %q`+"\n"+`zone = "nowhere"`+"\n}", pool.Offering)),
				ExpectError: regexp.MustCompile(`(?s)no spot pool in zone nowhere`),
			},
		},
	})
}

// checkCount checks the number of elements of list attribute attr.
func checkCount(name, attr string, ok func(int) bool) resource.TestCheckFunc {
	return func(s *terraform.State) error {
		rs, found := s.RootModule().Resources[name]
		if !found {
			return fmt.Errorf("%s not in state", name)
		}
		n, err := strconv.Atoi(rs.Primary.Attributes[attr+".#"])
		if err != nil || !ok(n) {
			return fmt.Errorf("%s: %s.# = %q", name, attr, rs.Primary.Attributes[attr+".#"])
		}
		return nil
	}
}

// checkAll checks that field of every element of list attr matches re.
func checkAll(name, attr, field string, re *regexp.Regexp) resource.TestCheckFunc {
	return func(s *terraform.State) error {
		rs, found := s.RootModule().Resources[name]
		if !found {
			return fmt.Errorf("%s not in state", name)
		}
		n, _ := strconv.Atoi(rs.Primary.Attributes[attr+".#"])
		for i := range n {
			if v := rs.Primary.Attributes[fmt.Sprintf("%s.%d.%s", attr, i, field)]; !re.MatchString(v) {
				return fmt.Errorf("%s: %s.%d.%s = %q, want %s", name, attr, i, field, v, re)
			}
		}
		return nil
	}
}
