package console

import (
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gpucloud/gpucloud/advise"
	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/billing"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/internal/ctrlesc"
	"github.com/gpucloud/gpucloud/money"
	"github.com/gpucloud/gpucloud/service"
)

// pageSize is the instances list's page.
const pageSize = 50

// --- instances -------------------------------------------------------------

func (c *Console) instances(w http.ResponseWriter, r *http.Request, s *session) error {
	q := r.URL.Query()
	query := service.InstanceQuery{Offering: q.Get("offering"), Market: cloud.Market(q.Get("market")),
		Limit: pageSize, After: q.Get("after"), NewestFirst: true}
	if s.admin() {
		query.Tenant = q.Get("tenant")
	}
	view := q.Get("view")
	switch st := q.Get("state"); {
	case st != "":
		query.States, view = []cloud.State{cloud.State(st)}, ""
	case view == "ended":
		query.States = endedStates
	case view == "all":
	default:
		query.States, view = currentStates, ""
	}
	list, next, err := c.svc.Instances.List(r.Context(), s.actor, query)
	if err != nil {
		return err
	}
	nextURL := ""
	if next != "" {
		v := r.URL.Query()
		v.Set("after", next)
		nextURL = "/instances?" + v.Encode()
	}
	offerings := make([]string, 0, len(c.cat.Offerings()))
	for _, o := range c.cat.Offerings() {
		offerings = append(offerings, o.Name)
	}
	c.render(w, r, http.StatusOK, "instances", s, map[string]any{
		"Title": "Instances", "Instances": list, "Next": nextURL, "First": q.Get("after") != "",
		"State": q.Get("state"), "View": view, "Offering": q.Get("offering"), "Market": q.Get("market"), "TenantFilter": q.Get("tenant"),
		"States":    []cloud.State{cloud.Pending, cloud.Scheduled, cloud.Starting, cloud.Running, cloud.Paused, cloud.Stopping, cloud.Stopped, cloud.Terminating, cloud.Terminated, cloud.Failed, cloud.Lost},
		"Offerings": offerings,
	})
	return nil
}

// The instances list shows the current instances (those that still hold
// or may hold capacity again) by default; ended ones are a view of their
// own, so that a long history does not bury what runs.
var (
	currentStates = []cloud.State{cloud.Pending, cloud.Scheduled, cloud.Starting, cloud.Running, cloud.Paused, cloud.Stopping, cloud.Stopped}
	endedStates   = []cloud.State{cloud.Terminating, cloud.Terminated, cloud.Failed, cloud.Lost}
)

// gpuLine is one device of an instance's placement, as the page shows it.
type gpuLine struct {
	Index   int
	UUID    string
	Model   string
	What    string
	MIGUUID string
}

func (c *Console) instance(w http.ResponseWriter, r *http.Request, s *session) error {
	ctx := r.Context()
	id := r.PathValue("id")
	in, err := c.svc.Instances.Get(ctx, s.actor, id)
	if err != nil {
		return err
	}
	evs, _, err := c.svc.Instances.Events(ctx, s.actor, id, 0, 200)
	if err != nil {
		return err
	}
	cost, err := c.svc.Billing.InstanceCost(ctx, s.actor, id)
	if err != nil && cloud.ErrorCode(err) != cloud.Conflict {
		return err
	}
	costNote := ""
	if err != nil {
		costNote = strings.TrimPrefix(err.Error(), string(cloud.Conflict)+": ")
	}
	var gpus []gpuLine
	if p := in.Placement; p != nil {
		for _, d := range p.Devices {
			g := gpuLine{Index: d.GPU, UUID: d.UUID, MIGUUID: d.VisibleUUID}
			switch d.Kind {
			case fleet.MIGSlice:
				g.What = "MIG " + d.MIGProfile
			case fleet.Share:
				g.What = fmt.Sprintf("share: %d.%d%% compute, %s", d.Milli/10, d.Milli%10, memory(int64(d.MemoryMiB)))
			default:
				g.What = "whole GPU"
			}
			gpus = append(gpus, g)
		}
	}
	o, _ := c.cat.Offering(in.Offering)
	net, err := c.instanceNetwork(r, s, in)
	if err != nil {
		return err
	}
	term, termReason := c.terminalState(in)
	if term {
		w.Header().Set("Content-Security-Policy", terminalCSP)
	}
	from, to := chartSpan(in, c.now())
	c.render(w, r, http.StatusOK, "instance", s, map[string]any{
		"ChartSpan": spanText(to.Sub(from)),
		"Title":     "Instance " + in.ID, "Section": "instances", "In": in, "Events": evs, "Cost": cost, "CostNote": costNote,
		"GPUs": gpus, "Offering": o, "Charts": c.charts(r, s, in), "Net": net,
		"Terminal": term, "TerminalReason": termReason,
		"CanStop":      in.State == cloud.Running || in.State == cloud.Starting || in.State == cloud.Scheduled || in.State == cloud.Pending,
		"CanStart":     in.State == cloud.Stopped,
		"CanTerminate": in.State != cloud.Terminated && in.State != cloud.Terminating,
	})
	return nil
}

