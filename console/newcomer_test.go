package console_test

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/console"
	"github.com/gpucloud/gpucloud/httpapi"
	"github.com/gpucloud/gpucloud/money"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

// setInstance changes an instance in the store as a controller would.
func setInstance(t *testing.T, st cloud.Store, id string, fn func(in *cloud.Instance)) {
	t.Helper()
	ctx := context.Background()
	if err := st.Tx(ctx, func(tx cloud.Tx) error {
		in, err := tx.GetInstance(ctx, id)
		if err != nil {
			return err
		}
		fn(in)
		return tx.UpdateInstance(ctx, in)
	}); err != nil {
		t.Fatal(err)
	}
}

// TestInstancesListOrder: the list shows current instances newest first,
// and an ended instance in the Ended view only, saying what ended it in
// the neutral style rather than "terminate in now" as a warning.
func TestInstancesListOrder(t *testing.T) {
	w := newWorld(t, sqliteStore(t))
	ctx := context.Background()
	var ids []string
	for _, name := range []string{"second", "third"} {
		w.Clock.Advance(time.Minute)
		in, err := w.acme.Client.CreateInstance(ctx, api.CreateInstanceRequest{Name: name, Offering: "h100.mig.1g.10gb"}, "")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, in.ID)
	}
	w.Clock.Advance(time.Minute)
	setInstance(t, w.Store, ids[0], func(in *cloud.Instance) {
		in.State = cloud.Terminated
		in.Interruption = &cloud.Interruption{Action: cloud.ActionTerminate, Reason: "scale-in", Deadline: w.Clock.Now().Add(-30 * time.Second)}
	})
	b := w.browser(t)
	b.login(w.acme.Token)
	rows := regexp.MustCompile(`<tr id="(i-[0-9a-f]+)">`)
	order := func(path string) []string {
		var got []string
		for _, m := range rows.FindAllStringSubmatch(b.get(path).body, -1) {
			got = append(got, m[1])
		}
		return got
	}
	if got, want := order("/instances"), []string{ids[1], w.acmeIn.ID}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("current instances %v, want newest first %v", got, want)
	}
	if got, want := order("/instances?view=all"), []string{ids[1], ids[0], w.acmeIn.ID}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("all instances %v, want newest first %v", got, want)
	}
	ended := b.get("/instances?view=ended").body
	if got := order("/instances?view=ended"); len(got) != 1 || got[0] != ids[0] {
		t.Errorf("ended instances %v", got)
	}
	page := b.get("/instances/" + ids[0]).body
	for what, body := range map[string]string{"list": ended, "page": page} {
		if strings.Contains(body, "terminate in") || strings.Contains(body, "terminate now") || strings.Contains(body, `class="notice"`) {
			t.Errorf("the %s warns of an interruption of an ended instance", what)
		}
		if !strings.Contains(body, `<span class="reason"`) || !strings.Contains(body, "terminated (scale-in)</span>") {
			t.Errorf("the %s does not say the instance was terminated by the scale-in", what)
		}
	}
}

// TestTenantNames: tenants are shown by name with their ID in a title;
// a member sees their own tenant's name and never another's.
func TestTenantNames(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		w := newWorld(t, st)
		a := w.browser(t)
		a.login(w.AdminToken)
		list := a.get("/instances").body
		for _, want := range []string{`<span class="tenant" title="` + w.acme.TenantID + `">acme</span>`, `<span class="tenant" title="` + w.glob.TenantID + `">globex</span>`} {
			if !strings.Contains(list, want) {
				t.Errorf("the admin's list lacks %s", want)
			}
		}
		b := w.browser(t)
		b.login(w.glob.Token)
		own := b.get("/instances/" + w.globIn.ID).body
		if !strings.Contains(own, `<span class="tenant" title="`+w.glob.TenantID+`">globex</span>`) {
			t.Errorf("the member's instance page does not name their tenant")
		}
		for _, path := range []string{"/instances", "/instances?view=all", "/instances/" + w.globIn.ID, "/instances/" + w.acmeIn.ID, "/billing", "/groups", "/stacks", "/spot", "/launch"} {
			body := b.get(path).body
			if strings.Contains(body, "acme") || strings.Contains(body, w.acme.TenantID) {
				t.Errorf("globex's member sees acme's tenant on %s", path)
			}
		}
	})
}

