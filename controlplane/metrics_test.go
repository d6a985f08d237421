package controlplane

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/dashboards"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/testkit"
)

// scrape GETs the replica's /metrics with token ("" for none).
func scrape(t *testing.T, s *Replica, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", s.MetricsURL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := s.HTTPClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// TestMetricsEndpoint: a populated server (hosts, instances of two
// tenants) serves its metrics on the API listener to the admin token, in
// an exposition promtool accepts, with every family of the server; a
// member's token, holding one tenant only, is refused (the exposition
// counts every tenant's instances), and so is a request without a token.
func TestMetricsEndpoint(t *testing.T) {
	s := start(t, "sqlite://"+filepath.Join(t.TempDir(), "gpucloud.db"))
	defer s.Close(context.Background())
	testkit.Eventually(t, 0, "leadership", s.IsLeader)
	ctx := context.Background()
	addHost(t, s.Store, fleet.MockHost("l40s-1", "L40S", 2))
	addHost(t, s.Store, fleet.MockHost("h100-1", "H100", 8))
	admin := client.New(s.URL, s.AdminToken, s.HTTPClient())
	members := map[string]*client.Client{}
	tenants, secrets := map[string]string{}, map[string]string{}
	for _, name := range []string{"acme", "globex"} {
		tn, err := admin.CreateTenant(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		u, err := admin.CreateUser(ctx, tn.ID, api.CreateUserRequest{Name: "dev"})
		if err != nil {
			t.Fatal(err)
		}
		members[name], tenants[name], secrets[name] = client.New(s.URL, u.Secret, s.HTTPClient()), tn.ID, u.Secret
	}
	var ids []string
	for _, c := range []struct{ tenant, offering string }{{"acme", "l40s.1x"}, {"acme", "h100.1x"}, {"globex", "l40s.1x"}, {"globex", "h100.mig.3g.40gb"}} {
		in, err := members[c.tenant].CreateInstance(ctx, api.CreateInstanceRequest{Offering: c.offering}, "")
		if err != nil {
			t.Fatalf("%s creates %s: %v", c.tenant, c.offering, err)
		}
		ids = append(ids, in.ID)
	}
	testkit.Eventually(t, 0, "placements", func() bool {
		for _, id := range ids {
			if in, err := admin.GetInstance(ctx, id); err != nil || in.State != cloud.Scheduled {
				return false
			}
		}
		return true
	})
	testkit.Eventually(t, 0, "the market's quotes of both models", func() bool {
		models := map[string]bool{}
		for p := range s.Market.Quotes() {
			models[strings.SplitN(p.Offering, ".", 2)[0]] = true
		}
		return models["l40s"] && models["h100"]
	})

	code, body := scrape(t, s, s.AdminToken)
	if code != http.StatusOK {
		t.Fatalf("admin scrape: %d %s", code, body)
	}
	for _, want := range []string{
		`gpucloud_instances{market="on_demand",offering="l40s.1x",state="scheduled",tenant="` + tenants["acme"] + `"} 1`,
		`gpucloud_instances{market="on_demand",offering="l40s.1x",state="scheduled",tenant="` + tenants["globex"] + `"} 1`,
		`gpucloud_hosts{state="schedulable"} 2`,
		`gpucloud_gpus{mode="whole",model="L40S",status="allocated"} 2`,
		`gpucloud_gpus{mode="whole",model="H100-80GB-SXM",status="free"} 6`,
		`gpucloud_gpu_mig_slices{model="H100-80GB-SXM",status="allocated"} 3`,
		`gpucloud_scheduler_placements_total 4`,
		`gpucloud_spot_price_dollars_per_hour{offering="l40s.1x",`,
		`gpucloud_on_demand_price_dollars_per_hour{offering="h100.1x",`,
		`gpucloud_pool_free_instances{offering="h100.1x",`,
		`gpucloud_controller_step_duration_seconds_bucket{controller="scheduler",`,
		`gpucloud_controller_step_errors_total{controller="market"} 0`,
		`gpucloud_http_requests_total{code="201",method="POST",route="POST /v1/instances"} 4`,
		`gpucloud_http_request_duration_seconds_count{method="GET",route="GET /v1/instances/{id}"}`,
		`gpucloud_leader 1`,
		`gpucloud_instances_pending{reason="gpus"} 0`,
		`gpucloud_spot_reclaims_total{reason="capacity"} 0`,
		`gpucloud_spot_relaunches_total 0`,
		`gpucloud_market_clearings_total `,
		`gpucloud_market_clearing_duration_seconds_count `,
		`gpucloud_tenant_accrued_dollars{tenant="` + tenants["acme"] + `"} 0`,
		`gpucloud_tenant_accrued_dollars{tenant="` + tenants["globex"] + `"} 0`,
		`go_goroutines `,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the exposition lacks %s", want)
		}
	}
	if strings.Contains(body, "gpucloud_market_clearings_total 0\n") {
		t.Error("the market cleared the prices, yet no clearing is counted: is its hook wired?")
	}
	for _, id := range ids {
		if strings.Contains(body, id) {
			t.Errorf("the exposition names instance %s", id)
		}
	}
	promtoolCheck(t, body)
	// Every server metric the shipped Grafana dashboard queries exists.
	names, err := dashboards.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if !dashboards.Agent(n) && !strings.Contains(body, "# TYPE "+n+" ") {
			t.Errorf("the dashboard queries %s, which the server does not serve", n)
		}
	}

	for name, token := range map[string]string{"a member": secrets["acme"], "no token": ""} {
		code, body := scrape(t, s, token)
		want := http.StatusForbidden
		if token == "" {
			want = http.StatusUnauthorized
		}
		if code != want || strings.Contains(body, "gpucloud_") || !strings.Contains(body, `"code"`) {
			t.Errorf("%s scrapes: %d %s; want %d in the API's error shape", name, code, body, want)
		}
	}
}

// promtoolCheck runs promtool check metrics on an exposition. Without
// promtool on PATH it skips, saying so, unless CI is set: CI installs it
// (Debian's prometheus package) and must run the check.
func promtoolCheck(t *testing.T, exposition string) {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("promtool is not on PATH and CI is set: install it (Debian: apt-get install prometheus)")
		}
		t.Log("promtool is not on PATH: the exposition is not checked by promtool (CI checks it)")
		return
	}
	cmd := exec.Command(path, "check", "metrics")
	cmd.Stdin = strings.NewReader(exposition)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}
