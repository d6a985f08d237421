package provider_test

import (
	"context"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/gpucloud/gpucloud/cloud"
)

// groupSettings are a group's spot mix, timing and idle release as a
// configuration writes them: a zero number is left out, a nil block is
// no block.
type groupSettings struct {
	spot                   bool
	base, percent, ratio   int
	rebalance              bool
	timing                 *cloud.GroupTiming
	idle                   *cloud.IdleRelease
	writeZeroSpotArguments bool // on_demand_base = 0 and on_demand_percent = 0 written out
}

// hcl is the settings' arguments and blocks.
func (s groupSettings) hcl() string {
	var b strings.Builder
	arg := func(name string, v any) { fmt.Fprintf(&b, "  %s = %v\n", name, v) }
	if s.spot {
		arg("spot", true)
	}
	if s.base != 0 || s.writeZeroSpotArguments {
		arg("on_demand_base", s.base)
	}
	if s.percent != 0 || s.writeZeroSpotArguments {
		arg("on_demand_percent", s.percent)
	}
	if s.ratio != 0 {
		arg("max_spot_price_ratio", s.ratio)
	}
	if s.rebalance {
		arg("capacity_rebalance", true)
	}
	if t := s.timing; t != nil {
		b.WriteString("  timing {\n")
		for _, f := range []struct {
			name string
			v    int
		}{{"cooldown_seconds", t.CooldownSeconds}, {"warmup_seconds", t.WarmupSeconds},
			{"stabilization_seconds", t.StabilizationSeconds}, {"notice_seconds", t.NoticeSeconds}} {
			if f.v != 0 {
				fmt.Fprintf(&b, "    %s = %d\n", f.name, f.v)
			}
		}
		b.WriteString("  }\n")
	}
	if ir := s.idle; ir != nil {
		fmt.Fprintf(&b, "  idle_release {\n    threshold    = %v\n    idle_seconds = %d\n  }\n", ir.Threshold, ir.IdleSeconds)
	}
	return b.String()
}

// check compares the group as the API holds it, and the state's
// attributes, with the settings.
func (s groupSettings) check(tn *tenant, id *string) resource.TestCheckFunc {
	name := "gpucloud_group.g"
	checks := []resource.TestCheckFunc{
		resource.TestCheckResourceAttr(name, "spot", fmt.Sprint(s.spot)),
		resource.TestCheckResourceAttr(name, "on_demand_base", fmt.Sprint(s.base)),
		resource.TestCheckResourceAttr(name, "on_demand_percent", fmt.Sprint(s.percent)),
		resource.TestCheckResourceAttr(name, "capacity_rebalance", fmt.Sprint(s.rebalance)),
		func(st *terraform.State) error {
			g, err := tn.Client.GetGroup(context.Background(), *id)
			if err != nil {
				return err
			}
			want := cloud.MixedInstances{Spot: s.spot, OnDemandBase: s.base, OnDemandPercent: s.percent, MaxSpotPriceRatio: s.ratio, CapacityRebalance: s.rebalance}
			if g.Mixed != want {
				return fmt.Errorf("group %s mixed %+v, want %+v", *id, g.Mixed, want)
			}
			var timing cloud.GroupTiming
			if s.timing != nil {
				timing = *s.timing
			}
			if g.Timing != timing {
				return fmt.Errorf("group %s timing %+v, want %+v", *id, g.Timing, timing)
			}
			if !reflect.DeepEqual(g.IdleRelease, s.idle) {
				return fmt.Errorf("group %s idle release %+v, want %+v", *id, g.IdleRelease, s.idle)
			}
			return nil
		},
	}
	if s.ratio == 0 {
		checks = append(checks, resource.TestCheckNoResourceAttr(name, "max_spot_price_ratio"))
	} else {
		checks = append(checks, resource.TestCheckResourceAttr(name, "max_spot_price_ratio", fmt.Sprint(s.ratio)))
	}
	if s.timing == nil {
		checks = append(checks, resource.TestCheckNoResourceAttr(name, "timing.cooldown_seconds"))
	} else if s.timing.CooldownSeconds != 0 {
		checks = append(checks, resource.TestCheckResourceAttr(name, "timing.cooldown_seconds", fmt.Sprint(s.timing.CooldownSeconds)))
	}
	if s.idle == nil {
		checks = append(checks, resource.TestCheckNoResourceAttr(name, "idle_release.threshold"))
	} else {
		checks = append(checks, resource.TestCheckResourceAttr(name, "idle_release.idle_seconds", fmt.Sprint(s.idle.IdleSeconds)))
	}
	return resource.ComposeAggregateTestCheckFunc(checks...)
}

