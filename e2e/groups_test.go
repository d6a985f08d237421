package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agent"
	"github.com/gpucloud/gpucloud/agent/gpu/sim"
	"github.com/gpucloud/gpucloud/agent/metadata"
	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/billing"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/controlplane"
	"github.com/gpucloud/gpucloud/money"
	"github.com/gpucloud/gpucloud/store/pgtest"
)

// Timing of the group tests. The control plane runs on the scaled clock
// (timeScale times the wall clock): the group controller steps every 2
// scaled seconds (a thirtieth of a second of wall clock) and spot prices
// clear every 5. The agents sample utilization every 50 ms of wall clock
// (3 scaled seconds).
const (
	groupInterval   = 2 * time.Second
	groupClear      = 5 * time.Second
	metricsInterval = 50 * time.Millisecond
)

// groupTiming is every group's timing, in scaled seconds: a member counts
// in the metric half a second of wall clock after it runs, scale-in takes
// the highest recommendation of the last second, and a member chosen for
// scale-in is told a second and a half before it is terminated.
var groupTiming = cloud.GroupTiming{WarmupSeconds: 30, StabilizationSeconds: 60, NoticeSeconds: 90}

// groupOffering is what every group of these tests launches.
const groupOffering = "l4.1x"

// startGroupCluster starts a cluster on the scaled clock for group tests:
// the server with the intervals above (and tune's changes), the agents
// sampling every metricsInterval and stamping their samples with the
// scaled clock, as an agent whose clock is in sync with the server's does.
func startGroupCluster(t *testing.T, db string, clock *scaledClock, tune func(*controlplane.Config), specs ...sim.Spec) *cluster {
	t.Helper()
	return startClusterTuned(t, db, func(cfg *controlplane.Config) {
		clock.configure(cfg)
		cfg.GroupInterval = groupInterval
		cfg.SpotClearInterval = groupClear
		if tune != nil {
			tune(cfg)
		}
	}, func(cfg *agent.Config) {
		cfg.Now = clock.Now
		cfg.MetricsInterval = metricsInterval
	}, specs...)
}

// l4Host is a simulated host of n L4 GPUs in a zone.
func l4Host(id, zone string, n int) sim.Spec {
	return sim.Spec{ID: id, Zone: zone, Rack: "rack-" + id, GPUs: sim.GPUSpec{Model: "L4", Count: n}}
}

// group reads a group as `groups describe` shows it.
func (c *cluster) group(cl *client.Client, id string) *api.GroupDescribe {
	c.t.Helper()
	d, err := cl.GetGroup(c.t.Context(), id)
	if err != nil {
		c.t.Fatalf("describe group %s: %v", id, err)
	}
	return d
}

// groupEvents reads all of a group's events, oldest first.
func (c *cluster) groupEvents(cl *client.Client, id string) []*cloud.Event {
	c.t.Helper()
	var out []*cloud.Event
	o := client.EventsOptions{Limit: 1000}
	for {
		page, err := cl.GroupEvents(c.t.Context(), id, o)
		if err != nil {
			c.t.Fatalf("events of group %s: %v", id, err)
		}
		out = append(out, page.Events...)
		if page.Next == "" {
			return out
		}
		o.After = page.Next
	}
}

// instanceEvents reads all of an instance's events, oldest first.
func (c *cluster) instanceEvents(cl *client.Client, id string) []*cloud.Event {
	c.t.Helper()
	var out []*cloud.Event
	o := client.EventsOptions{Limit: 1000}
	for {
		page, err := cl.InstanceEvents(c.t.Context(), id, o)
		if err != nil {
			c.t.Fatalf("events of %s: %v", id, err)
		}
		out = append(out, page.Events...)
		if page.Next == "" {
			return out
		}
		o.After = page.Next
	}
}

// stateAt is the time of an instance's first move to state to (zero when
// it never moved there).
func (c *cluster) stateAt(cl *client.Client, id string, to cloud.State) time.Time {
	c.t.Helper()
	for _, e := range c.instanceEvents(cl, id) {
		if e.Kind == cloud.EventInstanceState && e.To == to {
			return e.Time
		}
	}
	return time.Time{}
}

// scalingDetails is what a group.scaling event of a decision carries.
type scalingDetails struct {
	GroupID string             `json:"group_id"`
	From    *int               `json:"from"`
	To      *int               `json:"to"`
	Policy  string             `json:"policy"`
	Limit   string             `json:"limit"`
	Metrics map[string]float64 `json:"metrics"`
}

func (c *cluster) details(e *cloud.Event) scalingDetails {
	c.t.Helper()
	var d scalingDetails
	if err := json.Unmarshal(e.Details, &d); err != nil {
		c.t.Fatalf("event %d (%s): details %s: %v", e.ID, e.Kind, e.Details, err)
	}
	return d
}

