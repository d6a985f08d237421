package console_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
	"github.com/gpucloud/gpucloud/testkit"
)

// chromium is the browser the layout test drives: $GPUCLOUD_CHROMIUM or
// Debian's chromium; in CI (CI set) a missing one fails the test, else
// it skips (e2e/console_test.go finds it the same way).
func chromium(t *testing.T) string {
	for _, p := range []string{os.Getenv("GPUCLOUD_CHROMIUM"), "/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if p == "" {
			continue
		}
		if _, err := exec.LookPath(p); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium is not installed; .ci/run installs Debian's chromium package")
	}
	t.Skip("chromium is not installed (apt-get install chromium); the console's layout test needs it")
	return ""
}

// TestLayoutInBrowser checks in Chromium what only a layout engine can
// tell: in a narrow window the instances list's IDs, hosts and ages stay
// on one line, the charts' y-axis labels are inside the chart, and the
// spot page of 24 pools fits in about two screens.
func TestLayoutInBrowser(t *testing.T) {
	bin := chromium(t)
	w := newWorld(t, sqliteStore(t))
	ctx := context.Background()
	// A young instance on a host, with a few memory samples, and 24 spot
	// pools with a day of prices.
	setInstance(t, w.Store, w.acmeIn.ID, func(in *cloud.Instance) { in.State, in.HostID = cloud.Running, "h100-1" })
	var pts []cloud.MetricPoint
	for i := range 5 {
		pts = append(pts, cloud.MetricPoint{InstanceID: w.acmeIn.ID, TenantID: w.acme.TenantID, Name: cloud.MetricGPUMemoryUsed,
			At: testkit.Epoch.Add(time.Duration(i) * time.Second), Value: 70 << 30})
	}
	var ps []cloud.SpotPrice
	for _, o := range []string{"a100.1x", "a100.2x", "h100.1x", "h100.8x", "l4.1x", "l4.2x"} {
		for _, z := range []string{"zone-a", "zone-b", "zone-c", "zone-d"} {
			for i := range 12 {
				ps = append(ps, cloud.SpotPrice{Pool: cloud.Pool{Offering: o, Zone: z}, Time: testkit.Epoch.Add(-time.Duration(i) * 2 * time.Hour), Price: money.Micros(1_000_000 + i*50_000)})
			}
		}
	}
	if err := w.Store.Tx(ctx, func(tx cloud.Tx) error {
		if err := tx.AppendSpotPrices(ctx, ps); err != nil {
			return err
		}
		return tx.AppendMetrics(ctx, pts)
	}); err != nil {
		t.Fatal(err)
	}
	w.Clock.Advance(5 * time.Minute)

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.WindowSize(760, 1000), chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancel := chromedp.NewExecAllocator(ctx, opts...)
	defer cancel()
	b, cancel2 := chromedp.NewContext(actx)
	defer cancel2()
	b, cancel3 := context.WithTimeout(b, 90*time.Second)
	defer cancel3()
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(b, steps...); err != nil {
			t.Fatalf("browser: %s: %v", what, err)
		}
	}
	eval := func(what, js string) int {
		t.Helper()
		v, err := chromedp.Run(b, chromedp.Evaluate[int](js))
		if err != nil {
			t.Fatalf("browser: %s: %v", what, err)
		}
		return v
	}
	do("log in", chromedp.Navigate(w.URL+"/login"), chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), w.AdminToken), chromedp.Submit(chromedp.CSS("#token")),
		chromedp.WaitVisible(chromedp.CSS("#instances")))
	// A cell is on one line when every box of its content starts at one
	// height.
	if n := eval("wrapped cells", `[...document.querySelectorAll("#instances td.nowrap")].filter(td => {
		const r = document.createRange(); r.selectNodeContents(td);
		return new Set([...r.getClientRects()].map(x => Math.round(x.top))).size > 1; }).length`); n != 0 {
		t.Errorf("%d ID, host or age cells of the instances list wrap", n)
	}
	if n := eval("cells", `document.querySelectorAll("#instances td.nowrap").length`); n < 8 {
		t.Errorf("only %d cells checked", n)
	}
	do("the instance page", chromedp.Navigate(w.URL+"/instances/"+w.acmeIn.ID), chromedp.WaitVisible(chromedp.CSS("#charts")))
	if n := eval("clipped labels", `[...document.querySelectorAll("#charts svg text.axis")].filter(t => t.getBBox().x < 0).length`); n != 0 {
		t.Errorf("%d y-axis labels of the charts start left of the chart", n)
	}
	if n := eval("dots", `[...document.querySelectorAll("#charts svg .dot")].filter(d => d.cx.baseVal.value < 600).length`); n == 0 {
		t.Errorf("a young instance's samples are squeezed into the right edge of its chart")
	}
	do("the spot page", chromedp.Navigate(w.URL+"/spot"), chromedp.WaitVisible(chromedp.CSS("#pools")))
	if n := eval("pools", `document.querySelectorAll("#pools tr.pool svg .dot").length`); n != 24 {
		t.Errorf("%d pools drawn, want 24", n)
	}
	if h := eval("page height", `document.documentElement.scrollHeight`); h > 2000 {
		t.Errorf("the spot page of 24 pools is %d px tall, want two screens (2,000 px) at most", h)
	}
}

