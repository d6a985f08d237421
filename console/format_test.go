package console

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/billing"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
	"github.com/gpucloud/gpucloud/service"
)

// TestInterruptionNote: a pending interruption of a live instance is a
// warning with the time left; an ended instance says what happened, in
// the neutral style, never "terminate in now".
func TestInterruptionNote(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	notice := func(d time.Duration) *cloud.Interruption {
		return &cloud.Interruption{Action: cloud.ActionTerminate, Reason: "scale-in", Deadline: now.Add(d)}
	}
	for _, tc := range []struct {
		name  string
		state cloud.State
		in    *cloud.Interruption
		text  string
		class string
	}{
		{"none", cloud.Running, nil, "", ""},
		{"pending", cloud.Running, notice(90 * time.Second), "terminate in 1m30s (scale-in)", "notice"},
		{"due", cloud.Running, notice(-time.Second), "terminate now (scale-in)", "notice"},
		{"terminating", cloud.Terminating, notice(-time.Second), "terminating (scale-in)", "reason"},
		{"terminated", cloud.Terminated, notice(-time.Minute), "terminated (scale-in)", "reason"},
		{"terminated early", cloud.Terminated, notice(time.Minute), "terminated (scale-in)", "reason"},
		{"stopped by a reclaim", cloud.Stopped, &cloud.Interruption{Action: cloud.ActionStop, Reason: "capacity", Deadline: now}, "stopped (capacity)", "reason"},
	} {
		got := interruption(now, &cloud.Instance{State: tc.state, Interruption: tc.in})
		var text, class string
		if got != nil {
			text, class = got.Text, got.Class
		}
		if text != tc.text || class != tc.class {
			t.Errorf("%s: %q (%s), want %q (%s)", tc.name, text, class, tc.text, tc.class)
		}
	}
}

// TestMemory: one unit everywhere, GiB or TiB, never MiB.
func TestMemory(t *testing.T) {
	for mib, want := range map[int64]string{
		0: "0 GiB", 512: "0.5 GiB", 10 * 1024: "10 GiB", 80 * 1024: "80 GiB", 1536: "1.5 GiB", 1000: "0.98 GiB",
		1310720: "1.25 TiB", 1024 * 1024: "1 TiB", 2048 * 1024: "2 TiB",
	} {
		if got := memory(mib); got != want {
			t.Errorf("memory(%d) = %q, want %q", mib, got, want)
		}
	}
	if got := gib(15360); got != "15 TiB" {
		t.Errorf("gib(15360) = %q", got)
	}
}

// TestReclaims: reclaims are counts over the window and the spot usage
// they happened in, "—" without usage, never a rate.
func TestReclaims(t *testing.T) {
	day := 24 * time.Hour
	for _, tc := range []struct {
		p    service.PoolStats
		want string
	}{
		{service.PoolStats{Window: day}, "—"},
		{service.PoolStats{Window: day, Reclaims: 1, SpotSeconds: 205}, "1 reclaim in 24 h over 4 instance-minutes"},
		{service.PoolStats{Window: day, Reclaims: 1, SpotSeconds: 60}, "1 reclaim in 24 h over 1 instance-minute"},
		{service.PoolStats{Window: day, SpotSeconds: 3 * 3600}, "no reclaims in 24 h over 3.0 instance-hours"},
		{service.PoolStats{Window: 7 * day, Reclaims: 12, SpotSeconds: 5400}, "12 reclaims in 7 d over 1.5 instance-hours"},
		{service.PoolStats{Window: 5 * time.Minute, Reclaims: 2, SpotSeconds: 10800}, "2 reclaims in 5 min over 3.0 instance-hours"},
	} {
		if got := reclaims(tc.p); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.p, got, tc.want)
		}
		if strings.Contains(reclaims(tc.p), "%") {
			t.Errorf("a rate: %q", reclaims(tc.p))
		}
	}
}

