package e2e

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/gpucloud/gpucloud/agent"
	"github.com/gpucloud/gpucloud/agent/gpu/sim"
	"github.com/gpucloud/gpucloud/api"
)

// chromium finds the browser the console tests drive: $GPUCLOUD_CHROMIUM,
// or Debian's chromium. In CI (CI set) a missing browser fails the test;
// elsewhere it skips, saying how to install one.
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
	t.Skip("chromium is not installed (apt-get install chromium); the console's browser tests need it")
	return ""
}

// serverSPKI is the base64 SHA-256 of the server certificate's public key,
// read over a TLS connection that trusts the cloud's CA: Chromium is told
// to trust exactly that key (--ignore-certificate-errors-spki-list), as a
// browser whose user installed the cloud's CA would.
func serverSPKI(t *testing.T, c *cluster) string {
	u, err := url.Parse(c.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg := c.hc.Transport.(*http.Transport).TLSClientConfig.Clone()
	conn, err := tls.Dial("tcp", u.Host, cfg)
	if err != nil {
		t.Fatalf("TLS to the server with its CA: %v", err)
	}
	defer conn.Close()
	st := conn.ConnectionState()
	if st.Version != tls.VersionTLS13 {
		t.Errorf("the server speaks TLS %x, want 1.3", st.Version)
	}
	sum := sha256.Sum256(st.PeerCertificates[0].RawSubjectPublicKeyInfo)
	return base64.StdEncoding.EncodeToString(sum[:])
}

// newBrowser starts a headless Chromium for one test, trusting the server
// key spki.
func newBrowser(t *testing.T, spki string) context.Context {
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.Flag("ignore-certificate-errors-spki-list", spki),
		chromedp.ExecPath(chromium(t)),
		chromedp.NoSandbox, // CI runs as root
		chromedp.DisableGPU,
		chromedp.WindowSize(1400, 1000),
		chromedp.Flag("disable-dev-shm-usage", true),
	)
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	ctx, cancel2 := chromedp.NewContext(actx)
	t.Cleanup(cancel2)
	ctx, cancel3 := context.WithTimeout(ctx, 150*time.Second)
	t.Cleanup(cancel3)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// run runs browser steps, failing the test with what it was doing.
func run(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	err := chromedp.Do(ctx, steps...)
	// Chromium aborts a load with ERR_NETWORK_CHANGED when the machine's
	// interfaces change, as the network tests of other packages running
	// beside this one make them do: the steps run again, twice at most.
	for try := 0; try < 2 && err != nil && strings.Contains(err.Error(), "net::ERR_NETWORK_CHANGED"); try++ {
		t.Logf("browser: %s: %v; again", what, err)
		err = chromedp.Do(ctx, steps...)
	}
	if err != nil {
		t.Fatalf("browser: %s: %v", what, err)
	}
}

// get runs one browser action that answers a value.
func get[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("browser: %s: %v", what, err)
	}
	return v
}

// waitText reloads the page until the element's text satisfies ok.
func waitText(t *testing.T, ctx context.Context, sel, what string, ok func(string) bool) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var text string
	for time.Now().Before(deadline) {
		if err := chromedp.Do(ctx, chromedp.Reload()); err == nil {
			if v, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel))); err == nil {
				text = v
				if ok(text) {
					return text
				}
			}
		}
		time.Sleep(300 * time.Millisecond)
	}
	t.Fatalf("browser: %s: %s says %q", what, sel, text)
	return ""
}