// TestGroupSettings: a group created with every setting of its spot mix,
// timing and idle release; import gives them back; each changes in place
// (the same group, its version moving on) and the plan after each apply
// is empty (terraform-plugin-testing plans again after every step); the
// blocks removed go back to the server's defaults; spot settings without
// spot, and a bad idle release, are plan-time errors on their attribute
// that create nothing.
func TestGroupSettings(t *testing.T) {
	c := sharedCloud(t)
	a := c.newTenant(t)
	cfg := func(s groupSettings) string {
		return a.config(`
resource "gpucloud_group" "g" {
  name      = "settings"
  offerings = ["l4.1x"]
  command   = ["sleep", "600"]
  min       = 0
  max       = 2
` + s.hcl() + "}")
	}
	all := groupSettings{spot: true, base: 1, percent: 50, ratio: 70, rebalance: true,
		timing: &cloud.GroupTiming{CooldownSeconds: 600, WarmupSeconds: 120, StabilizationSeconds: 900, NoticeSeconds: 60},
		idle:   &cloud.IdleRelease{Threshold: 0.2, IdleSeconds: 600}}
	with := func(f func(s *groupSettings)) groupSettings {
		s := all
		t, ir := *all.timing, *all.idle
		s.timing, s.idle = &t, &ir
		f(&s)
		return s
	}
	// serverSame: the server already holds the change (an empty timing
	// block and none are the same defaults), so its version stays; the
	// plan is an update of the state alone, or no change where the
	// configuration writes the defaults out.
	updates := []struct {
		name       string
		s          groupSettings
		serverSame bool
		action     plancheck.ResourceActionType
	}{
		{"on_demand_base", with(func(s *groupSettings) { s.base = 2 }), false, plancheck.ResourceActionUpdate},
		{"on_demand_percent", with(func(s *groupSettings) { s.percent = 25 }), false, plancheck.ResourceActionUpdate},
		{"max_spot_price_ratio", with(func(s *groupSettings) { s.ratio = 90 }), false, plancheck.ResourceActionUpdate},
		{"capacity_rebalance", with(func(s *groupSettings) { s.rebalance = false }), false, plancheck.ResourceActionUpdate},
		{"timing.cooldown_seconds", with(func(s *groupSettings) { s.timing.CooldownSeconds = 60 }), false, plancheck.ResourceActionUpdate},
		{"timing.warmup_seconds", with(func(s *groupSettings) { s.timing.WarmupSeconds = 30 }), false, plancheck.ResourceActionUpdate},
		{"timing.stabilization_seconds", with(func(s *groupSettings) { s.timing.StabilizationSeconds = 45 }), false, plancheck.ResourceActionUpdate},
		{"timing.notice_seconds", with(func(s *groupSettings) { s.timing.NoticeSeconds = 300 }), false, plancheck.ResourceActionUpdate},
		{"timing: some defaults", with(func(s *groupSettings) { s.timing.WarmupSeconds, s.timing.NoticeSeconds = 0, 0 }), false, plancheck.ResourceActionUpdate},
		{"timing {} (every default)", with(func(s *groupSettings) { s.timing = &cloud.GroupTiming{} }), false, plancheck.ResourceActionUpdate},
		{"timing removed", with(func(s *groupSettings) { s.timing = nil }), true, plancheck.ResourceActionUpdate},
		{"idle_release.threshold", with(func(s *groupSettings) { s.idle.Threshold = 0.35 }), false, plancheck.ResourceActionUpdate},
		{"idle_release.idle_seconds", with(func(s *groupSettings) { s.idle.IdleSeconds = 1800 }), false, plancheck.ResourceActionUpdate},
		{"idle_release removed", with(func(s *groupSettings) { s.idle = nil }), false, plancheck.ResourceActionUpdate},
		{"max_spot_price_ratio removed", with(func(s *groupSettings) { s.ratio = 0 }), false, plancheck.ResourceActionUpdate},
		{"spot off", groupSettings{}, false, plancheck.ResourceActionUpdate},
		{"spot off, zero split written", groupSettings{writeZeroSpotArguments: true}, true, plancheck.ResourceActionNoop},
		{"spot and timing again", all, false, plancheck.ResourceActionUpdate},
	}
	var id string
	var version int64
	steps := []resource.TestStep{
		{
			Config: cfg(all),
			Check:  resource.ComposeAggregateTestCheckFunc(saveID("gpucloud_group.g", &id), all.check(a, &id), saveVersion(a, &id, &version)),
		},
		{ResourceName: "gpucloud_group.g", ImportState: true, ImportStateVerify: true, ImportStateVerifyIgnore: []string{"version"}},
	}
	for _, u := range updates {
		steps = append(steps, resource.TestStep{
			PreConfig: func() { t.Logf("update: %s", u.name) },
			Config:    cfg(u.s),
			ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
				plancheck.ExpectResourceAction("gpucloud_group.g", u.action),
			}},
			Check: resource.ComposeAggregateTestCheckFunc(
				resource.TestCheckResourceAttrPtr("gpucloud_group.g", "id", &id),
				u.s.check(a, &id),
				func(*terraform.State) error {
					g, err := a.Client.GetGroup(t.Context(), id)
					if err != nil {
						return err
					}
					if u.serverSame && g.Version != version {
						return fmt.Errorf("%s: group %s at version %d, was %d: the server had nothing to change", u.name, id, g.Version, version)
					}
					if !u.serverSame && g.Version <= version {
						return fmt.Errorf("%s: group %s at version %d, was %d: not updated", u.name, id, g.Version, version)
					}
					version = g.Version
					return nil
				},
			),
		})
		// Every form imports as it was written, bar an empty timing
		// block (the server holds no difference from none).
		if u.s.timing == nil || *u.s.timing != (cloud.GroupTiming{}) {
			steps = append(steps, resource.TestStep{ResourceName: "gpucloud_group.g", ImportState: true, ImportStateVerify: true, ImportStateVerifyIgnore: []string{"version"}})
		}
	}
	resource.Test(t, resource.TestCase{ProtoV6ProviderFactories: factories, Steps: steps})
}