// metadataCall sends one request to a workload's metadata endpoint, as the
// workload itself does, and returns the status and the body.
func (c *cluster) metadataCall(method, base, path string, body any) (int, []byte) {
	c.t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			c.t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(c.t.Context(), method, base+path, r)
	if err != nil {
		c.t.Fatal(err)
	}
	tok, err := metadata.Token(c.t.Context(), c.hc, base, time.Minute)
	if err != nil {
		c.t.Fatalf("%s %s%s: session token: %v", method, base, path, err)
	}
	req.Header.Set(metadata.TokenHeader, tok)
	resp, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s%s: %v", method, base, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("%s %s%s: read the answer: %v", method, base, path, err)
	}
	return resp.StatusCode, b
}

// instanceAction reads a workload's pending instance-action (nil: none).
func (c *cluster) instanceAction(base string) *metadata.Action {
	c.t.Helper()
	st, b := c.metadataCall("GET", base, "/v1/instance-action", nil)
	switch st {
	case http.StatusOK:
		var a metadata.Action
		if err := json.Unmarshal(b, &a); err != nil {
			c.t.Fatalf("instance-action %q: %v", b, err)
		}
		return &a
	case http.StatusNotFound:
		return nil
	}
	c.t.Fatalf("GET %s/v1/instance-action: %d %s", base, st, b)
	return nil
}

// groupWorkloads plays the workloads of a group's members: it learns each
// running member's metadata URL from the environment the member printed,
// and sets the GPU load of each through it.
type groupWorkloads struct {
	c     *cluster
	cl    *client.Client
	urls  map[string]string
	loads map[string]float64
}

func newGroupWorkloads(c *cluster, cl *client.Client) *groupWorkloads {
	return &groupWorkloads{c: c, cl: cl, urls: map[string]string{}, loads: map[string]float64{}}
}

// url is the metadata URL of a running member's workload.
func (w *groupWorkloads) url(id string) string {
	w.c.t.Helper()
	if u, ok := w.urls[id]; ok {
		return u
	}
	u := w.c.workloadEnv(w.cl, id, 1)["GPUCLOUD_METADATA_URL"]
	if u == "" {
		w.c.t.Fatalf("member %s got no GPUCLOUD_METADATA_URL", id)
	}
	w.urls[id] = u
	return u
}

// set sets a member's GPU load as its workload does: PUT /v1/load.
func (w *groupWorkloads) set(id string, v float64) {
	w.c.t.Helper()
	if l, ok := w.loads[id]; ok && l == v {
		return
	}
	st, b := w.c.metadataCall("PUT", w.url(id), "/v1/load", map[string]float64{"gpu_utilization": v})
	if st != http.StatusOK {
		w.c.t.Fatalf("PUT /v1/load of %s: %d %s", id, st, b)
	}
	w.loads[id] = v
}

// loadRunning sets the load v on every running member of d that does not
// have it yet, and returns how many members run.
func (w *groupWorkloads) loadRunning(d *api.GroupDescribe, v float64) int {
	w.c.t.Helper()
	n := 0
	for _, m := range d.Members {
		if m.State == cloud.Running {
			w.set(m.ID, v)
			n++
		}
	}
	return n
}

// running lists a group's running members that are under no notice.
func running(d *api.GroupDescribe) []api.GroupMember {
	var out []api.GroupMember
	for _, m := range d.Members {
		if m.State == cloud.Running && (m.Interruption == nil || m.Interruption.Action == "") {
			out = append(out, m)
		}
	}
	return out
}

func memberIDs(ms []api.GroupMember) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = fmt.Sprintf("%s(%s %s/%s %s)", m.ID, m.Market, m.Offering, m.Zone, m.State)
	}
	return out
}

// spotPrices reads a pool's recorded spot prices of this month.
func (c *cluster) spotPrices(token string, p cloud.Pool) []cloud.SpotPrice {
	c.t.Helper()
	var prices struct {
		Prices []cloud.SpotPrice `json:"prices"`
	}
	q := url.Values{"pool": {p.String()}, "since": {time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).Format(time.RFC3339)}, "limit": {"10000"}}
	c.call("GET", "/v1/spot/prices?"+q.Encode(), token, nil, &prices)
	return prices.Prices
}

// waitSpotPrices waits until the market has cleared a price for every pool:
// it has seen their hosts, and a group launching spot may choose among them.
func (c *cluster) waitSpotPrices(token string, pools ...cloud.Pool) {
	c.t.Helper()
	c.until(fmt.Sprintf("spot prices for %v", pools), func() (bool, string) {
		for _, p := range pools {
			if len(c.spotPrices(token, p)) == 0 {
				return false, p.String() + " has no price yet"
			}
		}
		return true, ""
	})
}

// priceAt is the spot price in force at t (0 when none was).
func priceAt(prices []cloud.SpotPrice, t time.Time) money.Micros {
	var p money.Micros
	for _, sp := range prices {
		if sp.Time.After(t) {
			break
		}
		p = sp.Price
	}
	return p
}

