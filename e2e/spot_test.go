package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agent/gpu/sim"
	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/billing"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/controller"
	"github.com/gpucloud/gpucloud/controlplane"
	"github.com/gpucloud/gpucloud/money"
	"github.com/gpucloud/gpucloud/store/pgtest"
	"github.com/gpucloud/gpucloud/testkit"
)

// timeScale is how much faster than the wall clock the control plane's
// clock runs in the spot test: the 30 s reclaim notice takes half a second,
// and an hour of billing a minute.
const timeScale = 60

// scaledClock runs from a fixed instant in December 2026 at timeScale
// times the wall clock, so that every run bills into one month.
type scaledClock struct {
	mu    sync.Mutex
	base  time.Time
	start time.Time
}

func newScaledClock() *scaledClock {
	return &scaledClock{base: time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC), start: time.Now()}
}

func (c *scaledClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.base.Add(time.Since(c.start) * timeScale)
}

// configure runs the server on the clock. Hosts are still declared lost
// after controller.DefaultHeartbeatTimeout of wall clock: scaled, that
// timeout would be half a second, and an agent's heartbeat on a loaded
// machine (the race detector, two cores) can be later than that, which
// would lose its instances and relaunch spot requests behind the test's
// back.
func (c *scaledClock) configure(cfg *controlplane.Config) {
	cfg.Now = c.Now
	cfg.HeartbeatTimeout = timeScale * controller.DefaultHeartbeatTimeout
}

// pass waits until d has passed on the clock.
func (c *scaledClock) pass(t *testing.T, d time.Duration) {
	t.Helper()
	until := c.Now().Add(d)
	testkit.Eventually(t, 0, fmt.Sprintf("%s of the scaled clock to pass", d), func() bool { return !c.Now().Before(until) })
}

// buildExample compiles examples/spottrain into a temporary directory,
// without version control information: stamping it runs git, which
// refuses a checkout owned by another user (exit status 128), and the
// example has no use for it.
func buildExample(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "spottrain")
	cmd := exec.Command("go", "build", "-buildvcs=false", "-o", bin, "../examples/spottrain")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build examples/spottrain: %v\n%s", err, out)
	}
	return bin
}

// call sends a JSON request and decodes the answer into out, failing the
// test on any error status.
func (c *cluster) call(method, path, token string, body, out any) {
	c.t.Helper()
	var b []byte
	if body != nil {
		var err error
		if b, err = json.Marshal(body); err != nil {
			c.t.Fatal(err)
		}
	}
	a := c.raw(method, path, token, "application/json", b, nil)
	if a.status >= 400 {
		c.t.Fatalf("%s %s: %d %s: %s", method, path, a.status, a.err.Code, a.err.Message)
	}
	if out != nil {
		if err := json.Unmarshal(a.body, out); err != nil {
			c.t.Fatalf("%s %s: decode %q: %v", method, path, a.body, err)
		}
	}
}

// TestSpotCheckpointing runs the example checkpointing trainer as a
// persistent spot request on a four-GPU host, forces reclaims with
// on-demand demand, and checks that every reclaim gave notice before
// SIGTERM, that the request relaunched with its volume and resumed, that
// no more than one checkpoint interval of steps was lost per reclaim, and
// that the invoice bills exactly the seconds the launches ran at the spot
// prices in force.
func TestSpotCheckpointing(t *testing.T) {
	bin := buildExample(t)
	t.Run("sqlite", func(t *testing.T) { testSpot(t, bin, "sqlite://"+filepath.Join(t.TempDir(), "gpucloud.db")) })
	t.Run("postgres", func(t *testing.T) { testSpot(t, bin, pgtest.URL(t)) })
}

const (
	spotSteps    = 150
	spotInterval = 10 // checkpoint every 10 steps
	spotReclaims = 3
)

