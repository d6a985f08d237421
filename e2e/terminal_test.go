package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/gpucloud/gpucloud/agent/gpu/sim"
	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/controlplane"
	"github.com/gpucloud/gpucloud/store/pgtest"
)

// typeKeys types s on the focused element as a keyboard does: for each
// character one keyDown that carries its text, then a keyUp (what
// Chromium's own key handling produces, and Puppeteer's keyboard sends).
// chromedp's SendKeys sends a separate "char" event after a keyDown
// without text, which xterm.js, which listens to keydown, keypress and
// input, takes as two keystrokes.
func typeKeys(s string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		for _, r := range s {
			for _, k := range kb.Encode(r) {
				if k.Type == kb.KeyChar {
					continue
				}
				if k.Type == kb.KeyDown {
					k.Text, k.UnmodifiedText = string(r), string(r)
				}
				if _, err := cdp.Call(ctx, t, input.DispatchKeyEvent, *k); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// waitJS polls a JavaScript expression that answers a string until ok
// holds, failing the test with its last value.
func waitJS(t *testing.T, ctx context.Context, what, expr string, ok func(string) bool) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var v string
	for time.Now().Before(deadline) {
		if got, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr)); err == nil {
			v = got
			if ok(v) {
				return v
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("browser: %s: %q", what, v)
	return ""
}

// TestConsoleTerminal opens the instance page's terminal in Chromium, on
// a running instance of the process runtime: a login shell runs through
// the server's relay, a typed command's output appears in the terminal,
// the exit status ends the session, the session is on the instance's
// events, and a stopped instance offers no terminal and says why.
func TestConsoleTerminal(t *testing.T) {
	c := startClusterWith(t, "sqlite://"+filepath.Join(t.TempDir(), "gpucloud.db"), oneSession,
		sim.Spec{ID: "sim-l4", Zone: "e2e-a", Rack: "rack-1", GPUs: sim.GPUSpec{Model: "L4", Count: 1}})
	testConsoleTerminal(t, c, api.CreateInstanceRequest{Name: "term", Offering: "l4.1x", Command: []string{"sleep", "600"}}, "")
}

// TestConsoleTerminalContainer is TestConsoleTerminal on the containerd
// runtime: the shell is the image's, inside the instance's container (it
// reads the image's own /etc/os-release), on both stores.
func TestConsoleTerminalContainer(t *testing.T) {
	ch := startContainerHost(t)
	spec := sim.Spec{ID: "sim-l4", Zone: "e2e-a", GPUs: sim.GPUSpec{Model: "L4", Count: 1}}
	req := api.CreateInstanceRequest{Name: "term", Offering: "l4.1x", Image: "gpucloud/e2e:1", Command: []string{"sleep", "600"}}
	t.Run("sqlite", func(t *testing.T) {
		c := startClusterOn(t, "sqlite://"+filepath.Join(t.TempDir(), "gpucloud.db"), oneSession, nil, ch.runtimeOf, spec)
		testConsoleTerminal(t, c, req, "ID=gpucloud-e2e")
	})
	t.Run("postgres", func(t *testing.T) {
		c := startClusterOn(t, pgtest.URL(t), oneSession, nil, ch.runtimeOf, spec)
		testConsoleTerminal(t, c, req, "ID=gpucloud-e2e")
	})
}

// oneSession lets each user hold one session at a time, so that the
// terminal test sees the console's sessions count against the limit the
// API's do.
func oneSession(cfg *controlplane.Config) { cfg.SessionLimit = 1 }

// testConsoleTerminal runs the terminal's browser test on an instance
// created by req in cluster c; marker, when set, is a line of the
// image's /etc/os-release, which the shell must read.
func testConsoleTerminal(t *testing.T, c *cluster, req api.CreateInstanceRequest, marker string) {
	ctx := t.Context()
	_, alice, token := c.member("acme", "alice")
	in, err := alice.CreateInstance(ctx, req, "")
	if err != nil {
		t.Fatal(err)
	}
	c.until("the instance runs", func() (bool, string) {
		got, err := alice.GetInstance(ctx, in.ID)
		if err != nil {
			return false, err.Error()
		}
		return got.State == cloud.Running, string(got.State)
	})

	b := newBrowser(t, serverSPKI(t, c))
	base := c.srv.URL
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	run(t, b, "log in",
		chromedp.Navigate(base+"/login"),
		chromedp.WaitVisible(css("#token")),
		chromedp.SendKeys(css("#token"), token),
		chromedp.Submit(css("#token")),
		chromedp.WaitVisible(css(`nav[aria-label="Main"]`)))
	// Every Content-Security-Policy violation on the pages is noted, so
	// that the test sees the terminal work within the page's policy.
	run(t, b, "note CSP violations", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{
			Source: `window.cspViolations = []; document.addEventListener("securitypolicyviolation",
				function (e) { window.cspViolations.push(e.violatedDirective + " " + e.blockedURI); });`})
		return err
	}))
	run(t, b, "open the instance page and its terminal",
		chromedp.Navigate(base+"/instances/"+in.ID),
		chromedp.WaitVisible(css("#term-open")),
		chromedp.Click(css("#term-open")),
		chromedp.WaitVisible(css(".xterm-helper-textarea")))
	status := `document.getElementById("term-status").textContent`
	waitJS(t, b, "the terminal connects", status, func(s string) bool { return s == "Connected." })
	rows := `document.querySelector(".xterm-rows").textContent`
	run(t, b, "type a command", chromedp.Focus(css(".xterm-helper-textarea")), typeKeys("echo hello-$((6*7))\r"))
	// The typed line echoes "hello-$((6*7))"; only the shell prints 42.
	waitJS(t, b, "the command's output in the terminal", rows, func(s string) bool { return strings.Contains(s, "hello-42") })
	if marker != "" {
		run(t, b, "read the image's os-release", typeKeys("cat /etc/os-release\r"))
		waitJS(t, b, "the image's os-release in the terminal", rows, func(s string) bool { return strings.Contains(s, marker) })
	} else {
		screenshot(t, b, "terminal")
	}
	if v := get(t, b, "CSP violations", chromedp.Evaluate[string](`window.cspViolations.join("; ")`)); v != "" {
		t.Errorf("the terminal broke the page's Content-Security-Policy: %s", v)
	}
	// The open terminal is the user's one session: the API's exec and a
	// second terminal (another tab) are refused, the latter saying why.
	if _, err := alice.Exec(ctx, in.ID, client.ExecOptions{Command: []string{"true"}}); cloud.ErrorCode(err) != cloud.QuotaExceeded {
		t.Errorf("an API exec beside the console's terminal: %v, want quota_exceeded", err)
	}
	tab, closeTab := chromedp.NewContext(b)
	run(t, tab, "a second terminal in another tab",
		chromedp.Navigate(base+"/instances/"+in.ID),
		chromedp.WaitVisible(css("#term-open")),
		chromedp.Click(css("#term-open")))
	waitJS(t, tab, "the second terminal's refusal", status, func(s string) bool {
		return strings.HasPrefix(s, "No terminal: user ") && strings.Contains(s, "the limit")
	})
	closeTab()

	// The keyboard leaves the terminal with Shift+Tab (Tab is the shell's).
	focusIn := `document.activeElement.classList.contains("xterm-helper-textarea") ? "terminal" : "page"`
	if f := get(t, b, "focus", chromedp.Evaluate[string](focusIn)); f != "terminal" {
		t.Fatalf("the focus is on the %s, want the terminal", f)
	}
	run(t, b, "Shift+Tab", chromedp.KeyEvent("\t", chromedp.KeyModifiers(chromedp.ModifierShift)))
	if f := get(t, b, "focus", chromedp.Evaluate[string](focusIn)); f != "page" {
		t.Errorf("Shift+Tab leaves the focus on the %s, want the page", f)
	}
	run(t, b, "exit the shell", chromedp.Focus(css(".xterm-helper-textarea")), typeKeys("exit 3\r"))
	waitJS(t, b, "the session's end", status, func(s string) bool { return s == "session ended: exit 3" })
	// The page offers a new session, in a fresh terminal.
	if label := get(t, b, "the button", chromedp.Text(css("#term-open"))); label != "Open a new terminal" {
		t.Errorf("after the session the button says %q", label)
	}
	run(t, b, "open a new terminal", chromedp.Click(css("#term-open")))
	waitJS(t, b, "the new terminal connects", status, func(s string) bool { return s == "Connected." })
	run(t, b, "type in the new terminal", chromedp.Focus(css(".xterm-helper-textarea")), typeKeys("echo again-$((1+1)); exit\r"))
	waitJS(t, b, "the new session's output", rows, func(s string) bool {
		return strings.Contains(s, "again-2") && !strings.Contains(s, "hello-42")
	})
	waitJS(t, b, "the new session's end", status, func(s string) bool { return s == "session ended: exit 0" })

	// The sessions are on the instance's events, as the API's are: who,
	// what, and how they ended.
	c.until("the session's events", func() (bool, string) {
		evs, err := alice.InstanceEvents(ctx, in.ID, client.EventsOptions{})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range evs.Events {
			if strings.HasPrefix(string(e.Kind), "session.") {
				seen = append(seen, string(e.Kind)+" by "+e.Actor+" "+string(e.Details))
			}
		}
		s := strings.Join(seen, "\n")
		return strings.Count(s, "session.started by u-") == 2 && strings.Count(s, "session.ended by u-") == 2 &&
			strings.Count(s, `"command":"/bin/sh -l"`) == 4 && strings.Contains(s, `"exit_code":3`), s
	})

	// A stopped instance offers no terminal, and says why.
	if _, err := alice.StopInstance(ctx, in.ID, 0); err != nil {
		t.Fatal(err)
	}
	c.until("the instance stops", func() (bool, string) {
		got, err := alice.GetInstance(ctx, in.ID)
		if err != nil {
			return false, err.Error()
		}
		return got.State == cloud.Stopped, string(got.State)
	})
	run(t, b, "reload", chromedp.Navigate(base+"/instances/"+in.ID), chromedp.WaitVisible(css("#term-reason")))
	if got := get(t, b, "the reason", chromedp.Text(css("#term-reason"))); got != "No terminal: the instance is stopped." {
		t.Errorf("stopped instance: %q", got)
	}
}