func onDemandPrice(t *testing.T, offering string) money.Micros {
	t.Helper()
	od, err := billing.ListPrice(catalog.Default(), offering)
	if err != nil || od <= 0 {
		t.Fatalf("price of %s: %s, %v", offering, od, err)
	}
	return od
}

// TestGroupTargetTracking runs a group of min 1, max 4 with a target
// tracking policy of 60% GPU utilization whose workloads set their load
// through their metadata endpoints. It checks that another tenant cannot
// read the group; that the idle group stays at its min; that load scales
// it out to its max, with decisions (describe) and group.scaling events
// that carry their inputs; that once the load drops it scales in only
// after the stabilization window, giving the members it picks the notice
// on their metadata's instance-action before terminating them at the
// deadline, and never touching the member whose workload holds its
// completion lock (although it is the idlest and the newest); and that the
// invoice bills exactly the seconds each member ran at its price, with
// lines that sum to the total.
func TestGroupTargetTracking(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { testGroupTarget(t, "sqlite://"+filepath.Join(t.TempDir(), "gpucloud.db")) })
	t.Run("postgres", func(t *testing.T) { testGroupTarget(t, pgtest.URL(t)) })
}

func testGroupTarget(t *testing.T, db string) {
	clock := newScaledClock()
	c := startGroupCluster(t, db, clock, nil, l4Host("sim-a", "e2e-a", 4))
	ctx := t.Context()
	_, alice, _ := c.member("acme", "alice")
	_, bob, _ := c.member("globex", "bob")
	g, err := alice.CreateGroup(ctx, api.CreateGroupRequest{Name: "infer", Min: 1, Max: 4,
		Template: cloud.GroupTemplate{Offerings: []string{groupOffering}, Zones: []string{"e2e-a"}, Command: envCommand},
		Policies: []cloud.ScalingPolicy{{Name: "gpu-util", Type: cloud.PolicyTarget, Metric: cloud.MetricGPUUtilization, Target: 0.6}},
		Timing:   groupTiming}, "infer")
	if err != nil {
		t.Fatal(err)
	}
	_, err = bob.GetGroup(ctx, g.ID)
	wantCode(t, "another tenant describes the group", err, cloud.NotFound)
	_, err = bob.GroupEvents(ctx, g.ID, client.EventsOptions{})
	wantCode(t, "another tenant reads the group's events", err, cloud.NotFound)

	w := newGroupWorkloads(c, alice)
	var first string
	c.until("the group's first member to run", func() (bool, string) {
		d := c.group(alice, g.ID)
		if r := running(d); len(r) == 1 {
			first = r[0].ID
		}
		return first != "", fmt.Sprintf("members %v", memberIDs(d.Members))
	})
	w.url(first)
	// Warm and idle (its workload set no load: 0), it stays alone.
	clock.pass(t, 2*time.Duration(groupTiming.WarmupSeconds)*time.Second)
	if d := c.group(alice, g.ID); d.Desired != 1 || len(d.Members) != 1 || len(d.Status.Decisions) != 0 {
		t.Fatalf("idle group: desired %d, members %v, decisions %+v; want 1, 1, none", d.Desired, memberIDs(d.Members), d.Status.Decisions)
	}

	// Every workload says its GPU is fully busy: 100% against a target
	// of 60% asks for more members, up to the max.
	c.until("the group to scale out to 4 running members under load", func() (bool, string) {
		d := c.group(alice, g.ID)
		n := w.loadRunning(d, 1)
		return d.Desired == 4 && n == 4, fmt.Sprintf("desired %d, members %v", d.Desired, memberIDs(d.Members))
	})
	d := c.group(alice, g.ID)
	var outs []cloud.GroupDecision
	for _, dec := range d.Status.Decisions {
		if dec.To <= dec.From {
			t.Fatalf("decision %+v while the load only rose", dec)
		}
		outs = append(outs, dec)
	}
	if len(outs) == 0 || outs[0].From != 1 || outs[len(outs)-1].To != 4 {
		t.Fatalf("scale-out decisions %+v: want 1 -> ... -> 4", outs)
	}
	for _, dec := range outs {
		if dec.Policy != "gpu-util" || !(dec.Metrics[cloud.MetricGPUUtilization] > 0.6) || dec.Metrics["ready"] < 1 ||
			dec.Metrics["capacity"] < 1 || !strings.Contains(dec.Reason, "gpu_utilization load") || !strings.Contains(dec.Reason, "target 0.60") {
			t.Errorf("scale-out decision %+v: want the policy, its metric above the target, the members counted and ready, and the load and target in the reason", dec)
		}
	}
	var outEvents int
	for _, e := range c.groupEvents(alice, g.ID) {
		if e.Kind != cloud.EventGroupScaling || e.InstanceID != "" {
			continue
		}
		det := c.details(e)
		if det.GroupID != g.ID || det.From == nil || det.To == nil || *det.To <= *det.From || det.Policy != "gpu-util" ||
			!(det.Metrics[cloud.MetricGPUUtilization] > 0.6) || det.Metrics["capacity"] < 1 ||
			!strings.Contains(e.Reason, "gpu_utilization load") || !strings.Contains(e.Reason, "wants") {
			t.Errorf("scale-out event %+v (details %s): want the decision, its policy and its inputs", e, e.Details)
		}
		outEvents++
	}
	if outEvents != len(outs) {
		t.Errorf("%d group.scaling events of decisions, %d decisions", outEvents, len(outs))
	}

	// The newest member's workload takes its completion lock and goes
	// idle: without the lock it is the first the scale-in would pick
	// (the least utilized, then the newest).
	members := slices.Clone(d.Members)
	slices.SortFunc(members, func(a, b api.GroupMember) int { return a.CreatedAt.Compare(b.CreatedAt) })
	locked := members[len(members)-1].ID
	st, body := c.metadataCall("PUT", w.url(locked), "/v1/scale-in-lock", map[string]string{"reason": "saving step 42"})
	if st != http.StatusOK {
		t.Fatalf("PUT /v1/scale-in-lock: %d %s", st, body)
	}
	var lock cloud.ScaleLock
	if err := json.Unmarshal(body, &lock); err != nil || lock.Reason != "saving step 42" || lock.At.IsZero() {
		t.Fatalf("lock %s (%v): want the reason and the time", body, err)
	}
	if in := c.get(alice, locked); !in.ScaleIn.Held() || in.ScaleIn.Lock == nil || in.ScaleIn.Lock.Reason != "saving step 42" {
		t.Fatalf("instance %s: scale-in %+v after its workload locked", locked, in.ScaleIn)
	}
	dropped := clock.Now()
	for _, m := range members {
		v := 0.1
		if m.ID == locked {
			v = 0
		}
		w.set(m.ID, v)
	}

	// The group scales in to one member, the locked one, after the
	// stabilization window; each member it picks sees the notice on its
	// metadata endpoint while it still runs.
	notices := map[string]cloud.Interruption{}
	seen := map[string]bool{}
	c.until("the group to scale in to its locked member", func() (bool, string) {
		d := c.group(alice, g.ID)
		others := 0
		for _, m := range d.Members {
			if m.ID == locked {
				if m.State != cloud.Running || m.Interruption != nil {
					t.Fatalf("the locked member %s is %s with interruption %+v", m.ID, m.State, m.Interruption)
				}
				continue
			}
			others++
			it := m.Interruption
			if it == nil || it.Action == "" {
				continue
			}
			if _, ok := notices[m.ID]; !ok {
				notices[m.ID] = *it
			}
			if !seen[m.ID] && m.State == cloud.Running {
				if a := c.instanceAction(w.url(m.ID)); a != nil {
					if a.Action != metadata.ActionTerminate || !a.Time.Equal(it.Deadline) || a.Reason != cloud.ReclaimScaleIn {
						t.Fatalf("member %s: metadata instance-action %+v; the control plane noticed %+v", m.ID, a, it)
					}
					seen[m.ID] = true
				}
			}
		}
		return others == 0 && d.Desired == 1, fmt.Sprintf("desired %d, members %v, notices %v", d.Desired, memberIDs(d.Members), notices)
	})
	if len(notices) != 3 || len(seen) != 3 {
		t.Fatalf("notices %+v, seen on metadata %v: want each of the 3 unlocked members noticed and told", notices, seen)
	}
	notice := time.Duration(groupTiming.NoticeSeconds) * time.Second
	for id, it := range notices {
		in := c.get(alice, id)
		if in.State != cloud.Terminated {
			t.Errorf("member %s is %s after its scale-in", id, in.State)
		}
		if it.Reason != cloud.ReclaimScaleIn || it.Action != cloud.ActionTerminate || it.Deadline.Sub(it.NoticedAt) != notice {
			t.Errorf("member %s: notice %+v; want terminate, scale-in, %s", id, it, notice)
		}
		if term := c.stateAt(alice, id, cloud.Terminating); term.Before(it.Deadline) {
			t.Errorf("member %s terminating at %s, before its deadline %s", id, term, it.Deadline)
		}
	}
	in := c.get(alice, locked)
	if in.State != cloud.Running || in.Interruption != nil || !in.ScaleIn.Held() {
		t.Fatalf("locked member %s: %s, interruption %+v, scale-in %+v", locked, in.State, in.Interruption, in.ScaleIn)
	}
	if a := c.instanceAction(w.url(locked)); a != nil {
		t.Fatalf("the locked member's metadata shows %+v", a)
	}
	d = c.group(alice, g.ID)
	var in1 *cloud.GroupDecision
	for i, dec := range d.Status.Decisions {
		if dec.To < dec.From {
			if dec.To != 1 || dec.Policy != "gpu-util" || !(dec.Metrics[cloud.MetricGPUUtilization] < 0.6) {
				t.Errorf("scale-in decision %+v: want gpu-util to 1 at a utilization under the target", dec)
			}
			in1 = &d.Status.Decisions[i]
		}
	}
	// The window holds the highest recommendation of the last 60 s: the
	// recommendations for 4 went on until a round after the drop, so the
	// scale-in comes a window later, less the rounds it took to see it.
	window := time.Duration(groupTiming.StabilizationSeconds) * time.Second
	if in1 == nil {
		t.Fatalf("no scale-in decision in %+v", d.Status.Decisions)
	}
	if in1.Time.Sub(dropped) < window-5*groupInterval {
		t.Fatalf("scale-in decision %+v, %s after the load dropped; want one a stabilization window (%s) later", in1, in1.Time.Sub(dropped), window)
	}
	noticed := 0
	for _, e := range c.groupEvents(alice, g.ID) {
		if e.Kind != cloud.EventGroupScaling {
			continue
		}
		if e.InstanceID == locked {
			t.Errorf("group event %+v names the locked member", e)
		}
		if _, ok := notices[e.InstanceID]; ok && strings.Contains(e.Reason, "scale-in notice") {
			noticed++
		}
	}
	if noticed != 3 {
		t.Errorf("%d scale-in notice events, want 3", noticed)
	}
	t.Logf("scaled out to 4 in %d decisions; scaled in %s after the load dropped; locked member %s kept", len(outs), in1.Time.Sub(dropped), locked)

	// Releasing the lock is recorded too.
	if st, body := c.metadataCall("DELETE", w.url(locked), "/v1/scale-in-lock", nil); st != http.StatusNoContent {
		t.Fatalf("DELETE /v1/scale-in-lock: %d %s", st, body)
	}
	if in := c.get(alice, locked); in.ScaleIn.Held() {
		t.Fatalf("instance %s still held after its workload released the lock: %+v", locked, in.ScaleIn)
	}

	checkInvoice(t, c, alice, g.ID, onDemandPrice(t, groupOffering))
}

