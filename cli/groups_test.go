package cli

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
	"github.com/gpucloud/gpucloud/service"
)

// launchMember launches member seq of group id as the group controller
// would.
func (e *cloudEnv) launchMember(id string, seq int64) *cloud.Instance {
	e.t.Helper()
	ctx := context.Background()
	var in *cloud.Instance
	if err := e.st.Tx(ctx, func(tx cloud.Tx) error {
		g, err := tx.GetGroup(ctx, id)
		if err != nil {
			return err
		}
		in, err = service.LaunchGroupMember(ctx, tx, catalog.Default(), g, service.LaunchSpec{Offering: g.Template.Offerings[0], Seq: seq}, "groups", e.clock.Now())
		return err
	}); err != nil {
		e.t.Fatal(err)
	}
	return in
}

func TestGroupsCreateFromFlags(t *testing.T) {
	e := newCloudEnv(t)
	_, tok := e.member("acme", "alice")
	var g cloud.Group
	decodeJSON(t, e.ok(tok, "groups", "create", "web", "--offering", "l4.1x", "--offering", "L40S.1x", "--min", "1", "--max", "4",
		"--desired", "2", "--target-gpu", "0.6", "--target-metric", "custom:queue=10",
		"--schedule", "cron=0 8,20 * * 1-5,tz=Asia/Shanghai,desired=0", "--predictive=forecast-only",
		"--gpucloud", "demand_gpus=8", "--spot", "--on-demand-base", "1", "--on-demand-percent", "25", "--max-spot-price-ratio", "70", "--capacity-rebalance",
		"--budget", "12.50", "--idle-release", "0.1:30m", "--volume-gib", "20", "--env", "A=1", "--tag", "team=web",
		"--zone", "zone-a", "--label", "driver>=550", "--image", "ghcr.io/acme/web:1",
		"--warmup", "2m", "--cooldown", "3m", "--stabilization", "4m", "--notice", "1m", "-o", "json", "--", "python", "serve.py"), &g)
	zero := 0
	wantPolicies := []cloud.ScalingPolicy{
		{Name: "target-gpu", Type: cloud.PolicyTarget, Metric: cloud.MetricGPUUtilization, Target: 0.6},
		{Name: "target-queue", Type: cloud.PolicyTarget, Metric: "custom:queue", Target: 10},
		{Name: "schedule-1", Type: cloud.PolicyScheduled, Cron: "0 8,20 * * 1-5", TimeZone: "Asia/Shanghai", SetDesired: &zero},
		{Name: "predictive", Type: cloud.PolicyPredictive, Metric: cloud.MetricGPUUtilization, Target: 0.6, ForecastOnly: true},
		{Name: "gpucloud", Type: cloud.PolicyGPUCloud, Metric: "custom:demand_gpus", Target: 8},
	}
	wantTemplate := cloud.GroupTemplate{Offerings: []string{"l4.1x", "l40s.1x"}, Image: "ghcr.io/acme/web:1",
		Command: []string{"python", "serve.py"}, Env: map[string]string{"A": "1"}, Zones: []string{"zone-a"},
		Labels: []string{"driver>=550"}, Tags: map[string]string{"team": "web"}, VolumeGiB: 20}
	if g.Name != "web" || g.Min != 1 || g.Max != 4 || g.Desired != 2 || !reflect.DeepEqual(g.Policies, wantPolicies) ||
		!reflect.DeepEqual(g.Template, wantTemplate) ||
		g.Mixed != (cloud.MixedInstances{Spot: true, OnDemandBase: 1, OnDemandPercent: 25, MaxSpotPriceRatio: 70, CapacityRebalance: true}) ||
		g.Timing != (cloud.GroupTiming{WarmupSeconds: 120, CooldownSeconds: 180, StabilizationSeconds: 240, NoticeSeconds: 60}) ||
		g.BudgetPerHour != money.MustParse("12.50") || g.IdleRelease == nil || *g.IdleRelease != (cloud.IdleRelease{Threshold: 0.1, IdleSeconds: 1800}) {
		t.Errorf("created %+v", g)
	}

	// List, as a table.
	out := e.ok(tok, "groups", "list")
	if !strings.Contains(out, g.ID) || !strings.Contains(out, "spot mix") || !strings.Contains(out, "target-gpu,target-queue") {
		t.Errorf("list:\n%s", out)
	}

	// Describe by name, with a protected member.
	in := e.launchMember(g.ID, 1)
	if out := e.ok(tok, "instances", "protect", in.ID); !strings.Contains(out, in.ID) {
		t.Errorf("protect:\n%s", out)
	}
	out = e.ok(tok, "groups", "describe", "web")
	for _, s := range []string{"Size:", "min 1, desired 2, max 4 (0 running, 1 other)", "Offerings:", "l4.1x, l40s.1x",
		"target-gpu: hold gpu_utilization at 60%", "target-queue: hold custom:queue at 10 per member",
		`schedule-1: at "0 8,20 * * 1-5" Asia/Shanghai sets desired=0`, "forecast only",
		"spot above 1 on demand and 25% on demand, spot up to 70% of on demand, capacity rebalance",
		"cooldown 3m0s, warmup 2m0s, stabilization 4m0s, notice 1m0s", "$12.5000/h", "under 10% GPU for 30m0s",
		"Volume:", "20 GiB per member", "Members:", in.ID, "web-1", "protected", "Decisions: none", "Events:", "group web created"} {
		if !strings.Contains(out, s) {
			t.Errorf("describe lacks %q:\n%s", s, out)
		}
	}
	if out := e.ok(tok, "instances", "unprotect", in.ID, "-o", "json"); strings.Contains(out, "scale_in") {
		t.Errorf("unprotect:\n%s", out)
	}

	// Set desired, then describe shows the decision.
	e.ok(tok, "groups", "set-desired", "web", "3")
	out = e.ok(tok, "groups", "describe", g.ID)
	if !strings.Contains(out, "2 -> 3") || !strings.Contains(out, "manual") {
		t.Errorf("describe after set-desired:\n%s", out)
	}
	code, _, errOut := e.as(tok, "groups", "set-desired", "web", "9")
	if code != ExitError || !strings.Contains(errOut, "min 1, max 4") {
		t.Errorf("set-desired 9: %d %q", code, errOut)
	}

	// Update: flags change only what they name.
	var up cloud.Group
	decodeJSON(t, e.ok(tok, "groups", "update", "web", "--max", "6", "--budget", "0", "--idle-release", "off", "--cooldown", "1m", "-o", "json"), &up)
	if up.Max != 6 || up.BudgetPerHour != 0 || up.IdleRelease != nil || up.Timing.CooldownSeconds != 60 || up.Timing.WarmupSeconds != 120 ||
		len(up.Policies) != 5 || !up.Mixed.Spot {
		t.Errorf("update = %+v", up)
	}
	decodeJSON(t, e.ok(tok, "groups", "update", "web", "--target-cpu", "0.5", "--offering", "l40s.1x", "-o", "json", "--", "python", "v2.py"), &up)
	if len(up.Policies) != 1 || up.Policies[0].Metric != cloud.MetricCPUUtilization || !reflect.DeepEqual(up.Template.Offerings, []string{"l40s.1x"}) ||
		!reflect.DeepEqual(up.Template.Command, []string{"python", "v2.py"}) || up.Template.VolumeGiB != 20 {
		t.Errorf("update policies and template = %+v", up)
	}
	var none cloud.Group
	decodeJSON(t, e.ok(tok, "groups", "update", "web", "--no-policies", "-o", "json"), &none)
	if len(none.Policies) != 0 || none.Version != up.Version+1 {
		t.Errorf("--no-policies = %+v", none)
	}

	// Metrics.
	if out := e.ok(tok, "metrics", "put", "web", "queue=42", "custom:rps=1.5"); out != "stored 2 points for group web ("+g.ID+"), measured now: queue=42, rps=1.5\n" {
		t.Errorf("metrics put: %q", out)
	}
	if n := e.Rows().Metrics; n != 2 {
		t.Errorf("%d metric points, want 2", n)
	}
	code, _, errOut = e.as(tok, "metrics", "put", "web", "Queue=1")
	if code != ExitError || !strings.Contains(errOut, "metrics[0].name") {
		t.Errorf("metrics put Queue=1: %d %q", code, errOut)
	}

	// Delete --wait returns once the controller marks the group deleted.
	wait := e.start(tok, "groups", "delete", "web", "--wait", "-o", "json")
	e.askedAgain("GET /v1/groups/" + g.ID)
	if err := e.st.Tx(context.Background(), func(tx cloud.Tx) error {
		cur, err := tx.GetGroup(context.Background(), g.ID)
		if err != nil {
			return err
		}
		cur.State, cur.Min, cur.Desired = cloud.GroupDeleted, 0, 0
		return tx.UpdateGroup(context.Background(), cur)
	}); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = wait()
	if code != 0 || !strings.Contains(out, `"state": "deleted"`) {
		t.Errorf("delete --wait: %d %s %s", code, out, errOut)
	}
	if out := e.ok(tok, "groups", "list"); strings.TrimSpace(out) != "no groups" {
		t.Errorf("list after delete: %q", out)
	}
	if out := e.ok(tok, "groups", "list", "--state", "deleted"); !strings.Contains(out, g.ID) {
		t.Errorf("list --state deleted: %q", out)
	}
}

