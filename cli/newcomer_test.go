package cli

// Tests of the rough edges a newcomer's first run found (issue 12): what
// the commands print about prices, availability, notices, reasons, output
// that is not there yet, flags that do not apply and a port in use.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cli/cliconfig"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
	"github.com/gpucloud/gpucloud/testkit"
)

// withAvailability serves e's API through a proxy that adds avail to
// GET /v1/offerings, as a server whose scheduler knows the fleet does;
// it returns the proxy's URL.
func withAvailability(t *testing.T, e *cloudEnv, avail map[string]api.OfferingAvailability) string {
	t.Helper()
	target, err := url.Parse(e.url)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.ModifyResponse = func(r *http.Response) error {
		if r.Request.URL.Path != "/v1/offerings" || r.StatusCode != http.StatusOK {
			return nil
		}
		var l api.OfferingList
		if err := json.NewDecoder(r.Body).Decode(&l); err != nil {
			return err
		}
		r.Body.Close()
		l.Availability = avail
		b, err := json.Marshal(l)
		if err != nil {
			return err
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
		r.ContentLength = int64(len(b))
		r.Header.Set("Content-Length", strconv.Itoa(len(b)))
		return nil
	}
	srv := httptest.NewServer(proxy)
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestOfferingsPricesAndAvailability(t *testing.T) {
	e := newCloudEnv(t)
	_, tok := e.member("acme", "alice")
	e.ok(e.admin, "prices", "set", "--offering", "l4.1x", "--amount", "1.00")
	e.ok(e.admin, "prices", "set", "--offering", "l4.1x", "--zone", "zone-b", "--amount", "1.20")
	ctx := context.Background()
	err := e.st.Tx(ctx, func(tx cloud.Tx) error {
		return tx.AppendSpotPrices(ctx, []cloud.SpotPrice{
			{Pool: cloud.Pool{Offering: "l4.1x", Zone: "zone-a"}, Time: e.clock.Now().Add(-time.Hour), Price: money.MustParse("0.35")}})
	})
	if err != nil {
		t.Fatal(err)
	}

	// Without availability (no scheduler runs here), it says "?".
	out := e.ok(tok, "offerings", "--model", "L4")
	if got := tableRow(t, out, "NAME"); strings.Join(got, ",") != "NAME,MODE,MODEL,RESOURCE,VCPUS,MEMORY,STORE,ON-DEMAND,SPOT,AVAILABLE" {
		t.Errorf("header %q", got)
	}
	if got := tableRow(t, out, "l4.1x"); strings.Join(got[7:], ",") != "from $1.0000/h,$0.3500/h,?" {
		t.Errorf("l4.1x row %q", got)
	}
	code, _, errOut := e.as(tok, "offerings", "--available")
	oneLine(t, code, errOut, "does not say which offerings its fleet can run", "without --available")

	// With it, as a leader's scheduler reports it.
	proxy := withAvailability(t, e, map[string]api.OfferingAvailability{
		"l4.1x":            {Hosts: 4, FitsNow: 3},
		"l4.2x":            {Hosts: 2, FitsNow: 0, Reasons: map[string]int{"not enough free GPUs": 2}},
		"h200.mig.1g.18gb": {Hosts: 0, Reasons: map[string]int{"wrong GPU model": 8}},
	})
	as := func(args ...string) string {
		t.Helper()
		code, out, errOut := run(t, append([]string{"--server", proxy, "--token", tok}, args...)...)
		if code != 0 || errOut != "" {
			t.Fatalf("%v: exit %d, stderr %q", args, code, errOut)
		}
		return out
	}
	out = as("offerings")
	for name, want := range map[string]string{
		"l4.1x":            "yes (3 hosts free)",
		"l4.2x":            "full (2 hosts could run it)",
		"h200.mig.1g.18gb": "no host",
		"a10.1x":           "?",
	} {
		if got := tableRow(t, out, name); got[len(got)-1] != want {
			t.Errorf("%s: AVAILABLE %q, want %q (row %q)", name, got[len(got)-1], want, got)
		}
	}
	out = as("offerings", "--available")
	for name, listed := range map[string]bool{"l4.1x": true, "l4.2x": true, "h200.mig.1g.18gb": false, "a10.1x": false} {
		if got := strings.Contains(out, name+" "); got != listed {
			t.Errorf("--available lists %s: %v, want %v:\n%s", name, got, listed, out)
		}
	}
	if out := as("offerings", "--available", "--model", "H200"); strings.TrimSpace(out) != "no offerings on model H200-141GB that a host could run" {
		t.Errorf("--available on H200: %q", out)
	}

	// JSON carries the same, with exact prices.
	var rows []struct {
		Name         string                    `json:"name"`
		Mode         string                    `json:"mode"`
		Price        *money.Micros             `json:"price"`
		PriceZones   int                       `json:"price_zones"`
		SpotPrice    *money.Micros             `json:"spot_price"`
		Availability *api.OfferingAvailability `json:"availability"`
	}
	decodeJSON(t, as("offerings", "--model", "L4", "-o", "json"), &rows)
	found := false
	for _, r := range rows {
		if r.Name != "l4.1x" {
			continue
		}
		found = true
		if r.Mode != "gpu" || r.Price == nil || *r.Price != money.MustParse("1") || r.PriceZones != 2 ||
			r.SpotPrice == nil || *r.SpotPrice != money.MustParse("0.35") || r.Availability == nil || r.Availability.FitsNow != 3 {
			t.Errorf("l4.1x as JSON: %+v", r)
		}
	}
	if !found {
		t.Errorf("no l4.1x in the JSON")
	}
}

// TestListsShowNoticesAndWholeReasons: during a reclaim notice the lists
// show it with its deadline, and a pending reason is never cut.
func TestListsShowNoticesAndWholeReasons(t *testing.T) {
	e := newCloudEnv(t)
	_, tok := e.member("acme", "alice")
	now := e.clock.Now()

	var r cloud.SpotRequest
	decodeJSON(t, e.ok(tok, "spot", "requests", "create", "--offering", "l4.1x", "--zone", "zone-a", "--persistent",
		"-o", "json", "--", "sleep", "600"), &r)
	e.move(r.InstanceID, cloud.Running, testkit.Via{Host: "l4-a", Zone: "zone-a"})
	var od cloud.Instance
	decodeJSON(t, e.ok(tok, "instances", "create", "--offering", "h100.8x", "-o", "json"), &od)
	e.update(r.InstanceID, func(in *cloud.Instance) {
		in.Interruption = &cloud.Interruption{Action: cloud.ActionTerminate, Reason: cloud.ReclaimCapacity,
			NoticedAt: now.Add(-28 * time.Second), Deadline: now.Add(92 * time.Second), For: od.ID}
	})
	reason := "0/8 hosts available: 4 wrong GPU model, 2 not enough free GPUs, 2 not enough free memory on the host"
	e.update(od.ID, func(in *cloud.Instance) { in.Reason = reason })

	out := e.ok(tok, "instances", "list")
	// The market has its column (issue 21: the list showed none).
	if got := tableRow(t, out, r.InstanceID); got[3] != "spot" || got[4] != "running (reclaim in 1m32s)" {
		t.Errorf("spot instance row %q", got)
	}
	if got := tableRow(t, out, od.ID); got[len(got)-1] != reason || got[3] != "on_demand" {
		t.Errorf("on-demand row %q: want market on_demand and the whole reason %q", got, reason)
	}
	out = e.ok(tok, "instances", "describe", r.InstanceID)
	want := "terminate at " + now.Add(92*time.Second).Format(time.RFC3339) + " (in 1m32s; capacity for " + od.ID + ")"
	// The state's row, whatever the width of the keys' column.
	if !strings.Contains(out, want) || !regexp.MustCompile(`(?m)^State: +running \(reclaim in 1m32s\)$`).MatchString(out) {
		t.Errorf("describe lacks %q and the state with its notice:\n%s", want, out)
	}

	// The spot request shows its instance's notice, and its reason last.
	out = e.ok(tok, "spot", "requests", "list")
	got, head := tableRow(t, out, r.ID), tableRow(t, out, "ID")
	if !strings.HasSuffix(got[3], "(reclaim in 1m32s)") || !strings.HasPrefix(head[len(head)-1], "REASON") {
		t.Errorf("spot request row %q", got)
	}
	if out := e.ok(tok, "spot", "requests", "describe", r.ID); !strings.Contains(out, r.InstanceID+": running (reclaim in 1m32s)") {
		t.Errorf("spot request describe:\n%s", out)
	}

	// A minute later the countdown moved; past the deadline it is due.
	e.clock.Advance(time.Minute)
	if got := tableRow(t, e.ok(tok, "instances", "list"), r.InstanceID); got[4] != "running (reclaim in 32s)" {
		t.Errorf("a minute later: %q", got)
	}
	e.clock.Advance(time.Minute)
	if got := tableRow(t, e.ok(tok, "instances", "list"), r.InstanceID); got[4] != "running (reclaim due)" {
		t.Errorf("past the deadline: %q", got)
	}

	// A spot request whose instance waits shows why.
	var r2 cloud.SpotRequest
	decodeJSON(t, e.ok(tok, "spot", "requests", "create", "--offering", "h200.mig.1g.18gb", "-o", "json", "--", "true"), &r2)
	e.update(r2.InstanceID, func(in *cloud.Instance) { in.Reason = "0/8 hosts available: 8 wrong GPU model" })
	if got := tableRow(t, e.ok(tok, "spot", "requests", "list"), r2.ID); !strings.HasSuffix(got[len(got)-1], ": 0/8 hosts available: 8 wrong GPU model") {
		t.Errorf("waiting request row %q", got)
	}
}

// TestLogsOfAnInstanceNotStarted: no output, a note on stderr saying why,
// exit 0.
func TestLogsOfAnInstanceNotStarted(t *testing.T) {
	e := newCloudEnv(t)
	_, tok := e.member("acme", "alice")
	var in cloud.Instance
	decodeJSON(t, e.ok(tok, "instances", "create", "--offering", "l4.1x", "-o", "json"), &in)
	code, out, errOut := e.as(tok, "instances", "logs", in.ID)
	if want := in.ID + " has not started yet (pending), so it has no output\n"; code != 0 || out != "" || errOut != want {
		t.Errorf("logs of a pending instance: exit %d, stdout %q, stderr %q; want stderr %q", code, out, errOut, want)
	}
	// Once it runs and has written nothing, there is nothing to explain.
	e.move(in.ID, cloud.Running, testkit.Via{})
	if code, out, errOut := e.as(tok, "instances", "logs", in.ID); code != 0 || out != "" || errOut != "" {
		t.Errorf("logs of a silent running instance: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// TestCreateNotesRelativeCommand: the note goes to stderr, and the
// instance is created all the same.
func TestCreateNotesRelativeCommand(t *testing.T) {
	e := newCloudEnv(t)
	_, tok := e.member("acme", "alice")
	code, out, errOut := e.as(tok, "instances", "create", "--offering", "l4.1x", "--", "./train", "--steps", "3")
	if code != 0 || !strings.Contains(out, "pending") || !strings.HasPrefix(errOut, "note: ./train is relative to the instance's working directory") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, _, errOut = e.as(tok, "spot", "requests", "create", "--offering", "l4.1x", "--", "bin/train")
	if code != 0 || !strings.HasPrefix(errOut, "note: bin/train is relative") {
		t.Errorf("spot: exit %d, stderr %q", code, errOut)
	}
}

// TestServerFlagsOnlyWhereUsed: commands that talk to no server neither
// list --server and --token in their help nor accept them.
func TestServerFlagsOnlyWhereUsed(t *testing.T) {
	for _, tc := range []struct {
		args          []string
		server, token bool
	}{
		{[]string{"up", "--help"}, false, false},
		{[]string{"catalog", "--help"}, false, false},
		{[]string{"catalog", "validate", "--help"}, false, false},
		{[]string{"sim", "replay", "--help"}, false, false},
		{[]string{"server", "--help"}, false, false},
		{[]string{"version", "--help"}, false, false},
		{[]string{"agent", "--help"}, true, false},
		{[]string{"instances", "list", "--help"}, true, true},
		{[]string{"offerings", "--help"}, true, true},
		{[]string{"spot", "pools", "--help"}, true, true},
		{[]string{"cost", "estimate", "--help"}, true, true}, // live prices with --zone
		{[]string{"--help"}, true, true},
	} {
		out := mustRun(t, tc.args...)
		if got := strings.Contains(out, "--server"); got != tc.server {
			t.Errorf("%v lists --server: %v, want %v", tc.args, got, tc.server)
		}
		if got := strings.Contains(out, "--token"); got != tc.token {
			t.Errorf("%v lists --token: %v, want %v", tc.args, got, tc.token)
		}
	}
	// Hiding them for one command's help leaves them for the next.
	if out := mustRun(t, "instances", "--help"); !strings.Contains(out, "--server") {
		t.Errorf("instances --help lost --server:\n%s", out)
	}
	// Were the flags accepted, these would still end at once: up on an
	// address it cannot listen on, in a scratch data directory.
	t.Setenv(cliconfig.EnvConfig, filepath.Join(t.TempDir(), "config.yaml"))
	for _, args := range [][]string{
		{"--server", "http://127.0.0.1:1", "up", "--listen", "nowhere", "--data-dir", t.TempDir(), "--no-nvml"},
		{"catalog", "models", "--token", "x"},
		{"sim", "replay", "--server", "http://x"},
		{"agent", "--token", "x"},
	} {
		code, out, errOut := run(t, args...)
		if code != ExitUsage || out != "" || !strings.Contains(errOut, "does not use --") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
}

// TestUpAddressInUse: a second `up` on a port in use says who holds it
// and how to use another port.
func TestUpAddressInUse(t *testing.T) {
	t.Setenv(cliconfig.EnvConfig, filepath.Join(t.TempDir(), "config.yaml"))
	// Something that is not gpucloud.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	// A gpucloud server (its OpenAPI document is all `up` asks for).
	gc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/openapi.json" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, `{"openapi":"3.0.3","info":{"title":"gpucloud API","version":"1"}}`)
	}))
	defer gc.Close()
	gcAddr := strings.TrimPrefix(gc.URL, "http://")
	_, gcPort, _ := net.SplitHostPort(gcAddr)

	for _, tc := range []struct {
		listen string
		want   []string
	}{
		{ln.Addr().String(), []string{"cannot listen on " + ln.Addr().String() + ": another program is listening there",
			"--listen 127.0.0.1:7879 --data-dir DIR"}},
		{gcAddr, []string{"a gpucloud server is already running there (" + gc.URL + ")", "gpucloud hosts list", "--listen"}},
		// Every interface: the probe goes to loopback.
		{":" + gcPort, []string{"cannot listen on :" + gcPort + ": a gpucloud server is already running there (http://127.0.0.1:" + gcPort + ")"}},
	} {
		code, out, errOut := run(t, "up", "--listen", tc.listen, "--data-dir", t.TempDir(), "--no-nvml", "--agent-metrics-listen", "")
		if code != ExitError || out != "" || strings.Count(errOut, "\n") != 1 {
			t.Errorf("up --listen %s: exit %d, stdout %q, stderr %q", tc.listen, code, out, errOut)
		}
		for _, w := range tc.want {
			if !strings.Contains(errOut, w) {
				t.Errorf("up --listen %s: stderr %q lacks %q", tc.listen, errOut, w)
			}
		}
		if strings.Contains(errOut, "bind: address already in use") {
			t.Errorf("up --listen %s: only the system's words: %q", tc.listen, errOut)
		}
	}

	// An agent metrics address given and taken: one line, and no agent
	// left behind complaining about the server that has gone.
	busy := ln.Addr().String()
	var stdout, stderr lockedBuffer
	code := Main([]string{"up", "--listen", "127.0.0.1:0", "--data-dir", t.TempDir(), "--no-nvml", "--agent-metrics-listen", busy,
		"--agent-interval", "50ms", "--runtime", "process"}, &stdout, &stderr)
	time.Sleep(500 * time.Millisecond) // agents left running would have polled and warned by now
	want := "error: --agent-metrics-listen " + busy + ": the address is in use; give another, or \"\" to serve no agent metrics\n"
	if code != ExitError || stdout.String() != "" || stderr.String() != want {
		t.Errorf("up --agent-metrics-listen %s: exit %d, stdout %q, stderr %q; want %q", busy, code, stdout.String(), stderr.String(), want)
	}
}

// lockedBuffer is a bytes.Buffer that goroutines may write concurrently.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