func testSpot(t *testing.T, bin, db string) {
	clock := newScaledClock()
	spec := sim.Spec{ID: "sim-l4", Zone: "e2e-a", Rack: "rack-1", GPUs: sim.GPUSpec{Model: "L4", Count: 4}}
	c := startClusterWith(t, db, func(cfg *controlplane.Config) {
		clock.configure(cfg)
		cfg.SpotClearInterval = 5 * time.Second // a twelfth of a second of wall clock
		cfg.PoolNotice = map[string]time.Duration{"l4.1x/e2e-a": 30 * time.Second}
		cfg.BudgetInterval = time.Minute
	}, spec)
	ctx := t.Context()
	_, alice, aliceToken := c.member("acme", "alice")
	_, bob, _ := c.member("globex", "bob")
	pool := cloud.Pool{Offering: "l4.1x", Zone: "e2e-a"}

	vol, err := alice.CreateVolume(ctx, api.CreateVolumeRequest{Name: "ckpt", SizeGiB: 10, Zone: "e2e-a"}, "")
	if err != nil {
		t.Fatal(err)
	}
	var req cloud.SpotRequest
	c.call("POST", "/v1/spot/requests", aliceToken, map[string]any{
		"name": "trainer", "type": "persistent", "interruption": "terminate",
		"pools":   []cloud.Pool{pool},
		"command": []string{bin, "--steps", strconv.Itoa(spotSteps), "--step-time", "40ms", "--checkpoint-every", strconv.Itoa(spotInterval), "--poll", "10ms"},
		"volumes": []string{vol.ID},
	}, &req)
	getReq := func() cloud.SpotRequest {
		var r cloud.SpotRequest
		c.call("GET", "/v1/spot/requests/"+req.ID, aliceToken, nil, &r)
		return r
	}
	volDir := filepath.Join(c.hosts["sim-l4"].dir, "volumes", vol.ID)
	progress := func() []progressLine { return readProgress(t, filepath.Join(volDir, "progress.log")) }

	// priceHistory reads the pool's recorded spot prices of this month.
	priceHistory := func() []cloud.SpotPrice {
		var prices struct {
			Prices []cloud.SpotPrice `json:"prices"`
		}
		q := url.Values{"pool": {pool.String()}, "since": {time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).Format(time.RFC3339)}, "limit": {"10000"}}
		c.call("GET", "/v1/spot/prices?"+q.Encode(), aliceToken, nil, &prices)
		return prices.Prices
	}

	launches := []string{req.InstanceID}
	for r := 0; r < spotReclaims; r++ {
		cur := launches[len(launches)-1]
		c.waitState(alice, cur, cloud.Running)
		// Let it make progress past a checkpoint or two.
		want := len(progress()) + 10
		c.until(fmt.Sprintf("launch %d to train", r+1), func() (bool, string) {
			n := len(progress())
			return n >= want, fmt.Sprintf("%d steps", n)
		})
		// On-demand demand for every GPU of the host.
		od, err := bob.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "l4.4x", Command: []string{"sleep", "600"}},
			fmt.Sprintf("od-%d", r))
		if err != nil {
			t.Fatal(err)
		}
		var notice *cloud.Interruption
		c.until("a reclaim notice on "+cur, func() (bool, string) {
			in := c.get(alice, cur)
			notice = in.Interruption
			return notice != nil && notice.Action == cloud.ActionTerminate, fmt.Sprintf("%s %+v", in.State, in.Interruption)
		})
		if d := notice.Deadline.Sub(notice.NoticedAt); d != 30*time.Second || notice.Reason != cloud.ReclaimCapacity || notice.For != od.ID {
			t.Fatalf("notice %+v: want 30 s, capacity, for %s", notice, od.ID)
		}
		c.waitState(bob, od.ID, cloud.Running)
		in := c.waitState(alice, cur, cloud.Terminated)
		// SIGTERM came at the deadline, not earlier: the move to
		// terminating is the stop the agent acts on.
		evs, err := alice.InstanceEvents(ctx, cur, client.EventsOptions{Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		var term *cloud.Event
		for _, e := range evs.Events {
			if e.Kind == cloud.EventInstanceState && e.To == cloud.Terminating {
				term = e
			}
		}
		if term == nil || term.Time.Before(notice.Deadline) {
			t.Fatalf("instance %s: terminating event %+v before the deadline %s", cur, term, notice.Deadline)
		}
		// The agent ships the last output shortly after the exit.
		var out string
		c.until("the output of "+in.ID+" to show the notice and the SIGTERM", func() (bool, string) {
			out = c.logs(alice, in.ID)
			return strings.Contains(out, "SIGTERM: checkpointed"), out
		})
		if i, j := strings.Index(out, "instance-action terminate"), strings.Index(out, "SIGTERM: checkpointed"); i < 0 || i > j {
			t.Fatalf("instance %s did not see the notice before SIGTERM:\n%s", cur, out)
		}
		// The request relaunches, waits while the on-demand instance
		// holds the GPU, and runs again once it is gone.
		var next string
		c.until("the persistent request to relaunch", func() (bool, string) {
			r := getReq()
			next = r.InstanceID
			return next != cur && r.Launches == len(launches)+1, fmt.Sprintf("%s launches=%d", r.State, r.Launches)
		})
		// While the on-demand instance holds the host's GPUs and the
		// relaunch waits, the pool is full: the market must move its
		// price (it clears every twelfth of a second of wall clock), and
		// the test waits for that rather than hoping a clearing falls in
		// the window.
		before := len(priceHistory())
		c.until("the spot price of "+pool.String()+" to move while on-demand demand holds the host", func() (bool, string) {
			h := priceHistory()
			return len(h) > before, fmt.Sprintf("%d prices recorded, %d before", len(h), before)
		})
		if _, err := bob.TerminateInstance(ctx, od.ID, 0); err != nil {
			t.Fatal(err)
		}
		nin := c.get(alice, next)
		if nin.SpotRequestID != req.ID || nin.Market != cloud.MarketSpot || len(nin.Volumes) != 1 || nin.Volumes[0] != vol.ID {
			t.Fatalf("relaunch %+v: want request %s, spot, volume %s", nin, req.ID, vol.ID)
		}
		launches = append(launches, next)
	}
	c.until("the request to complete", func() (bool, string) {
		r := getReq()
		return r.State == cloud.SpotClosed, fmt.Sprintf("%s (%s), %d steps", r.State, r.Reason, len(progress()))
	})

	// Every step ran, and each reclaim lost at most one checkpoint interval.
	lines := progress()
	seen := map[int]bool{}
	redone := 0
	for i, l := range lines {
		seen[l.step] = true
		if i > 0 && l.by != lines[i-1].by {
			lost := lines[i-1].step - (l.step - 1)
			if lost > spotInterval {
				t.Errorf("launch %s resumed at step %d after %s reached %d: %d steps lost", l.by, l.step, lines[i-1].by, lines[i-1].step, lost)
			}
			redone += max(lost, 0)
		}
	}
	for s := 1; s <= spotSteps; s++ {
		if !seen[s] {
			t.Errorf("step %d never ran", s)
		}
	}
	t.Logf("%d launches, %d reclaims, %d steps redone of %d", len(launches), spotReclaims, redone, spotSteps)

	// The invoice bills the seconds the tenant's instances ran at the spot
	// price in force each second. Recompute it from what the biller rates:
	// the instance.state events (the usage ledger is written with them) of
	// every instance the tenant has, whichever launched it, and the pool's
	// price history, second by second, as of the invoice's own time; both
	// are read after the invoice, and what came at or after that time is
	// left out, as the biller leaves it out. Nothing here is measured on
	// the wall clock, so a slow machine changes the numbers on both sides
	// alike.
	var invs struct {
		Invoices []*billing.Invoice `json:"invoices"`
	}
	c.call("GET", "/v1/invoices?month=2026-12", aliceToken, nil, &invs)
	if len(invs.Invoices) != 1 {
		t.Fatalf("%d invoices, want 1", len(invs.Invoices))
	}
	inv := invs.Invoices[0]
	var prices struct{ Prices []cloud.SpotPrice }
	prices.Prices = priceHistory()
	od, err := billing.ListPrice(catalog.Default(), pool.Offering)
	if err != nil {
		t.Fatal(err)
	}
	if len(prices.Prices) < 3 {
		t.Fatalf("the spot price of %s changed %d times while on-demand demand came and went; want it to move (history %+v; clock %s)",
			pool, len(prices.Prices), prices.Prices, clock.Now().Format(time.RFC3339Nano))
	}
	book := billing.NewPriceBook([]*cloud.Price{{Kind: cloud.PriceCompute, Offering: pool.Offering, Amount: od, EffectiveAt: time.Unix(0, 0)}}, prices.Prices)
	priceAt := func(s time.Time) money.Micros {
		if p, ok := book.Spot(pool, s); ok {
			return p
		}
		return od
	}
	perPrice := map[money.Micros]int64{}
	minimum := map[money.Micros]int64{}
	// bill counts the whole seconds from start to end; a closed run
	// shorter than billing.MinimumSeconds also owes the rest of the
	// minimum, at the price at its end.
	bill := func(start, end time.Time, closed bool) {
		a, b := start.Truncate(time.Second), end.Truncate(time.Second)
		for s := a; s.Before(b); s = s.Add(time.Second) {
			perPrice[priceAt(s)]++
		}
		if d := int64(b.Sub(a) / time.Second); closed && d < billing.MinimumSeconds {
			minimum[priceAt(b)] += billing.MinimumSeconds - d
		}
	}
	var mine []string
	for _, in := range c.instances(alice, client.ListInstancesOptions{}) {
		if in.Market != cloud.MarketSpot || in.Offering != pool.Offering || in.Zone != pool.Zone {
			t.Fatalf("instance %s: %s %s/%s; want only spot launches in %s", in.ID, in.Market, in.Offering, in.Zone, pool)
		}
		mine = append(mine, in.ID)
		var start time.Time
		o := client.EventsOptions{Limit: 1000}
		for {
			evs, err := alice.InstanceEvents(ctx, in.ID, o)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range evs.Events {
				if e.Kind != cloud.EventInstanceState || !e.Time.Before(inv.AsOf) {
					continue
				}
				switch on, off := cloud.MeterEdge(e.From, e.To); {
				case on && start.IsZero():
					start = e.Time
				case off && !start.IsZero():
					bill(start, e.Time, true)
					start = time.Time{}
				}
			}
			if evs.Next == "" {
				break
			}
			o.After = evs.Next
		}
		if !start.IsZero() {
			bill(start, inv.AsOf, false) // still running: billed up to the invoice's time
		}
	}
	if seen := slices.Sorted(slices.Values(launches)); !slices.Equal(seen, slices.Sorted(slices.Values(mine))) {
		t.Logf("the tenant has the instances %v; the test followed the launches %v", mine, launches)
	}
	want, wantSeconds := money.Micros(0), int64(0)
	for p, n := range perPrice {
		want += money.PerHour(p, n)
		wantSeconds += n
	}
	for p, n := range minimum {
		want += money.PerHour(p, n)
	}
	got, gotSeconds, sum := money.Micros(0), int64(0), money.Micros(0)
	for _, l := range inv.Lines {
		sum += l.Amount
		if l.Model != "spot" {
			continue
		}
		got += l.Amount
		if l.Category == "compute" {
			gotSeconds += l.Quantity
		}
		if l.UnitPrice > od {
			t.Errorf("spot line %+v above the on-demand price %s", l, od)
		}
	}
	if sum != inv.Total {
		t.Errorf("lines sum to %s, total says %s", sum, inv.Total)
	}
	if got != want || gotSeconds != wantSeconds {
		t.Errorf("spot billed %s for %d s; the events and price history say %s for %d s", got, gotSeconds, want, wantSeconds)
	}
	t.Logf("spot: %d s billed %s over %d price points; invoice total %s", gotSeconds, got, len(prices.Prices), inv.Total)
}

type progressLine struct {
	step int
	by   string
}

func readProgress(t *testing.T, path string) []progressLine {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []progressLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		step, by, ok := strings.Cut(sc.Text(), " ")
		n, err := strconv.Atoi(step)
		if !ok || err != nil {
			continue // a line being written
		}
		out = append(out, progressLine{n, by})
	}
	return out
}
