package cli

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/advise"
	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cli/cliconfig"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

// lightInference is a 7B model served in int8, 8 hours a day for 30 days.
var lightInference = []string{"advise", "--params", "7B", "--precision", "int8", "--hours-per-day", "8", "--days", "30"}

func TestAdviseOfflineTable(t *testing.T) {
	t.Setenv(cliconfig.EnvConfig, t.TempDir()+"/none.yaml")
	out := mustRun(t, append(lightInference, "--offline")...)
	for _, want := range []string{
		"Workload: 7B parameters, int8 inference, 1 node, 8 h/day for 30 days (240 h); cannot be interrupted.",
		"Needs 7.9 GiB of GPU memory (7B × 1 byte (int8) × 1.2 for the KV cache and activations).",
		"Storage, in every total: a checkpoint volume of 7 GiB (the weights: 7B × 1 byte) at $0.0800/GiB-month for 30 days: $0.55.",
		"Prices: list prices (offline).",
		"Note: no spot: the workload cannot be interrupted (no checkpoint interval).",
		"   compute       int8 on Turing Tensor Cores",
		"Excluded (-o json lists each with its reason):",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if got := tableRow(t, out, "RANK"); strings.Join(got, "|") != "RANK|OFFERING|MIX|ZONE|GPU MEMORY|FITS NOW|TOTAL|PER HOUR|DONE IN" {
		t.Errorf("header %q", got)
	}
	// Light inference gets a share first: t4.shared.0.5 lists at
	// 0.145/h: 240 h = 34.80, plus the volume.
	if got := tableRow(t, out, "1"); strings.Join(got, "|") != "1|t4.shared.0.5|on demand|-|8 GiB share|unknown|$35.35|$0.1450|29 days 8 h" {
		t.Errorf("first row %q", got)
	}
	if n := strings.Count(out, "\n1. ") + strings.Count(out, "\n5. "); n != 2 {
		t.Errorf("want reasons for options 1 to 5 (the default --top):\n%s", out)
	}
}

func TestAdviseOfflineJSON(t *testing.T) {
	t.Setenv(cliconfig.EnvConfig, t.TempDir()+"/none.yaml")
	var a advise.Advice
	decodeJSON(t, mustRun(t, "advise", "--params", "70B", "--task", "train", "--nodes", "2", "--days", "14",
		"--checkpoint-every", "30m", "--deadline", "16d", "--offline", "-o", "json"), &a)
	w := a.Workload
	if a.Source != "list prices (offline)" || w.Params != 70_000_000_000 || w.Precision != advise.BF16 || w.Task != advise.Training ||
		w.Nodes != 2 || w.Days != 14 || w.PerDay != 24*time.Hour || w.CheckpointInterval != 30*time.Minute || w.Deadline != 16*24*time.Hour {
		t.Errorf("workload %+v from %q", w, a.Source)
	}
	if len(a.Options) <= 5 {
		t.Fatalf("JSON without --top has %d options, want them all", len(a.Options))
	}
	cat := catalog.Default()
	for _, o := range a.Options {
		// A multi-node job gets whole NVLink (or xGMI) hosts only.
		m, err := cat.Model(o.Model)
		if err != nil || m.LinkGBps() == 0 || o.GPUs != 8 || o.Total <= 0 || len(o.Reasons) == 0 {
			t.Errorf("option %+v", o)
		}
	}
	if len(a.Excluded) == 0 || a.Excluded[0].Reason == "" {
		t.Errorf("excluded %+v", a.Excluded)
	}
	// --top cuts JSON too when given; YAML has the same fields.
	decodeJSON(t, mustRun(t, "advise", "--memory-gib", "20", "--offline", "--top", "2", "-o", "json"), &a)
	if len(a.Options) != 2 || a.Need.MemoryMiB != 20*1024 {
		t.Errorf("--top 2: %d options, need %+v", len(a.Options), a.Need)
	}
	if out := mustRun(t, "advise", "--memory-gib", "20", "--offline", "--top", "1", "-o", "yaml"); !strings.Contains(out, "per_day_seconds: 86400") ||
		!strings.Contains(out, "mix: reserved") {
		t.Errorf("yaml:\n%s", out)
	}
}

func TestAdviseUsageErrors(t *testing.T) {
	t.Setenv(cliconfig.EnvConfig, t.TempDir()+"/none.yaml")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--offline"}, "give the model's size: --params (e.g. 7B) or --memory-gib"},
		{[]string{"--params", "7X", "--offline"}, `--params: "7X" is not a parameter count`},
		{[]string{"--params", "7B", "--precision", "fp64", "--offline"}, `--precision: "fp64" is not a precision`},
		{[]string{"--params", "7B", "--task", "eval", "--offline"}, `--task: "eval" is not a task`},
		{[]string{"--params", "7B", "--task", "train", "--precision", "int8", "--offline"}, "--precision: int8 is an inference format"},
		{[]string{"--params", "7B", "--nodes", "0", "--offline"}, "--nodes: must be 1..1024, got 0"},
		{[]string{"--params", "7B", "--days", "0", "--hours-per-day", "0", "--offline"}, "--hours-per-day: must be more than 0"},
		{[]string{"--params", "7B", "--days", "0", "--offline"}, "--days: must be 1..1095"},
		{[]string{"--params", "7B", "--hours-per-day", "25", "--offline"}, "--hours-per-day 25: must be at most 24"},
		{[]string{"--params", "7B", "--checkpoint-every", "-5m", "--offline"}, "--checkpoint-every: must be 0"},
		{[]string{"--params", "7B", "--deadline", "soon", "--offline"}, `--deadline "soon": want a duration such as 72h or 16d`},
		{[]string{"--params", "7B", "--budget", "-5", "--offline"}, "--budget"},
		{[]string{"--memory-gib", "0", "--offline"}, "--memory-gib must be more than 0"},
		{[]string{"--params", "7B", "--top", "-1", "--offline"}, "--top must not be negative"},
		{[]string{"--params", "7B", "-o", "xml", "--offline"}, `--output "xml"`},
		{[]string{"--params", "7B", "extra"}, "takes no arguments"},
	} {
		code, _, errOut := run(t, append([]string{"advise"}, tc.args...)...)
		if code != ExitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want a usage error about %q", tc.args, code, errOut, tc.want)
		}
	}
}