// screenshot saves a full-page PNG when GPUCLOUD_SCREENSHOTS names a
// directory (docs/CONSOLE.md's pictures are made this way).
func screenshot(t *testing.T, ctx context.Context, name string) {
	dir := os.Getenv("GPUCLOUD_SCREENSHOTS")
	if dir == "" {
		return
	}
	png := get(t, ctx, "screenshot "+name, chromedp.FullScreenshot(100))
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestConsoleInBrowser drives the web console in a real Chromium against a
// real server with a simulated host: log in, launch an instance and see it
// run, watch its log, stop it, find its line on the invoice, and check
// that another tenant's instance page is not found. The keyboard reaches
// the skip link and the login form.
func TestConsoleInBrowser(t *testing.T) {
	// Agents sample utilization every 100 ms, so that the charts have
	// points within the test.
	c := startClusterTuned(t, "sqlite://"+filepath.Join(t.TempDir(), "gpucloud.db"), nil,
		func(cfg *agent.Config) { cfg.MetricsInterval = 100 * time.Millisecond },
		sim.Spec{ID: "sim-l4", Zone: "e2e-a", Rack: "rack-1", GPUs: sim.GPUSpec{Model: "L4", Count: 2}},
		sim.Spec{ID: "sim-a100", Zone: "e2e-a", Rack: "rack-1", GPUs: sim.GPUSpec{Model: "A100-80GB", Count: 2}},
		sim.Spec{ID: "sim-l4b", Zone: "e2e-a", Rack: "rack-2", GPUs: sim.GPUSpec{Model: "L4", Count: 1}})
	ctx := t.Context()
	_, _, alice := c.member("acme", "alice")
	_, bob, _ := c.member("globex", "bob")
	secret, err := bob.CreateInstance(ctx, api.CreateInstanceRequest{Name: "globex-secret-run", Offering: "l4.1x",
		Command: []string{"sleep", "600"}}, "")
	if err != nil {
		t.Fatal(err)
	}
	// Globex also holds MIG slices and GPU shares, for the fleet map.
	for _, o := range []string{"a100.mig.3g.40gb", "a100.mig.1g.10gb", "a100.mig.1g.10gb", "a100.mig.2g.20gb", "l4.shared.0.25", "l4.shared.0.5"} {
		if _, err := bob.CreateInstance(ctx, api.CreateInstanceRequest{Offering: o, Command: []string{"sleep", "600"}}, ""); err != nil {
			t.Fatal(err)
		}
	}
	c.until("the scheduler's availability", func() (bool, string) {
		l, err := bob.OfferingList(ctx)
		return err == nil && l.Availability["l4.1x"].Hosts > 0, "unknown"
	})

	b := newBrowser(t, serverSPKI(t, c))
	base := c.srv.URL
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }

	// The login page focuses the token field.
	run(t, b, "open the login page",
		chromedp.Navigate(base+"/instances"),
		chromedp.WaitVisible(css("#token")))
	if focused := get(t, b, "focus", chromedp.Evaluate[string](`document.activeElement.id`)); focused != "token" {
		t.Errorf("the login page focuses %q, want the token field", focused)
	}
	if label := get(t, b, "the token's label", chromedp.Text(css(`label[for="token"]`))); label != "API token" {
		t.Errorf("token label %q", label)
	}
	run(t, b, "log in",
		chromedp.SendKeys(css("#token"), alice),
		chromedp.Submit(css("#token")),
		chromedp.WaitVisible(css(`nav[aria-label="Main"]`)))
	if url := get(t, b, "where login lands", chromedp.Location()); !strings.HasSuffix(url, "/instances") {
		t.Fatalf("after login the browser is at %s: %s", url, get(t, b, "the page", chromedp.Text(css("#main"))))
	}

	// The keyboard: the first Tab reaches the skip link, which moves the
	// focus to the content.
	run(t, b, "tab", chromedp.KeyEvent("\t"))
	if focused := get(t, b, "focus", chromedp.Evaluate[string](`document.activeElement.className`)); focused != "skip" {
		t.Errorf("the first Tab focuses %q, want the skip link", focused)
	}
	run(t, b, "follow the skip link", chromedp.KeyEvent("\r"))
	if focused := get(t, b, "focus", chromedp.Evaluate[string](`document.activeElement.id`)); focused != "main" {
		t.Errorf("the skip link focuses %q, want main", focused)
	}

	// Launch an instance from the launch flow.
	run(t, b, "launch",
		chromedp.Navigate(base+"/launch"),
		chromedp.WaitVisible(css("#offerings")),
		chromedp.Click(css(`input[value="l4.1x"]`)),
		chromedp.SendKeys(css("#l-name"), "console-run"),
		chromedp.SendKeys(css("#l-command"), "echo hello-from-the-console; sleep 600"))
	fits := get(t, b, "fits now", chromedp.Evaluate[string](`document.querySelector('input[value="l4.1x"]').closest("tr").lastElementChild.textContent`))
	if !strings.Contains(fits, "yes") {
		t.Errorf("l4.1x fits now says %q", fits)
	}
	if !get(t, b, "h200 not selectable", chromedp.Evaluate[bool](`document.querySelector('input[value="h200.1x"]').disabled`)) {
		t.Errorf("an offering no host can run is selectable")
	}
	screenshot(t, b, "launch")
	run(t, b, "submit", chromedp.Click(css("#launch")), chromedp.WaitVisible(css("#state")))
	url := get(t, b, "instance page URL", chromedp.Location())
	id := url[strings.LastIndex(url, "/")+1:]
	if !strings.HasPrefix(id, "i-") {
		t.Fatalf("launch landed on %s", url)
	}
	waitText(t, b, "#state", "the instance runs", func(s string) bool { return s == "running" })

	// The log tail shows the workload's output without a reload.
	var log string
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && !strings.Contains(log, "hello-from-the-console") {
		time.Sleep(500 * time.Millisecond)
		log = get(t, b, "read the log", chromedp.TextContent(css("#log")))
	}
	if !strings.Contains(log, "hello-from-the-console") {
		t.Fatalf("the log tail shows %q", log)
	}
	main := get(t, b, "the instance page", chromedp.Text(css("#main")))
	for _, want := range []string{"sim-l4", "whole GPU", "Cost so far", "State trail", "GPU utilization"} {
		if !strings.Contains(main, want) {
			t.Errorf("the instance page lacks %q", want)
		}
	}
	// The charts: GPU utilization, GPU memory (a whole GPU's is the
	// instance's) and CPU, from the agent's samples.
	charts := waitText(t, b, "#charts", "the charts have samples", func(s string) bool {
		return strings.Count(s, "samples in the last") == 3 && strings.Count(s, "latest") == 3
	})
	if !strings.Contains(charts, "GPU memory used: latest") {
		t.Errorf("charts: %s", charts)
	}
	screenshot(t, b, "instance")

	// Stop it.
	// The POST's answer (a redirect to this page) must have replaced the
	// page before waitText reloads it: a reload while the POST is still
	// on its way aborts it, and the instance was then never stopped
	// (one run in about ten). The page after the stop has no Stop form.
	run(t, b, "stop", chromedp.Click(css(`form[action$="/stop"] button`)),
		chromedp.WaitNotPresent(css(`form[action$="/stop"]`)), chromedp.WaitVisible(css("#state")))
	waitText(t, b, "#state", "the instance stops", func(s string) bool { return s == "stopped" })

	// The invoice has its line.
	run(t, b, "billing", chromedp.Navigate(base+"/billing"), chromedp.WaitVisible(css("#main h1")))
	invoice := get(t, b, "the invoice", chromedp.Text(css("#main")))
	if !strings.Contains(invoice, "l4.1x") || !strings.Contains(invoice, "Total (USD)") {
		t.Errorf("the invoice lacks the instance's line: %s", invoice)
	}
	screenshot(t, b, "billing")

	// Another tenant's instance page is not found, and shows nothing of it.
	run(t, b, "another tenant's instance", chromedp.Navigate(base+"/instances/"+secret.ID), chromedp.WaitVisible(css("#main h1")))
	h1 := get(t, b, "its title", chromedp.Text(css("#main h1")))
	body := get(t, b, "its text", chromedp.Text(css("body")))
	if h1 != "Not found" || strings.Contains(body, "globex-secret-run") || strings.Contains(body, "sim-l4") {
		t.Errorf("acme opened globex's instance page: %q / %q", h1, body)
	}

	// The operator's views.
	run(t, b, "log out", chromedp.Navigate(base+"/instances"), chromedp.Click(css(`form[action="/logout"] button`)),
		chromedp.WaitVisible(css("#token")))
	run(t, b, "admin logs in",
		chromedp.SendKeys(css("#token"), c.srv.AdminToken),
		chromedp.Submit(css("#token")),
		chromedp.WaitVisible(css(`nav[aria-label="Main"]`)))
	screenshot(t, b, "instances")
	run(t, b, "fleet", chromedp.Navigate(base+"/fleet"), chromedp.WaitVisible(css("#fleet")))
	if fleet := get(t, b, "the fleet map", chromedp.Text(css("#fleet"))); !strings.Contains(fleet, "sim-l4") || !strings.Contains(fleet, "sim-a100") || !strings.Contains(fleet, "sim-l4b") {
		t.Errorf("fleet map: %s", fleet)
	}
	screenshot(t, b, "fleet")
	run(t, b, "spot", chromedp.Navigate(base+"/spot"), chromedp.WaitVisible(css("#main h1")))
	if n := get(t, b, "spot price lines", chromedp.Evaluate[int](`document.querySelectorAll("#pools tr.pool svg .dot").length`)); n == 0 {
		t.Errorf("the spot page draws no price")
	}
	screenshot(t, b, "spot")
}