// checkInvoice checks the tenant's invoice of the month against what its
// instances ran, from their instance.state events (the usage ledger is
// written with them) as of the invoice's own time: every instance is an
// on-demand member of the group, billed every whole second it ran at the
// on-demand price od, a closed run shorter than the minimum also the rest
// of the minimum, a run still open up to the invoice's time; and the
// lines sum to the total.
func checkInvoice(t *testing.T, c *cluster, cl *client.Client, groupID string, od money.Micros) {
	t.Helper()
	invs, err := cl.Invoices(t.Context(), client.InvoicesOptions{Month: "2026-12"})
	if err != nil || len(invs) != 1 {
		t.Fatalf("invoices: %v, %v; want one", invs, err)
	}
	inv := invs[0]
	var seconds, minimum int64
	ins := c.instances(cl, client.ListInstancesOptions{})
	for _, in := range ins {
		if in.GroupID != groupID || in.Market != cloud.MarketOnDemand || in.Offering != groupOffering {
			t.Fatalf("instance %s: group %q, %s %s; want only on-demand %s members of %s", in.ID, in.GroupID, in.Market, in.Offering, groupOffering, groupID)
		}
		var start time.Time
		ran := int64(0)
		for _, e := range c.instanceEvents(cl, in.ID) {
			if e.Kind != cloud.EventInstanceState || !e.Time.Before(inv.AsOf) {
				continue
			}
			switch on, off := cloud.MeterEdge(e.From, e.To); {
			case on && start.IsZero():
				start = e.Time
			case off && !start.IsZero():
				d := int64(e.Time.Truncate(time.Second).Sub(start.Truncate(time.Second)) / time.Second)
				ran += d
				if d < billing.MinimumSeconds {
					minimum += billing.MinimumSeconds - d
				}
				start = time.Time{}
			}
		}
		if !start.IsZero() {
			ran += int64(inv.AsOf.Truncate(time.Second).Sub(start.Truncate(time.Second)) / time.Second)
		}
		t.Logf("member %s (%s) ran %d s", in.ID, in.State, ran)
		seconds += ran
	}
	var gotSeconds, gotMinimum int64
	var got, sum money.Micros
	for _, l := range inv.Lines {
		sum += l.Amount
		switch l.Category {
		case billing.CategoryCompute, billing.CategoryMinimum:
		default:
			t.Errorf("line %+v: the tenant had only compute", l)
			continue
		}
		if l.Model != billing.ModelOnDemand || l.Offering != groupOffering || l.UnitPrice != od {
			t.Errorf("line %+v: want %s on demand at %s", l, groupOffering, od)
		}
		if l.Amount != money.PerHour(l.UnitPrice, l.Quantity) {
			t.Errorf("line %+v: amount is not %d s at %s/h", l, l.Quantity, l.UnitPrice)
		}
		if l.Category == billing.CategoryCompute {
			gotSeconds += l.Quantity
		} else {
			gotMinimum += l.Quantity
		}
		got += l.Amount
	}
	if sum != inv.Total {
		t.Errorf("lines sum to %s, total says %s", sum, inv.Total)
	}
	want := money.PerHour(od, seconds) + money.PerHour(od, minimum)
	if gotSeconds != seconds || gotMinimum != minimum || got != want {
		t.Errorf("billed %d s + %d s minimum = %s; the members ran %d s + %d s minimum = %s", gotSeconds, gotMinimum, got, seconds, minimum, want)
	}
	t.Logf("invoice: %d members, %d s at %s/h (+%d s minimum): %s", len(ins), gotSeconds, od, gotMinimum, inv.Total)
}