// newAdviseEnv is a server with the built-in price book, t4.shared.0.5 at
// 0.10/h in every zone and 0.08/h in zone-b, volumes at 0.10/GiB-month,
// and pool t4.shared.0.5/zone-a at 0.03/h whose spot instance ran 100 h in
// the last week with 2 reclaims (0.02 an hour). It returns the env and a
// member's token: the advisor reads only what a tenant may.
func newAdviseEnv(t *testing.T) (*cloudEnv, string) {
	t.Helper()
	e := newCloudEnv(t)
	ctx := context.Background()
	now := e.clock.Now()
	if _, err := service.BootstrapPrices(ctx, e.st, catalog.Default(), now.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	tenant, tok := e.member("acme", "alice")
	e.ok(e.admin, "prices", "set", "--offering", "t4.shared.0.5", "--amount", "0.10")
	e.ok(e.admin, "prices", "set", "--offering", "t4.shared.0.5", "--zone", "zone-b", "--amount", "0.08")
	e.ok(e.admin, "prices", "set", "--kind", "volume", "--amount", "0.10")
	pool := cloud.Pool{Offering: "t4.shared.0.5", Zone: "zone-a"}
	err := e.st.Tx(ctx, func(tx cloud.Tx) error {
		if err := tx.AppendSpotPrices(ctx, []cloud.SpotPrice{{Pool: pool, Time: now.Add(-time.Hour), Price: money.MustParse("0.03")}}); err != nil {
			return err
		}
		return tx.CreateInstance(ctx, &cloud.Instance{ID: "i-spot", TenantID: tenant, Name: "spot", Offering: pool.Offering,
			Market: cloud.MarketSpot, State: cloud.Pending, CreatedAt: now.Add(-200 * time.Hour)})
	})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Walk(t, e.st, "i-spot", cloud.Running, testkit.Via{Zone: "zone-a"}, now.Add(-100*time.Hour))
	err = e.st.Tx(ctx, func(tx cloud.Tx) error {
		for _, ago := range []time.Duration{90, 20} {
			if err := tx.AppendEvent(ctx, &cloud.Event{Time: now.Add(-ago * time.Hour), Kind: cloud.EventSpotInterruption,
				TenantID: tenant, InstanceID: "i-spot", Reason: "test"}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return e, tok
}

func TestAdviseConnected(t *testing.T) {
	e, tok := newAdviseEnv(t)
	args := append(lightInference, "--checkpoint-every", "10m")
	e.mu.Lock()
	e.asked = map[string]int{} // from here on, only the advisor asks
	e.mu.Unlock()
	var a advise.Advice
	decodeJSON(t, e.ok(tok, append(args, "-o", "json")...), &a)
	if a.Source != "live from "+e.url {
		t.Errorf("source %q", a.Source)
	}
	// Spot in zone-a: 0.02 reclaims/h × 240 h = 4.8 reclaims × 5 min =
	// 0.4 h lost: 240.4 h × 0.03 = 7.212. The volume: 7 GiB × 0.10 ×
	// 720/730 = 0.690411.
	first := a.Options[0]
	if first.Offering != "t4.shared.0.5" || first.Mix != advise.Spot || first.Zone != "zone-a" ||
		first.Compute != money.MustParse("7.212") || first.Storage != money.MustParse("0.690411") ||
		first.LostSeconds != 1440 || first.ExpectedReclaimsMilli != 4800 {
		t.Errorf("first option %+v", first)
	}
	if !strings.Contains(reasonText(first, advise.DimPricing), "0.02 reclaims per node-hour (recent)") {
		t.Errorf("spot reasons %+v", first.Reasons)
	}
	// On demand at the every-zone price the tenant reads: 240 h × 0.10.
	for _, o := range a.Options {
		if o.Offering == "t4.shared.0.5" && o.Mix == advise.OnDemand && o.Compute != money.MustParse("24") {
			t.Errorf("on demand %+v", o)
		}
		if o.Offering == "l4.shared.0.5" && o.Mix == advise.Spot {
			t.Errorf("spot for an offering without a pool: %+v", o)
		}
	}

	// The table says where the numbers come from.
	out := e.ok(tok, args...)
	if !strings.Contains(out, "Prices: live from "+e.url+".") {
		t.Errorf("table:\n%s", out)
	}
	if got := tableRow(t, out, "1"); strings.Join(got[:5], "|") != "1|t4.shared.0.5|spot|zone-a|8 GiB share" {
		t.Errorf("first row %q", got)
	}

	// It only read, what a member may: offerings, prices, spot pools.
	e.mu.Lock()
	for route := range e.asked {
		switch route {
		case "GET /v1/offerings", "GET /v1/prices", "GET /v1/spot/pools":
		default:
			t.Errorf("the advisor asked %s", route)
		}
	}
	if len(e.asked) != 3 {
		t.Errorf("the advisor asked %v", e.asked)
	}
	e.mu.Unlock()
}

func reasonText(o advise.Option, d advise.Dimension) string {
	var b strings.Builder
	for _, r := range o.Reasons {
		if r.Dimension == d {
			b.WriteString(r.Text + "\n")
		}
	}
	return b.String()
}

func TestAdviseUnreachable(t *testing.T) {
	t.Setenv(cliconfig.EnvConfig, t.TempDir()+"/none.yaml")
	t.Setenv(cliconfig.EnvServer, "")
	t.Setenv(cliconfig.EnvToken, "")
	code, _, errOut := run(t, append([]string{"--server", closedURL(), "--token", "gpc_x_y"}, lightInference...)...)
	if code != ExitError || !strings.Contains(errOut, "cannot reach the gpucloud server") || !strings.Contains(errOut, "use --offline to advise from list prices") {
		t.Errorf("unreachable: exit %d, stderr %q", code, errOut)
	}
	code, _, errOut = run(t, lightInference...)
	if code != ExitError || !strings.Contains(errOut, "no gpucloud server configured") || !strings.Contains(errOut, "--offline") {
		t.Errorf("no server: exit %d, stderr %q", code, errOut)
	}
	// A token the server refuses says so, and suggests --offline too.
	e := newCloudEnv(t)
	code, _, errOut = e.as("gpc_tk-0_bad", lightInference...)
	if code != ExitError || !strings.Contains(errOut, "unauthenticated") || !strings.Contains(errOut, "--offline") {
		t.Errorf("bad token: exit %d, stderr %q", code, errOut)
	}
}

// liveOf carries the API's answers into advise.LiveMarket: prices,
// availability and pools.
func TestAdviseLiveOf(t *testing.T) {
	cat := catalog.Default()
	h100, err := cat.Offering("h100.1x")
	if err != nil {
		t.Fatal(err)
	}
	list := &api.OfferingList{Offerings: []*catalog.Offering{h100},
		Availability: map[string]api.OfferingAvailability{"h100.1x": {Hosts: 2, FitsNow: 1}}}
	prices := []*cloud.Price{{Kind: cloud.PriceCompute, Offering: "h100.1x", Amount: money.MustParse("2.50")},
		{Kind: cloud.PriceVolume, Amount: money.MustParse("0.12")}}
	pools := []api.SpotPool{{Pool: cloud.Pool{Offering: "h100.1x", Zone: "z2"}, Price: money.MustParse("1.10"), ReclaimRateBP: 300, SpotSeconds: 3600}}
	m := advise.LiveMarket(liveOf("http://x", list, prices, pools))
	want := advise.Quote{OnDemand: money.MustParse("2.50"), Availability: &advise.Availability{Hosts: 2, FitsNow: 1},
		Spot: []advise.SpotQuote{{Zone: "z2", Price: money.MustParse("1.10"), ReclaimRateBP: 300, RateKnown: true}}}
	if m.Source != "live from http://x" || m.VolumePerGiBMonth != money.MustParse("0.12") || !reflect.DeepEqual(m.Offerings["h100.1x"], want) {
		t.Errorf("market %+v, h100.1x %+v", m, m.Offerings["h100.1x"])
	}
	// A server that does not know its fleet: availability unknown.
	list.Availability = nil
	if m := advise.LiveMarket(liveOf("http://x", list, prices, nil)); m.Offerings["h100.1x"].Availability != nil {
		t.Errorf("availability %+v", m.Offerings["h100.1x"].Availability)
	}
}

func TestAdviseHelp(t *testing.T) {
	out := mustRun(t, "advise", "--help")
	for _, flag := range []string{"--params", "--memory-gib", "--precision", "--task", "--nodes", "--hours-per-day", "--days",
		"--checkpoint-every", "--deadline", "--budget", "--offline", "--top", "--output", "--catalog", "--server", "--token"} {
		if !strings.Contains(out, flag) {
			t.Errorf("help lacks %s", flag)
		}
	}
}

// TestAdviseDoc keeps docs/ADVISE.md true: every console block marked
// <!-- doc-test --> (the offline examples) is run and must print exactly
// what the doc shows.
func TestAdviseDoc(t *testing.T) {
	t.Setenv(cliconfig.EnvConfig, t.TempDir()+"/none.yaml")
	doc, err := os.ReadFile(filepath.Join("..", "docs", "ADVISE.md"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(doc), "\n")
	tests := 0
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != "<!-- doc-test -->" {
			continue
		}
		if i+2 >= len(lines) || lines[i+1] != "```console" || !strings.HasPrefix(lines[i+2], "$ gpucloud ") {
			t.Fatalf("ADVISE.md:%d: a doc-test marker wants a console block starting with \"$ gpucloud \"", i+1)
		}
		end := i + 3
		for end < len(lines) && !strings.HasPrefix(lines[end], "```") {
			end++
		}
		args := strings.Fields(strings.TrimPrefix(lines[i+2], "$ gpucloud "))
		want := strings.Join(lines[i+3:end], "\n") + "\n"
		_, out, errOut := run(t, args...)
		if got := out + errOut; got != want {
			t.Errorf("ADVISE.md:%d: gpucloud %s prints\n%s\nbut the doc shows\n%s\n(regenerate the block by running the command)",
				i+3, strings.Join(args, " "), got, want)
		}
		tests++
		i = end
	}
	if tests < 3 {
		t.Errorf("ADVISE.md has %d tested commands; want at least 3", tests)
	}
}