// TestGroupPagePolicies: a group's page shows its policies, its last
// decision (the newest) and its decisions newest first, and the groups
// list the newest decision too.
func TestGroupPagePolicies(t *testing.T) {
	w := newWorld(t, sqliteStore(t))
	ctx := context.Background()
	g, err := w.acme.Client.CreateGroup(ctx, api.CreateGroupRequest{Name: "web", Min: 0, Max: 3,
		Template: cloud.GroupTemplate{Offerings: []string{"h100.1x"}},
		Policies: []cloud.ScalingPolicy{{Name: "hold-util", Type: cloud.PolicyTarget, Metric: cloud.MetricGPUUtilization, Target: 0.6}}}, "")
	if err != nil {
		t.Fatal(err)
	}
	b := w.browser(t)
	b.login(w.acme.Token)
	if p := b.get("/groups/" + g.ID).body; !strings.Contains(p, "Last decision:</strong> none yet") || !strings.Contains(p, "No decisions yet.") {
		t.Errorf("a group without decisions does not say so")
	}
	for _, n := range []int{2, 1} {
		w.Clock.Advance(time.Minute)
		if _, err := w.acme.Client.SetGroupDesired(ctx, g.ID, api.SetDesiredRequest{Desired: n}); err != nil {
			t.Fatal(err)
		}
	}
	p := b.get("/groups/" + g.ID).body
	for _, want := range []string{`<td>hold-util</td><td>target</td><td>` + cloud.MetricGPUUtilization + `</td><td class="num">0.6</td>`,
		`2 → 1 (manual)`} {
		if !strings.Contains(p, want) {
			t.Errorf("the group page lacks %s", want)
		}
	}
	last := p[strings.Index(p, `id="last-decision"`):]
	if !strings.Contains(last[:strings.Index(last, "</p>")], "2 → 1") {
		t.Errorf("the last decision is not the newest: %s", last[:strings.Index(last, "</p>")])
	}
	decisions := p[strings.Index(p, `id="decisions"`):]
	if i, j := strings.Index(decisions, "2 → 1"), strings.Index(decisions, "0 → 2"); i < 0 || j < 0 || i > j {
		t.Errorf("decisions are not newest first")
	}
	if l := b.get("/groups").body; !strings.Contains(l, "2 -&gt; 1") && !regexp.MustCompile(`<td class="reason">desired capacity set by [^<]*</td>`).MatchString(l) {
		t.Errorf("the groups list lacks the last decision")
	}
}

// TestSpotPage: the spot page says how often prices clear, from the
// configuration the console is given, and shows every pool as one row of
// one table.
func TestSpotPage(t *testing.T) {
	st := sqliteStore(t)
	a := testkit.NewAPI(t, st, func(svc *service.Services) http.Handler {
		limiter := httpapi.NewLimiter(httpapi.RateLimits{}, svc)
		mux := http.NewServeMux()
		mux.Handle("/v1/", httpapi.New(svc, httpapi.Options{Limiter: limiter}))
		mux.Handle("/", console.New(svc, console.Options{Limiter: limiter, SpotClearInterval: 10 * time.Second}))
		return mux
	})
	ctx := context.Background()
	var ps []cloud.SpotPrice
	for _, o := range []string{"a100.1x", "a100.2x", "h100.1x", "h100.8x", "l4.1x", "l4.2x"} {
		for _, z := range []string{"zone-a", "zone-b", "zone-c", "zone-d"} {
			for i := range 3 {
				ps = append(ps, cloud.SpotPrice{Pool: cloud.Pool{Offering: o, Zone: z}, Time: testkit.Epoch.Add(-time.Duration(i) * time.Hour), Price: money.MustParse("1.25")})
			}
		}
	}
	if err := st.Tx(ctx, func(tx cloud.Tx) error { return tx.AppendSpotPrices(ctx, ps) }); err != nil {
		t.Fatal(err)
	}
	b := &browser{t: t, base: a.URL}
	b.login(a.AdminToken)
	p := b.get("/spot").body
	if !strings.Contains(p, "Spot prices clear every 10 s ") || strings.Contains(p, "every few minutes") {
		t.Errorf("the spot page does not say that prices clear every 10 s")
	}
	if n, m := strings.Count(p, `<tr class="pool"`), strings.Count(p, `<svg class="spark"`); n != 24 || m != 24 || strings.Count(p, "<table") != 1 {
		t.Errorf("%d pool rows, %d sparklines, want 24 in one table", n, m)
	}
}