// instanceLog answers the log from ?offset= as JSON, for the page's tail:
// its text with control characters made visible (ctrlesc), so that the
// page shows what a terminal would have obeyed. A character cut short at
// the chunk's end is left for the next request ("next" stops before it),
// unless the chunk holds nothing else.
func (c *Console) instanceLog(w http.ResponseWriter, r *http.Request, s *session) error {
	off, err := strconv.ParseInt(r.URL.Query().Get("offset"), 10, 64)
	if err != nil && r.URL.Query().Get("offset") != "" {
		return &cloud.Error{Code: cloud.Invalid, Message: "offset must be a byte offset"}
	}
	chunk, err := c.svc.Agents.Logs(r.Context(), s.actor, r.PathValue("id"), off)
	if err != nil {
		return err
	}
	data := chunk.Data
	if n := ctrlesc.IncompleteTail(data); n > 0 && n < len(data) {
		data = data[:len(data)-n]
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": ctrlesc.Escape(string(data)), "start": chunk.Start, "next": chunk.Start + int64(len(data))})
	return nil
}

// chartWindow is how far back the instance page's charts go.
const chartWindow = time.Hour

// minChartSpan is the narrowest time axis a chart draws: a chart of an
// instance a few seconds old still spans a minute.
const minChartSpan = time.Minute

// chartSpan is the time axis of an instance's charts at now: the last
// hour, or, for an instance younger than that, since it was created, so
// that a young instance's samples fill the chart instead of its right
// edge.
func chartSpan(in *cloud.Instance, now time.Time) (from, to time.Time) {
	from = now.Add(-chartWindow)
	if in.CreatedAt.After(from) {
		from = in.CreatedAt
	}
	if now.Sub(from) < minChartSpan {
		from = now.Add(-minChartSpan)
	}
	return from, now
}

func (c *Console) charts(r *http.Request, s *session, in *cloud.Instance) []chart {
	from, now := chartSpan(in, c.now())
	pts, err := c.svc.Instances.InstanceMetrics(r.Context(), s.actor, in.ID, from)
	if err != nil {
		return nil
	}
	series := map[string][]point{}
	for _, p := range pts {
		series[p.Name] = append(series[p.Name], point{p.At, p.Value})
	}
	var out []chart
	for _, m := range []struct{ name, title, unit string }{
		{cloud.MetricGPUUtilization, "GPU utilization", "%"},
		{cloud.MetricGPUMemoryUsed, "GPU memory used", "GiB"},
		{cloud.MetricCPUUtilization, "CPU utilization", "%"},
	} {
		out = append(out, lineChart(m.title, m.unit, series[m.name], from, now))
	}
	return out
}

// instanceCharts answers just the charts, for the page's refresh.
func (c *Console) instanceCharts(w http.ResponseWriter, r *http.Request, s *session) error {
	in, err := c.svc.Instances.Get(r.Context(), s.actor, r.PathValue("id"))
	if err != nil {
		return err
	}
	var b strings.Builder
	for _, ch := range c.charts(r, s, in) {
		b.WriteString(string(ch.SVG))
	}
	w.Header().Set("Content-Type", "image/svg+xml; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write([]byte(b.String()))
	return nil
}

func (c *Console) act(w http.ResponseWriter, r *http.Request, s *session) error {
	var a service.Action
	switch r.PathValue("action") {
	case "stop":
		a = service.Stop
	case "start":
		a = service.Start
	case "terminate":
		a = service.Terminate
	default:
		return &cloud.Error{Code: cloud.NotFound, Message: "no action " + r.PathValue("action")}
	}
	id := r.PathValue("id")
	if _, err := c.svc.Instances.Act(r.Context(), s.actor, id, a, 0); err != nil {
		return err
	}
	http.Redirect(w, r, "/instances/"+id, http.StatusSeeOther)
	return nil
}

// --- launch ----------------------------------------------------------------

// offerRow is one offering in the launch flow.
type offerRow struct {
	O          *catalog.Offering
	OnDemand   money.Micros
	HasPrice   bool
	Spot       money.Micros
	HasSpot    bool
	ReclaimBP  int64
	SpotPool   service.PoolStats
	Known      bool
	Hosts      int
	FitsNow    int
	Reasons    string
	Selectable bool
}

func (c *Console) offerRows(r *http.Request, s *session) ([]offerRow, error) {
	ctx := r.Context()
	now := c.now()
	prices, err := c.svc.Prices.List(ctx, s.actor, service.PriceQuery{Kind: cloud.PriceCompute, At: now})
	if err != nil {
		return nil, err
	}
	onDemand := map[string]money.Micros{}
	for _, p := range prices {
		if p.Zone == "" || onDemand[p.Offering] == 0 {
			onDemand[p.Offering] = p.Amount
		}
	}
	pools, err := c.svc.Spot.Pools(ctx, s.actor, 24*time.Hour)
	if err != nil {
		return nil, err
	}
	spot := map[string]service.PoolStats{}
	for _, p := range pools {
		if cur, ok := spot[p.Offering]; !ok || p.Price < cur.Price {
			spot[p.Offering] = p
		}
	}
	avail := c.svc.Availability()
	var rows []offerRow
	for _, o := range c.cat.Offerings() {
		row := offerRow{O: o}
		row.OnDemand, row.HasPrice = onDemand[o.Name]
		if p, ok := spot[o.Name]; ok {
			row.Spot, row.HasSpot, row.ReclaimBP, row.SpotPool = p.Price, true, p.ReclaimRateBP, p
		}
		if a, ok := avail[o.Name]; ok {
			row.Known, row.Hosts, row.FitsNow = true, a.Hosts, a.FitsNow
			row.Reasons = reasonsText(a.Reasons)
		}
		row.Selectable = !row.Known || row.Hosts > 0
		rows = append(rows, row)
	}
	// Runnable first (fits now, then possible), then by name.
	rank := func(x offerRow) int {
		switch {
		case x.Known && x.FitsNow > 0:
			return 0
		case !x.Known:
			return 1
		case x.Hosts > 0:
			return 2
		}
		return 3
	}
	sort.SliceStable(rows, func(i, j int) bool { return rank(rows[i]) < rank(rows[j]) })
	return rows, nil
}

func (c *Console) launchPage(w http.ResponseWriter, r *http.Request, s *session) error {
	rows, err := c.offerRows(r, s)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	var advice *advise.Advice
	var adviceErr string
	if q.Get("advise") != "" {
		advice, err = c.advise(r, s, q)
		if err != nil {
			if cloud.ErrorCode(err) != cloud.Invalid {
				return err
			}
			adviceErr = strings.TrimPrefix(err.Error(), string(cloud.Invalid)+": ")
		}
	}
	var runnable, never []offerRow
	for _, row := range rows {
		if row.Selectable {
			runnable = append(runnable, row)
		} else {
			never = append(never, row)
		}
	}
	form := map[string]string{"params": "7B", "precision": "bf16", "task": "inference", "nodes": "1",
		"hours": "8", "days": "30", "checkpoint": "0"}
	for k := range form {
		if v := q.Get(k); v != "" {
			form[k] = v
		}
	}
	if advice != nil && len(advice.Options) > 5 {
		advice.Options = advice.Options[:5]
	}
	c.render(w, r, http.StatusOK, "launch", s, map[string]any{"Title": "Launch an instance", "Offerings": runnable,
		"Never": never, "Selected": q.Get("offering"), "Advice": advice, "AdviceError": adviceErr, "Form": form,
		"Precisions": []string{"fp32", "tf32", "bf16", "fp16", "fp8", "int8", "int4"}})
	return nil
}

func (c *Console) launch(w http.ResponseWriter, r *http.Request, s *session) error {
	ctx := r.Context()
	offering := r.PostFormValue("offering")
	name := strings.TrimSpace(r.PostFormValue("name"))
	var command []string
	if cmd := strings.TrimSpace(r.PostFormValue("command")); cmd != "" {
		command = []string{"/bin/sh", "-c", cmd}
	}
	key := r.PostFormValue("key") // one per rendered form: a double submit creates one instance
	if r.PostFormValue("market") == "spot" {
		req, _, err := c.svc.Spot.Create(ctx, s.actor, api.CreateSpotRequestRequest{Name: name, Type: cloud.SpotOneTime,
			Pools: []cloud.Pool{{Offering: offering}}, Command: command}, key)
		if err != nil {
			return err
		}
		http.Redirect(w, r, "/instances?market=spot#"+req.ID, http.StatusSeeOther)
		return nil
	}
	in, _, err := c.svc.Instances.Create(ctx, s.actor, api.CreateInstanceRequest{Name: name, Offering: offering, Command: command}, key)
	if err != nil {
		return err
	}
	http.Redirect(w, r, "/instances/"+in.ID, http.StatusSeeOther)
	return nil
}

// --- fleet -----------------------------------------------------------------

// fleetPageSize is how many hosts the fleet map draws per page.
const fleetPageSize = 100

func (c *Console) fleetPage(w http.ResponseWriter, r *http.Request, s *session) error {
	if !s.admin() {
		return &cloud.Error{Code: cloud.PermissionDenied, Message: "the fleet map is for the cloud's operators (admin tokens)"}
	}
	ctx := r.Context()
	hosts, err := c.svc.Hosts.List(ctx, s.actor)
	if err != nil {
		return err
	}
	sort.Slice(hosts, func(i, j int) bool { return hosts[i].ID < hosts[j].ID })
	pageNo, _ := strconv.Atoi(r.URL.Query().Get("page"))
	if pageNo < 0 {
		pageNo = 0
	}
	from := min(pageNo*fleetPageSize, len(hosts))
	to := min(from+fleetPageSize, len(hosts))
	shown := hosts[from:to]
	allocs := map[string][]*cloud.Instance{}
	for _, h := range shown {
		list, _, err := c.svc.Instances.List(ctx, s.actor, service.InstanceQuery{Host: h.ID, States: cloud.HoldingStates(), Limit: 1000})
		if err != nil {
			return err
		}
		allocs[h.ID] = list
	}
	maps := make([]hostMap, 0, len(shown))
	for _, h := range shown {
		maps = append(maps, drawHost(c.cat, h, allocs[h.ID]))
	}
	data := map[string]any{"Title": "Fleet", "Hosts": maps, "Total": len(hosts), "From": from + 1, "To": to}
	if pageNo > 0 {
		data["Prev"] = fmt.Sprintf("/fleet?page=%d", pageNo-1)
	}
	if to < len(hosts) {
		data["Next"] = fmt.Sprintf("/fleet?page=%d", pageNo+1)
	}
	data["Summary"] = summarize(maps)
	c.render(w, r, http.StatusOK, "fleet", s, data)
	return nil
}

// --- spot ------------------------------------------------------------------

func (c *Console) spotPage(w http.ResponseWriter, r *http.Request, s *session) error {
	ctx := r.Context()
	now := c.now()
	pools, err := c.svc.Spot.Pools(ctx, s.actor, 24*time.Hour)
	if err != nil {
		return err
	}
	sort.Slice(pools, func(i, j int) bool { return pools[i].Pool.String() < pools[j].Pool.String() })
	// Each pool's history, from a little before the window so that the
	// price in force at its start is drawn from the left edge.
	byPool := map[string][]point{}
	for _, p := range pools {
		hist, err := c.svc.Spot.Prices(ctx, s.actor, service.SpotPriceQuery{Pools: []string{p.Pool.String()},
			Since: now.Add(-25 * time.Hour), Limit: service.MaxSpotPoints})
		if err != nil {
			return err
		}
		for _, h := range hist {
			byPool[p.Pool.String()] = append(byPool[p.Pool.String()], point{h.Time, float64(h.Price) / 1e6})
		}
	}
	type row struct {
		P     service.PoolStats
		Chart chart
	}
	var rows []row
	for _, p := range pools {
		series := byPool[p.Pool.String()]
		var od float64
		if p.OnDemand != nil {
			od = float64(*p.OnDemand) / 1e6
		}
		rows = append(rows, row{P: p, Chart: sparkline(p.Pool.String(), series, od, now.Add(-24*time.Hour), now)})
	}
	c.render(w, r, http.StatusOK, "spot", s, map[string]any{"Title": "Spot market", "Pools": rows, "Clears": intervalText(c.clearEvery)})
	return nil
}

// --- billing ---------------------------------------------------------------

func (c *Console) billingPage(w http.ResponseWriter, r *http.Request, s *session) error {
	ctx := r.Context()
	tenant := ""
	if s.admin() {
		tenant = r.URL.Query().Get("tenant")
	}
	period, err := c.svc.Billing.Month(r.URL.Query().Get("month"))
	if err != nil {
		return err
	}
	invs, err := c.svc.Billing.Invoices(ctx, s.actor, tenant, period)
	if err != nil {
		return err
	}
	views := make([]invoiceView, len(invs))
	for i, inv := range invs {
		views[i] = viewInvoice(inv)
	}
	data := map[string]any{"Title": "Billing", "Invoices": views, "Month": period.Name(), "TenantFilter": tenant}
	if !s.admin() || tenant != "" {
		b, err := c.svc.Billing.Budget(ctx, s.actor, tenant)
		if err != nil {
			return err
		}
		data["Budget"] = b
		if b.Budget != nil && b.Budget.Amount > 0 {
			pct, err := money.MulDiv(b.Spent, 100, int64(b.Budget.Amount))
			if err == nil {
				data["BudgetPct"] = int64(pct)
			}
		}
	}
	m, err := c.meterOf(r, s, tenant)
	if err != nil {
		return err
	}
	data["Meter"] = m
	c.render(w, r, http.StatusOK, "billing", s, data)
	return nil
}

// invoiceView is an invoice as the billing page shows it: its lines that
// differ only in unit price grouped (billing.GroupLines, as the CLI's
// table groups them), each group's amount rounded to cents so that the
// groups add up to the total, and a group of several prices with its
// lines (its price windows) for the drill-down, whose cents add up to
// the group's.
type invoiceView struct {
	*billing.Invoice
	Groups []invoiceGroup
}

// invoiceGroup is one row of an invoice, and its price windows when it
// sums several.
type invoiceGroup struct {
	billing.LineGroup
	Cents   money.Micros
	Windows []invoiceLine
}

// invoiceLine is one line of a group's drill-down.
type invoiceLine struct {
	billing.Line
	Cents money.Micros
}

func viewInvoice(inv *billing.Invoice) invoiceView {
	groups := billing.GroupLines(inv.Lines, false)
	amounts := make([]money.Micros, len(groups))
	for i, g := range groups {
		amounts[i] = g.Amount
	}
	cents := money.RoundToCents(amounts, inv.Total)
	v := invoiceView{Invoice: inv, Groups: make([]invoiceGroup, len(groups))}
	for i, g := range groups {
		v.Groups[i] = invoiceGroup{LineGroup: g, Cents: cents[i]}
		if g.Prices() < 2 {
			continue
		}
		sub := make([]money.Micros, len(g.Lines))
		for j, l := range g.Lines {
			sub[j] = l.Amount
		}
		subCents := money.RoundToCents(sub, cents[i])
		for j, l := range g.Lines {
			v.Groups[i].Windows = append(v.Groups[i].Windows, invoiceLine{Line: l, Cents: subCents[j]})
		}
	}
	return v
}

// groupPrice is the unit price column of an invoice's group: its price,
// or for several, how many and their average: "37 prices, avg $1.0761/h".
func groupPrice(g billing.LineGroup) string {
	if g.Prices() > 1 {
		return fmt.Sprintf("%d prices, avg %s", g.Prices(), billing.FormatUnitPrice(billing.Line{Unit: g.Unit, UnitPrice: g.AveragePrice()}))
	}
	return billing.FormatUnitPrice(g.Line)
}

// meterReading is the live meter: what the current clock hour has cost
// so far, and the rate it accrues at now.
type meterReading struct {
	HourStart time.Time    `json:"hour_start"`
	AsOf      time.Time    `json:"as_of"`
	Spent     money.Micros `json:"spent"`
	SpentText string       `json:"spent_text"`
}

func (c *Console) meterOf(r *http.Request, s *session, tenant string) (*meterReading, error) {
	now := c.now()
	hour := now.UTC().Truncate(time.Hour)
	invs, err := c.svc.Billing.Invoices(r.Context(), s.actor, tenant, billing.Period{Start: hour, End: hour.Add(time.Hour)})
	if err != nil {
		return nil, err
	}
	var spent money.Micros
	for _, inv := range invs {
		spent += inv.Total
	}
	return &meterReading{HourStart: hour, AsOf: now, Spent: spent, SpentText: money.FormatAmount(spent)}, nil
}

func (c *Console) meter(w http.ResponseWriter, r *http.Request, s *session) error {
	tenant := ""
	if s.admin() {
		tenant = r.URL.Query().Get("tenant")
	}
	m, err := c.meterOf(r, s, tenant)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, m)
	return nil
}

// --- groups ----------------------------------------------------------------

func (c *Console) groupsPage(w http.ResponseWriter, r *http.Request, s *session) error {
	gs, err := c.svc.Groups.List(r.Context(), s.actor, "")
	if err != nil {
		return err
	}
	c.render(w, r, http.StatusOK, "groups", s, map[string]any{"Title": "Autoscaling groups", "Groups": gs})
	return nil
}

func (c *Console) groupPage(w http.ResponseWriter, r *http.Request, s *session) error {
	d, err := c.svc.Groups.Describe(r.Context(), s.actor, r.PathValue("id"))
	if err != nil {
		return err
	}
	c.render(w, r, http.StatusOK, "group", s, map[string]any{"Title": "Group " + d.Group.Name, "Section": "groups", "D": d})
	return nil
}

// advise runs the selection advisor (package advise) on the workload the
// launch page's form describes, over this cloud's live market: the price
// book, the spot pools' prices and reclaim rates over a week, and the
// leading scheduler's availability, all read through the services as the
// session's actor.
func (c *Console) advise(r *http.Request, s *session, q url.Values) (*advise.Advice, error) {
	field := func(name, format string, args ...any) error {
		return &cloud.Error{Code: cloud.Invalid, Message: name + ": " + fmt.Sprintf(format, args...), Details: map[string]any{"field": name}}
	}
	var w advise.Workload
	var err error
	if w.Params, err = advise.ParseParams(q.Get("params")); err != nil {
		return nil, field("params", "%v", err)
	}
	if w.Precision, err = advise.ParsePrecision(q.Get("precision")); err != nil {
		return nil, field("precision", "%v", err)
	}
	if w.Task, err = advise.ParseTask(q.Get("task")); err != nil {
		return nil, field("task", "%v", err)
	}
	ints := map[string]*int{"nodes": &w.Nodes, "days": &w.Days}
	for name, dst := range ints {
		n, err := strconv.Atoi(q.Get(name))
		if err != nil {
			return nil, field(name, "want a whole number, got %q", q.Get(name))
		}
		*dst = n
	}
	hours, err := strconv.Atoi(q.Get("hours"))
	if err != nil || hours < 1 || hours > 24 {
		return nil, field("hours", "want whole hours per day from 1 to 24, got %q", q.Get("hours"))
	}
	w.PerDay = time.Duration(hours) * time.Hour
	ckpt, err := strconv.Atoi(q.Get("checkpoint"))
	if err != nil || ckpt < 0 {
		return nil, field("checkpoint", "want minutes between checkpoints (0: the job cannot be interrupted), got %q", q.Get("checkpoint"))
	}
	w.CheckpointInterval = time.Duration(ckpt) * time.Minute
	ctx := r.Context()
	now := c.now()
	prices, err := c.svc.Prices.List(ctx, s.actor, service.PriceQuery{At: now})
	if err != nil {
		return nil, err
	}
	pools, err := c.svc.Spot.Pools(ctx, s.actor, 7*24*time.Hour)
	if err != nil {
		return nil, err
	}
	live := advise.Live{Source: "this cloud, live", Prices: prices, Availability: c.svc.Availability()}
	for _, o := range c.cat.Offerings() {
		live.Offerings = append(live.Offerings, o.Name)
	}
	for _, p := range pools {
		live.Pools = append(live.Pools, advise.LivePool{Pool: p.Pool, Price: p.Price, ReclaimRateBP: p.ReclaimRateBP, SpotSeconds: p.SpotSeconds})
	}
	return advise.Advise(w, advise.LiveMarket(live), c.cat)
}

// netFacts is an instance's place on its private network, as its page
// shows it: names next to IDs, and its public address.
type netFacts struct {
	Network, Subnet *namedID
	SubnetCIDR      string
	Groups          []namedID
	Public          string
}

// namedID is a resource's ID with its name.
type namedID struct{ ID, Name string }

// instanceNetwork reads the network, subnet, groups and public address of
// an instance through the services, as the session's actor: nil for an
// instance on no network. A resource deleted since (or not visible) shows
// by its ID alone.
func (c *Console) instanceNetwork(r *http.Request, s *session, in *cloud.Instance) (*netFacts, error) {
	if in.NetworkID == "" {
		return nil, nil
	}
	ctx := r.Context()
	f := &netFacts{Network: &namedID{ID: in.NetworkID}, Subnet: &namedID{ID: in.SubnetID}}
	if n, err := c.svc.Networks.GetNetwork(ctx, s.actor, in.NetworkID); err == nil {
		f.Network.Name = n.Name
	} else if cloud.ErrorCode(err) != cloud.NotFound {
		return nil, err
	}
	if sn, err := c.svc.Networks.GetSubnet(ctx, s.actor, in.SubnetID); err == nil {
		f.Subnet.Name, f.SubnetCIDR = sn.Name, sn.CIDR
	} else if cloud.ErrorCode(err) != cloud.NotFound {
		return nil, err
	}
	for _, id := range in.SecurityGroupIDs {
		g := namedID{ID: id}
		if sg, err := c.svc.Networks.GetSecurityGroup(ctx, s.actor, id); err == nil {
			g.Name = sg.Name
		} else if cloud.ErrorCode(err) != cloud.NotFound {
			return nil, err
		}
		f.Groups = append(f.Groups, g)
	}
	addrs, err := c.svc.Addresses.List(ctx, s.actor, in.TenantID, false)
	if err != nil {
		return nil, err
	}
	for _, a := range addrs {
		if a.InstanceID == in.ID {
			f.Public = a.IP
		}
	}
	return f, nil
}