// TestGroupSpotReclaimReplaced runs a spot group of two over two pools,
// one member in each, and makes room for another tenant's on-demand
// instance in one pool by reclaiming the member there: the group launches
// a replacement in the other pool at once (a member under notice does not
// count), and ends with its two members running.
func TestGroupSpotReclaimReplaced(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { testGroupReclaim(t, "sqlite://"+filepath.Join(t.TempDir(), "gpucloud.db")) })
	t.Run("postgres", func(t *testing.T) { testGroupReclaim(t, pgtest.URL(t)) })
}

func testGroupReclaim(t *testing.T, db string) {
	clock := newScaledClock()
	const reclaimNotice = 30 * time.Second
	c := startGroupCluster(t, db, clock, func(cfg *controlplane.Config) {
		cfg.PoolNotice = map[string]time.Duration{groupOffering: reclaimNotice}
	}, l4Host("sim-a", "e2e-a", 1), l4Host("sim-b", "e2e-b", 2))
	ctx := t.Context()
	_, alice, aliceToken := c.member("acme", "alice")
	_, bob, _ := c.member("globex", "bob")
	poolA, poolB := cloud.Pool{Offering: groupOffering, Zone: "e2e-a"}, cloud.Pool{Offering: groupOffering, Zone: "e2e-b"}
	c.waitSpotPrices(aliceToken, poolA, poolB)
	g, err := alice.CreateGroup(ctx, api.CreateGroupRequest{Name: "batch", Min: 2, Max: 2,
		Template: cloud.GroupTemplate{Offerings: []string{groupOffering}, Zones: []string{"e2e-a", "e2e-b"}, Command: envCommand},
		Mixed:    cloud.MixedInstances{Spot: true}, Timing: groupTiming}, "batch")
	if err != nil {
		t.Fatal(err)
	}
	var first []api.GroupMember
	c.until("two spot members to run", func() (bool, string) {
		d := c.group(alice, g.ID)
		first = running(d)
		return len(first) == 2, fmt.Sprintf("members %v", memberIDs(d.Members))
	})
	// Spot spreads over the pools with room: one member in each.
	var victim api.GroupMember
	zones := map[string]bool{}
	for _, m := range first {
		if m.Market != cloud.MarketSpot {
			t.Fatalf("member %+v: want spot", m)
		}
		zones[m.Zone] = true
		if m.Zone == poolA.Zone {
			victim = m
		}
	}
	if len(zones) != 2 || victim.ID == "" {
		t.Fatalf("members %v: want one in each pool", memberIDs(first))
	}

	// Another tenant's on-demand instance needs the GPU of pool a.
	od, err := bob.CreateInstance(ctx, api.CreateInstanceRequest{Offering: groupOffering, Zones: []string{poolA.Zone},
		Command: []string{"sleep", "600"}}, "od-a")
	if err != nil {
		t.Fatal(err)
	}
	var it *cloud.Interruption
	c.until("a reclaim notice on "+victim.ID, func() (bool, string) {
		in := c.get(alice, victim.ID)
		it = in.Interruption
		return it != nil && it.Action != "", fmt.Sprintf("%s %+v", in.State, it)
	})
	if it.Action != cloud.ActionTerminate || it.Reason != cloud.ReclaimCapacity || it.For != od.ID || it.Deadline.Sub(it.NoticedAt) != reclaimNotice {
		t.Fatalf("notice %+v: want terminate, capacity, for %s, %s", it, od.ID, reclaimNotice)
	}
	var rep api.GroupMember
	c.until("the group to run two members again without "+victim.ID, func() (bool, string) {
		d := c.group(alice, g.ID)
		r := running(d)
		gone := !slices.ContainsFunc(d.Members, func(m api.GroupMember) bool { return m.ID == victim.ID })
		for _, m := range r {
			if !slices.ContainsFunc(first, func(f api.GroupMember) bool { return f.ID == m.ID }) {
				rep = m
			}
		}
		return gone && len(r) == 2 && d.Desired == 2, fmt.Sprintf("desired %d, members %v", d.Desired, memberIDs(d.Members))
	})
	if rep.ID == "" || (rep.Zone == poolA.Zone && rep.Market == cloud.MarketSpot) {
		t.Fatalf("replacement %+v: want another pool or on demand", rep)
	}
	// It was launched as soon as the notice came, not once the member was
	// gone.
	if !rep.CreatedAt.Before(it.Deadline) {
		t.Errorf("replacement %s launched at %s, after the reclaim deadline %s", rep.ID, rep.CreatedAt, it.Deadline)
	}
	if term := c.stateAt(alice, victim.ID, cloud.Terminating); term.Before(it.Deadline) {
		t.Errorf("reclaimed member terminating at %s, before its deadline %s", term, it.Deadline)
	}
	c.waitState(bob, od.ID, cloud.Running)
	t.Logf("member %s reclaimed in %s; replacement %s: %s in %s, launched %s into the notice", victim.ID, poolA, rep.ID, rep.Market, rep.Zone,
		rep.CreatedAt.Sub(it.NoticedAt))
}