// TestReasonsText: why hosts cannot take an offering reads as a count of
// hosts and a reason, for every reason the placement engine gives
// ("4 fewer than 2 free GPUs" read as four of something).
func TestReasonsText(t *testing.T) {
	for _, tc := range []struct {
		in   map[string]int
		want string
	}{
		{map[string]int{"fewer than 2 free GPUs": 4}, "4 hosts: fewer than 2 free GPUs"},
		{map[string]int{"no free GPU": 1}, "1 host: no free GPU"},
		{map[string]int{"wrong GPU model": 3, "host cordoned or unhealthy": 1, "insufficient memory": 3},
			"3 hosts: insufficient memory; 3 hosts: wrong GPU model; 1 host: host cordoned or unhealthy"},
		{map[string]int{}, ""},
	} {
		if got := reasonsText(tc.in); got != tc.want {
			t.Errorf("%v: %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestChartSpan: a young instance's charts start when it was created (a
// minute at least); an older one's span the last hour.
func TestChartSpan(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		age  time.Duration
		span time.Duration
		text string
	}{
		{5 * time.Minute, 5 * time.Minute, "last 5 min"},
		{10 * time.Second, time.Minute, "last 1 min"},
		{3 * time.Hour, time.Hour, "last hour"},
	} {
		from, to := chartSpan(&cloud.Instance{CreatedAt: now.Add(-tc.age)}, now)
		if to != now || to.Sub(from) != tc.span || spanText(to.Sub(from)) != tc.text {
			t.Errorf("age %s: %s–%s (%q), want a span of %s", tc.age, from, to, spanText(to.Sub(from)), tc.span)
		}
	}
	// The first sample of a 5-minute-old instance is drawn at the left
	// edge of the plot, not in the last twelfth of it.
	from, to := chartSpan(&cloud.Instance{CreatedAt: now.Add(-5 * time.Minute)}, now)
	c := lineChart("GPU memory used", "GiB", []point{{from, 6 << 30}, {now, 6 << 30}}, from, to)
	if !strings.Contains(string(c.SVG), `d="M64.0 `) || !strings.Contains(c.Summary, "in the last 5 min") {
		t.Errorf("a young instance's chart: %s\n%s", c.Summary, c.SVG)
	}
}

// TestInvoiceView: an invoice's spot windows are one row per pool, with
// the windows behind a drill-down; unit prices say their unit,
// quantities are in hours past a minute and in GiB-months for volumes;
// the rows and the windows add up to what is shown above them.
func TestInvoiceView(t *testing.T) {
	var lines []billing.Line
	var total money.Micros
	add := func(l billing.Line) {
		lines = append(lines, l)
		total += l.Amount
	}
	add(billing.Line{Category: billing.CategoryCompute, Model: billing.ModelOnDemand, Offering: "h100.1x", Description: "on-demand h100.1x",
		Quantity: 9, Unit: billing.UnitSecond, UnitPrice: money.MustParse("2.49"), Amount: money.MustParse("0.006225")})
	for i := range 30 {
		p := money.MustParse("1.0761") + money.Micros(i*1000)
		add(billing.Line{Category: billing.CategoryCompute, Model: billing.ModelSpot, Offering: "a100.2x", Zone: "local-a",
			Description: "spot a100.2x/local-a", Quantity: 10, Unit: billing.UnitSecond, UnitPrice: p, Amount: p * 10 / 3600})
	}
	add(billing.Line{Category: billing.CategoryVolume, Description: "volume v-1", Quantity: 50 * 730 * 3600, Unit: billing.UnitGiBSecond,
		UnitPrice: money.MustParse("0.10"), Amount: money.MustParse("5")})
	inv := &billing.Invoice{TenantID: "tn-acme", Month: "2026-05", Currency: "USD", Lines: lines, Total: total}
	var buf bytes.Buffer
	p := page{Names: map[string]string{"tn-acme": "acme"}, Data: map[string]any{"Title": "Billing", "Invoices": []invoiceView{viewInvoice(inv)}, "Month": "2026-05"}}
	if err := parseTemplates()["billing"].Execute(&buf, p); err != nil {
		t.Fatal(err)
	}
	html := buf.String()
	if n := strings.Count(html, `<tr class="line">`); n != 3 {
		t.Errorf("%d rows, want 3 (on-demand, one spot pool, the volume)", n)
	}
	for _, want := range []string{
		`Invoice <span class="tenant" title="tn-acme">acme</span> · 2026-05`,
		`<td class="num nowrap">9 s</td><td class="num nowrap">$2.4900/h</td>`,
		`<details><summary>30 price windows</summary>`,
		`<td class="num nowrap">0.0833 h</td><td class="num nowrap">30 prices, avg $1.090`,
		`<td class="num nowrap">10 s</td><td class="num nowrap">$1.0761/h</td>`,
		`<td class="num nowrap">50.00 GiB-month</td><td class="num nowrap">$0.1000/GiB-month</td>`,
	} {
		if !strings.Contains(html, want) {
			t.Errorf("the invoice lacks %s", want)
		}
	}
	if strings.Contains(html, "tn-acme ·") {
		t.Errorf("the invoice's title shows the tenant's ID")
	}
	// The rows add to the total shown; a pool's windows to its row.
	cents := func(s string) int64 {
		m, err := money.Parse(strings.NewReplacer("$", "", ",", "").Replace(s))
		if err != nil {
			t.Fatal(s, err)
		}
		return int64(m)
	}
	amount := regexp.MustCompile(`<td class="num nowrap">(\$[0-9.,]+)</td></tr>`)
	rows := html[:strings.Index(html, `<tr class="windows">`)] + html[strings.Index(html, `</details>`):]
	var sum int64
	for _, m := range amount.FindAllStringSubmatch(rows, -1) {
		sum += cents(m[1])
	}
	v := viewInvoice(inv)
	if sum != int64(money.RoundToCents([]money.Micros{total}, total)[0]) {
		t.Errorf("rows add to %d, total %d", sum, total)
	}
	var windows int64
	for _, w := range v.Groups[1].Windows {
		windows += int64(w.Cents)
	}
	if len(v.Groups[1].Windows) != 30 || windows != int64(v.Groups[1].Cents) {
		t.Errorf("%d windows adding to %d, the row %d", len(v.Groups[1].Windows), windows, v.Groups[1].Cents)
	}
}