func TestGroupsCreateFromFile(t *testing.T) {
	e := newCloudEnv(t)
	_, tok := e.member("acme", "alice")
	file := filepath.Join(t.TempDir(), "web.yaml")
	if err := os.WriteFile(file, []byte(`name: web
template:
  offerings: [l4.1x]
  command: [python, serve.py]
min: 1
max: 3
policies:
  - type: target
    metric: custom:queue
    target: 5
budget_per_hour: 2.50
`), 0o600); err != nil {
		t.Fatal(err)
	}
	var g cloud.Group
	decodeJSON(t, e.ok(tok, "groups", "create", "-f", file, "--idempotency-key", "k1", "-o", "json"), &g)
	if g.Name != "web" || g.Max != 3 || g.Desired != 1 || len(g.Policies) != 1 || g.Policies[0].Name != "target" ||
		g.BudgetPerHour != money.MustParse("2.50") {
		t.Errorf("from file = %+v", g)
	}
	// The same key answers the same group; a name given overrides the file's.
	var again cloud.Group
	decodeJSON(t, e.ok(tok, "groups", "create", "-f", file, "--idempotency-key", "k1", "-o", "json"), &again)
	if again.ID != g.ID {
		t.Errorf("retry made %s, want %s", again.ID, g.ID)
	}
	var other cloud.Group
	decodeJSON(t, e.ok(tok, "groups", "create", "api", "-f", file, "-o", "json"), &other)
	if other.Name != "api" || other.ID == g.ID {
		t.Errorf("named create from file = %+v", other)
	}
	// An update from a file.
	patch := filepath.Join(t.TempDir(), "patch.json")
	if err := os.WriteFile(patch, []byte(`{"max": 5, "policies": []}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var up cloud.Group
	decodeJSON(t, e.ok(tok, "groups", "update", "web", "-f", patch, "-o", "json"), &up)
	if up.Max != 5 || len(up.Policies) != 0 {
		t.Errorf("update from file = %+v", up)
	}

	// Usage errors (exit 2) and refusals (exit 1) write nothing.
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("name: x\nsize: 3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	before := e.Rows()
	for _, c := range []struct {
		code int
		args []string
		want string
	}{
		{ExitUsage, []string{"groups", "create", "x", "--min", "1", "--max", "2"}, "--offering is required"},
		{ExitUsage, []string{"groups", "create", "--offering", "l4.1x", "--min", "1", "--max", "2"}, "NAME"},
		{ExitUsage, []string{"groups", "create", "x", "--offering", "l4.1x", "--max", "2"}, "--min and --max are required"},
		{ExitUsage, []string{"groups", "create", "x", "-f", file, "--min", "1"}, "do not mix"},
		{ExitUsage, []string{"groups", "create", "x", "--offering", "l4.1x", "--min", "1", "--max", "2", "--on-demand-base", "1"}, "add --spot"},
		{ExitUsage, []string{"groups", "create", "x", "--offering", "l4.1x", "--min", "1", "--max", "2", "--schedule", "tz=UTC,desired=1"}, "cron=EXPR is required"},
		{ExitUsage, []string{"groups", "create", "x", "--offering", "l4.1x", "--min", "1", "--max", "2", "--schedule", "cron=0 1 * * *"}, "desired=N"},
		{ExitUsage, []string{"groups", "create", "x", "--offering", "l4.1x", "--min", "1", "--max", "2", "--predictive"}, "--target-gpu"},
		{ExitUsage, []string{"groups", "create", "x", "--offering", "l4.1x", "--min", "1", "--max", "2", "--idle-release", "0.1"}, "THRESHOLD:DURATION"},
		{ExitUsage, []string{"groups", "create", "x", "--offering", "l4.1x", "--min", "1", "--max", "2", "--budget", "lots"}, "amount"},
		{ExitUsage, []string{"groups", "update", "web"}, "nothing to change"},
		{ExitUsage, []string{"groups", "set-desired", "web", "many"}, "whole number"},
		{ExitUsage, []string{"groups", "list", "--state", "gone"}, "--state"},
		{ExitError, []string{"groups", "create", "x", "-f", bad}, "unknown field"},
		{ExitError, []string{"groups", "create", "x", "--offering", "h900.1x", "--min", "1", "--max", "2"}, "template.offerings[0]"},
		{ExitError, []string{"groups", "create", "x", "--offering", "l4.1x", "--min", "3", "--max", "2"}, "min: 3 is above max 2"},
		{ExitError, []string{"groups", "describe", "nope"}, `no group named "nope"`},
		{ExitError, []string{"groups", "describe", "asg-0000000000000000"}, "not found"},
		{ExitError, []string{"instances", "protect", "i-0000000000000000"}, "not found"},
	} {
		code, _, errOut := e.as(tok, c.args...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, %q; want exit %d naming %q", c.args, code, errOut, c.code, c.want)
		}
	}
	if after := e.Rows(); after != before {
		t.Errorf("refused commands wrote something: %+v -> %+v", before, after)
	}
}

func TestPrintForecast(t *testing.T) {
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	one, three := 1.0, 3.0
	f := &api.GroupForecast{GroupID: "asg-1", Policy: "gpu", Metric: "gpu_utilization", Target: 0.6, HistoryHours: 27,
		MAPE: 12.5, WAPE: 8.25,
		Backtest: []api.ForecastHour{{Time: at, Forecast: 1.5, Actual: &one}, {Time: at.Add(time.Hour), Forecast: 2.5, Actual: &three}},
		Ahead:    []api.ForecastHour{{Time: at.Add(2 * time.Hour), Forecast: 4}}}
	var b strings.Builder
	if err := printForecast(&b, f, 1); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"gpu (gpu_utilization, target 0.6)", "2 h, MAPE 12.5%, WAPE 8.2%", "2026-12-01 01:00  3.00    2.50      -0.50",
		"Next 1 hours", "2026-12-01 02:00  4.00"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "2026-12-01 00:00") {
		t.Errorf("--hours 1 listed the older hour:\n%s", out)
	}
}

// TestStoredLine: metrics put says what it stored, for which group, when.
func TestStoredLine(t *testing.T) {
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name, group string
		points      []api.MetricPoint
		when        time.Time
		want        string
	}{
		{"by name, now", "web", []api.MetricPoint{{Name: "queue", Value: 42}, {Name: "rps", Value: 180.5}}, time.Time{},
			"stored 2 points for group web (asg-0123456789abcdef), measured now: queue=42, rps=180.5"},
		{"by ID, at a time", "asg-0123456789abcdef", []api.MetricPoint{{Name: "queue_depth", Value: 3}}, at,
			"stored 1 point for group asg-0123456789abcdef, measured at 2025-03-01T12:00:00Z: queue_depth=3"},
	} {
		if got := storedLine(c.group, "asg-0123456789abcdef", c.points, c.when); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