// saveVersion keeps the group's version as the API has it.
func saveVersion(tn *tenant, id *string, version *int64) resource.TestCheckFunc {
	return func(*terraform.State) error {
		g, err := tn.Client.GetGroup(context.Background(), *id)
		if err != nil {
			return err
		}
		*version = g.Version
		return nil
	}
}

// TestGroupSettingsRefused: spot settings without spot = true (which the
// API refuses: an all on-demand group takes no split) and an idle
// release the API would refuse fail at plan time, naming the attribute,
// and create nothing.
func TestGroupSettingsRefused(t *testing.T) {
	c := sharedCloud(t)
	a := c.newTenant(t)
	for _, tc := range []struct {
		name, hcl, want string
	}{
		{"on_demand_base without spot", "on_demand_base = 1", `(?s)Error: on_demand_base needs spot = true.*line \d+.*on_demand_base = 1.*on_demand_base applies to the group's spot members only`},
		{"on_demand_percent with spot false", "spot = false\n  on_demand_percent = 50", `(?s)Error: on_demand_percent needs spot = true.*on_demand_percent = 50`},
		{"max_spot_price_ratio without spot", "max_spot_price_ratio = 80", `(?s)Error: max_spot_price_ratio needs spot = true.*max_spot_price_ratio = 80`},
		{"capacity_rebalance without spot", "capacity_rebalance = true", `(?s)Error: capacity_rebalance needs spot = true.*capacity_rebalance = true`},
		{"max_spot_price_ratio 0", "spot = true\n  max_spot_price_ratio = 0", `(?s)max_spot_price_ratio.*between 1 and 100`},
		{"on_demand_percent over 100", "spot = true\n  on_demand_percent = 101", `(?s)on_demand_percent.*between 0 and 100`},
		{"idle_release without idle_seconds", "idle_release {\n    threshold = 0.1\n  }", `(?s)Error: idle_release.idle_seconds is missing.*idle_release \{`},
		{"idle_release threshold 0", "idle_release {\n    threshold = 0\n    idle_seconds = 60\n  }", `(?s)Error: Invalid idle_release.threshold.*threshold = 0.*not strictly between 0 and 1`},
		{"idle_release threshold 1", "idle_release {\n    threshold = 1\n    idle_seconds = 60\n  }", `(?s)Error: Invalid idle_release.threshold.*threshold = 1.*not strictly between 0 and 1`},
		{"timing notice over an hour", "timing {\n    notice_seconds = 7200\n  }", `(?s)timing.notice_seconds.*between 1 and 3600`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resource.Test(t, resource.TestCase{
				ProtoV6ProviderFactories: factories,
				Steps: []resource.TestStep{{
					Config: a.config(`
resource "gpucloud_group" "g" {
  name      = "refused"
  offerings = ["l4.1x"]
  min       = 0
  max       = 1
  ` + tc.hcl + "\n}"),
					ExpectError: regexp.MustCompile(tc.want),
				}},
			})
		})
	}
	gs, err := a.Client.Groups(t.Context(), "")
	if err != nil || len(gs) != 0 {
		t.Errorf("groups after refused plans: %+v, %v", gs, err)
	}
}