// TestGroupPriceRatioMove runs a spot group of one whose member lands in
// the roomier pool, then fills that pool with another tenant's on-demand
// instances (they fit: nothing is reclaimed) until its spot price passes
// 80% of on demand: the group launches a replacement in the other pool,
// gives the member a price-ratio notice only once the replacement runs, and
// terminates it at the deadline.
func TestGroupPriceRatioMove(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { testGroupPriceRatio(t, "sqlite://"+filepath.Join(t.TempDir(), "gpucloud.db")) })
	t.Run("postgres", func(t *testing.T) { testGroupPriceRatio(t, pgtest.URL(t)) })
}

func testGroupPriceRatio(t *testing.T, db string) {
	clock := newScaledClock()
	c := startGroupCluster(t, db, clock, nil, l4Host("sim-a", "e2e-a", 4), l4Host("sim-b", "e2e-b", 2))
	ctx := t.Context()
	_, alice, aliceToken := c.member("acme", "alice")
	_, bob, _ := c.member("globex", "bob")
	poolA, poolB := cloud.Pool{Offering: groupOffering, Zone: "e2e-a"}, cloud.Pool{Offering: groupOffering, Zone: "e2e-b"}
	c.waitSpotPrices(aliceToken, poolA, poolB)
	g, err := alice.CreateGroup(ctx, api.CreateGroupRequest{Name: "sweep", Min: 1, Max: 1,
		Template: cloud.GroupTemplate{Offerings: []string{groupOffering}, Zones: []string{"e2e-a", "e2e-b"}, Command: envCommand},
		Mixed:    cloud.MixedInstances{Spot: true}, Timing: groupTiming}, "sweep")
	if err != nil {
		t.Fatal(err)
	}
	w := newGroupWorkloads(c, alice)
	var old api.GroupMember
	c.until("the spot member to run", func() (bool, string) {
		d := c.group(alice, g.ID)
		if r := running(d); len(r) == 1 {
			old = r[0]
		}
		return old.ID != "", fmt.Sprintf("members %v", memberIDs(d.Members))
	})
	// Both pools at the floor: the one with more room wins.
	if old.Market != cloud.MarketSpot || old.Zone != poolA.Zone {
		t.Fatalf("member %+v: want spot in %s", old, poolA)
	}
	oldURL := w.url(old.ID)

	// Bob's on-demand instances take the other three GPUs of pool a: they
	// fit, nothing is reclaimed, and the pool is full.
	for i, off := range []string{"l4.2x", "l4.1x"} {
		in, err := bob.CreateInstance(ctx, api.CreateInstanceRequest{Offering: off, Zones: []string{poolA.Zone},
			Command: []string{"sleep", "600"}}, fmt.Sprintf("fill-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		c.waitState(bob, in.ID, cloud.Running)
	}
	var it *cloud.Interruption
	var toldReason string
	c.until("a price-ratio notice on "+old.ID, func() (bool, string) {
		in := c.get(alice, old.ID)
		if in.Interruption != nil && in.Interruption.Action != "" {
			if in.Interruption.Reason != cloud.ReclaimPriceMove {
				t.Fatalf("member %s: %+v before any price-ratio move", old.ID, in.Interruption)
			}
			it = in.Interruption
			if a := c.instanceAction(oldURL); a != nil {
				toldReason = a.Reason
			}
		}
		return toldReason != "", fmt.Sprintf("%s %+v; prices of %s %v", in.State, in.Interruption, poolA, c.spotPrices(aliceToken, poolA))
	})
	if it.Action != cloud.ActionTerminate || toldReason != cloud.ReclaimPriceMove ||
		it.Deadline.Sub(it.NoticedAt) != time.Duration(groupTiming.NoticeSeconds)*time.Second {
		t.Fatalf("notice %+v (metadata says %q): want terminate, price-ratio, %ds", it, toldReason, groupTiming.NoticeSeconds)
	}
	odPrice := onDemandPrice(t, groupOffering)
	if p := priceAt(c.spotPrices(aliceToken, poolA), it.NoticedAt); int64(p)*100 <= int64(odPrice)*80 {
		t.Fatalf("spot price of %s at the notice was %s, not above 80%% of %s", poolA, p, odPrice)
	}
	// The replacement runs in pool b, and ran before the notice.
	d := c.group(alice, g.ID)
	var rep api.GroupMember
	for _, m := range d.Members {
		if m.ID != old.ID {
			if rep.ID != "" {
				t.Fatalf("two replacements: %v", memberIDs(d.Members))
			}
			rep = m
		}
	}
	if rep.ID == "" || rep.Market != cloud.MarketSpot || rep.Zone != poolB.Zone {
		t.Fatalf("replacement %+v: want spot in %s", rep, poolB)
	}
	if ran := c.stateAt(alice, rep.ID, cloud.Running); ran.IsZero() || ran.After(it.NoticedAt) {
		t.Fatalf("replacement %s running at %s; the notice came at %s: want the replacement running first", rep.ID, ran, it.NoticedAt)
	}
	c.waitState(alice, old.ID, cloud.Terminated)
	if term := c.stateAt(alice, old.ID, cloud.Terminating); term.Before(it.Deadline) {
		t.Errorf("member terminating at %s, before its deadline %s", term, it.Deadline)
	}
	d = c.group(alice, g.ID)
	if r := running(d); len(r) != 1 || r[0].ID != rep.ID || len(d.Members) != 1 || d.Desired != 1 {
		t.Fatalf("after the move: desired %d, members %v; want %s alone", d.Desired, memberIDs(d.Members), rep.ID)
	}
	t.Logf("moved %s from %s to %s as %s's spot price passed 80%% of %s", old.ID, poolA, rep.ID, poolA, odPrice)
}

// TestGroupBudget runs a target tracking group of max 4 with a budget for
// two on-demand members and load that asks for four: the group grows to
// two and holds there, and a decision, the group's message and a
// group.scaling event name the budget.
func TestGroupBudget(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { testGroupBudget(t, "sqlite://"+filepath.Join(t.TempDir(), "gpucloud.db")) })
	t.Run("postgres", func(t *testing.T) { testGroupBudget(t, pgtest.URL(t)) })
}

func testGroupBudget(t *testing.T, db string) {
	clock := newScaledClock()
	c := startGroupCluster(t, db, clock, nil, l4Host("sim-a", "e2e-a", 4))
	ctx := t.Context()
	_, alice, _ := c.member("acme", "alice")
	od := onDemandPrice(t, groupOffering)
	budget := 2*od + od/2
	g, err := alice.CreateGroup(ctx, api.CreateGroupRequest{Name: "capped", Min: 1, Max: 4,
		Template:      cloud.GroupTemplate{Offerings: []string{groupOffering}, Zones: []string{"e2e-a"}, Command: envCommand},
		Policies:      []cloud.ScalingPolicy{{Name: "gpu-util", Type: cloud.PolicyTarget, Metric: cloud.MetricGPUUtilization, Target: 0.6}},
		Timing:        groupTiming,
		BudgetPerHour: budget}, "capped")
	if err != nil {
		t.Fatal(err)
	}
	w := newGroupWorkloads(c, alice)
	var limited *cloud.GroupDecision
	check := func(d *api.GroupDescribe) {
		if d.Desired > 2 || len(d.Members) > 2 {
			t.Fatalf("over the budget: desired %d, members %v", d.Desired, memberIDs(d.Members))
		}
	}
	c.until("the group to stop at its budget", func() (bool, string) {
		d := c.group(alice, g.ID)
		check(d)
		n := w.loadRunning(d, 1)
		for i, dec := range d.Status.Decisions {
			if dec.Limit == "budget" {
				limited = &d.Status.Decisions[i]
			}
		}
		return limited != nil && n == 2, fmt.Sprintf("desired %d, members %v, decisions %+v", d.Desired, memberIDs(d.Members), d.Status.Decisions)
	})
	if limited.To != 2 || !strings.Contains(limited.Reason, "budget") || limited.Policy != "gpu-util" {
		t.Fatalf("decision %+v: want gpu-util held at 2 by the budget", limited)
	}
	// The load still asks for 4 (2 × 100% at 60%); the group holds.
	until := clock.Now().Add(2 * time.Duration(groupTiming.StabilizationSeconds) * time.Second)
	c.until("the group to hold at its budget for two windows", func() (bool, string) {
		d := c.group(alice, g.ID)
		check(d)
		w.loadRunning(d, 1)
		return !clock.Now().Before(until), fmt.Sprintf("desired %d, members %v", d.Desired, memberIDs(d.Members))
	})
	d := c.group(alice, g.ID)
	if d.Desired != 2 || len(running(d)) != 2 || !strings.Contains(d.Status.Message, "budget") {
		t.Fatalf("desired %d, members %v, message %q: want 2 running and the budget named", d.Desired, memberIDs(d.Members), d.Status.Message)
	}
	found := false
	for _, e := range c.groupEvents(alice, g.ID) {
		if e.Kind == cloud.EventGroupScaling && e.InstanceID == "" && c.details(e).Limit == "budget" && strings.Contains(e.Reason, "budget") {
			found = true
		}
	}
	if !found {
		t.Fatalf("no group.scaling event names the budget")
	}
	t.Logf("held at 2 under a budget of %s/h (%s/h each): %s", budget, od, d.Status.Message)
}