// TestEndpointKeyInBrowser walks, in Chromium, from the endpoints' list
// to an endpoint's page, makes a key with its form, reads the secret the
// page shows once, calls the endpoint with it, and sees the key listed
// and its secret gone after a reload.
func TestEndpointKeyInBrowser(t *testing.T) {
	bin := chromium(t)
	w := newWorld(t, sqliteStore(t))
	ctx := context.Background()
	ep, err := w.acme.Client.CreateEndpoint(ctx, api.CreateEndpointRequest{Name: "echo",
		EndpointSpec: cloud.EndpointSpec{Image: "ghcr.io/acme/echo:1", Offerings: []string{"l4.1x"}}}, "")
	if err != nil {
		t.Fatal(err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.WindowSize(1000, 1000), chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancel := chromedp.NewExecAllocator(ctx, opts...)
	defer cancel()
	b, cancel2 := chromedp.NewContext(actx)
	defer cancel2()
	b, cancel3 := context.WithTimeout(b, 90*time.Second)
	defer cancel3()
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(b, steps...); err != nil {
			t.Fatalf("browser: %s: %v", what, err)
		}
	}
	text := func(what, sel string) string {
		t.Helper()
		v, err := chromedp.Run(b, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("browser: %s: %v", what, err)
		}
		return v
	}
	do("log in", chromedp.Navigate(w.URL+"/login"), chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), w.acme.Token), chromedp.Submit(chromedp.CSS("#token")),
		chromedp.WaitVisible(chromedp.CSS(`nav[aria-label="Main"]`)))
	do("the endpoints' list", chromedp.Click(chromedp.CSS(`nav a[href="/endpoints"]`)), chromedp.WaitVisible(chromedp.CSS("#endpoints")))
	if row := text("the list", "#endpoints"); !strings.Contains(row, "echo") || !strings.Contains(row, "queue") {
		t.Errorf("the endpoints' list: %q", row)
	}
	do("the endpoint's page", chromedp.Click(chromedp.CSS(`#endpoints a[href="/endpoints/`+ep.ID+`"]`)), chromedp.WaitVisible(chromedp.CSS("#create-key")))
	do("make a key", chromedp.SendKeys(chromedp.CSS("#key-name"), "web-app"), chromedp.Click(chromedp.CSS("#create-key button")),
		chromedp.WaitVisible(chromedp.CSS("#new-key-secret")))
	secret := text("the secret", "#new-key-secret")
	if !strings.HasPrefix(secret, "gpc_ek-") {
		t.Fatalf("the page shows %q as the key's secret", secret)
	}
	j, err := w.Client(secret).RunJob(ctx, "echo", nil, "")
	if err != nil || j.KeyID == "" {
		t.Fatalf("the key from the browser runs no job: %+v %v", j, err)
	}
	do("reload", chromedp.Navigate(w.URL+"/endpoints/"+ep.ID), chromedp.WaitVisible(chromedp.CSS("#key-list")))
	if keys := text("the keys", "#key-list"); !strings.Contains(keys, j.KeyID) || !strings.Contains(keys, "web-app") {
		t.Errorf("the key list after a reload: %q", keys)
	}
	if page := text("the page", "#main"); strings.Contains(page, secret) || !strings.Contains(page, j.ID) {
		t.Errorf("after a reload the page shows the secret, or not the key's job")
	}
}
