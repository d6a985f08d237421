package cli

import (
	"regexp"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/api"
)

// TestQuotaDefaultsAndRates: a new tenant shows the default quota; quotas
// set changes the per-model cap and the request rate, keeping what it is
// not given, and --reset goes back to no limits and the default rate.
func TestQuotaDefaultsAndRates(t *testing.T) {
	e := newCloudEnv(t)
	acme, tok := e.member("acme", "alice")
	out := e.ok(e.admin, "quotas", "get", "acme")
	for _, re := range []string{`(?m)^instances +64 +0$`, `(?m)^gpus per model +16 +-$`,
		`(?m)^requests per second +server default +-$`, `(?m)^burst +server default +-$`} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("a new tenant's quota lacks %s:\n%s", re, out)
		}
	}

	steps := []struct {
		args []string
		want api.QuotaSpec
	}{
		{[]string{"--requests-per-second", "200", "--burst", "2000"},
			api.QuotaSpec{Instances: 64, GPUsPerModel: 16, RequestsPerSecond: 200, Burst: 2000}},
		{[]string{"--gpus-per-model", "2.5", "--gpus", "H100=32"},
			api.QuotaSpec{Instances: 64, GPUsPerModel: 2.5, GPUs: map[string]float64{"H100-80GB-SXM": 32}, RequestsPerSecond: 200, Burst: 2000}},
		{[]string{"--burst", "0"},
			api.QuotaSpec{Instances: 64, GPUsPerModel: 2.5, GPUs: map[string]float64{"H100-80GB-SXM": 32}, RequestsPerSecond: 200}},
		{[]string{"--reset", "--instances", "3"}, api.QuotaSpec{Instances: 3}},
	}
	for _, s := range steps {
		e.ok(e.admin, append([]string{"quotas", "set", acme}, s.args...)...)
		var q api.QuotaStatus
		decodeJSON(t, e.ok(e.admin, "quotas", "get", "acme", "-o", "json"), &q)
		got := api.QuotaSpec{Instances: q.Instances, GPUs: q.GPUs, GPUsPerModel: q.GPUsPerModel, RequestsPerSecond: q.RequestsPerSecond, Burst: q.Burst}
		if len(got.GPUs) == 0 {
			got.GPUs = nil
		}
		if !quotaSpecEqual(got, s.want) {
			t.Errorf("after %v: %+v, want %+v", s.args, got, s.want)
		}
	}
	// A model without its own limit shows the per-model one.
	e.ok(e.admin, "quotas", "set", acme, "--gpus-per-model", "4")
	e.ok(tok, "instances", "create", "--offering", "l4.1x")
	if out := e.ok(tok, "quotas", "get", acme); !regexp.MustCompile(`(?m)^gpus L4 +4 +1$`).MatchString(out) {
		t.Errorf("member quotas get:\n%s", out)
	}
	code, _, errOut := e.as(tok, "quotas", "set", acme, "--requests-per-second", "1000")
	oneLine(t, code, errOut, "(permission_denied)")

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--gpus-per-model", "-1"}, "--gpus-per-model -1"},
		{[]string{"--gpus-per-model", "NaN"}, "--gpus-per-model NaN"},
		{[]string{"--requests-per-second", "-5"}, "--requests-per-second -5"},
		{[]string{"--burst", "-5"}, "--burst -5"},
	} {
		code, _, errOut := e.as(e.admin, append([]string{"quotas", "set", "acme"}, tc.args...)...)
		if code != ExitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, %q; want %q", tc.args, code, errOut, tc.want)
		}
	}
	code, _, errOut = e.as(e.admin, "quotas", "set", "acme")
	if code != ExitUsage || !strings.Contains(errOut, "--requests-per-second") {
		t.Errorf("nothing to set: exit %d, %q; want the new flags named", code, errOut)
	}
}

func quotaSpecEqual(a, b api.QuotaSpec) bool {
	if a.Instances != b.Instances || a.GPUsPerModel != b.GPUsPerModel || a.RequestsPerSecond != b.RequestsPerSecond ||
		a.Burst != b.Burst || len(a.GPUs) != len(b.GPUs) {
		return false
	}
	for k, v := range a.GPUs {
		if b.GPUs[k] != v {
			return false
		}
	}
	return true
}
