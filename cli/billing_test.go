package cli

import (
	"context"
	"encoding/csv"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/billing"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
	"github.com/gpucloud/gpucloud/testkit"
)

// usage runs the CLI and fails unless it exits with a usage error whose
// line mentions want.
func (e *cloudEnv) usage(token, want string, args ...string) {
	e.t.Helper()
	code, _, errOut := e.as(token, args...)
	if code != ExitUsage || !strings.Contains(errOut, want) {
		e.t.Errorf("%v: exit %d, stderr %q; want a usage error about %q", args, code, errOut, want)
	}
}

func TestPricesSetAndList(t *testing.T) {
	e := newCloudEnv(t)
	clk := e.clock
	_, tok := e.member("acme", "alice")

	var p cloud.Price
	decodeJSON(t, e.ok(e.admin, "prices", "set", "--offering", "l4.1x", "--amount", "1.50", "-o", "json"), &p)
	if p.Kind != cloud.PriceCompute || p.Offering != "l4.1x" || p.Amount != money.MustParse("1.5") || !p.EffectiveAt.Equal(clk.Now()) {
		t.Errorf("prices set = %+v", p)
	}
	later := clk.Now().Add(24 * time.Hour).Format(time.RFC3339)
	e.ok(e.admin, "prices", "set", "--offering", "l4.1x", "--zone", "zone-b", "--amount", "2", "--effective-at", later)
	out := e.ok(e.admin, "prices", "set", "--kind", "volume", "--amount", "0.10")
	if !strings.Contains(out, "volume") || !strings.Contains(out, "$0.1000/GiB-month") {
		t.Errorf("volume price table:\n%s", out)
	}

	// Members list them: a table, filters, JSON with decimal strings.
	out = e.ok(tok, "prices", "list", "--offering", "l4.1x")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "KIND") || !strings.Contains(lines[1], "$1.5000/h") ||
		!strings.Contains(lines[1], "(all)") || !strings.Contains(lines[2], "zone-b") {
		t.Errorf("prices list:\n%s", out)
	}
	if out := e.ok(tok, "prices", "list", "--offering", "l4.1x", "--at", "1h"); strings.TrimSpace(out) != "no prices" {
		t.Errorf("prices in force an hour ago:\n%s", out)
	}
	if out := e.ok(tok, "prices", "list", "--kind", "volume", "-o", "json"); !strings.Contains(out, `"amount": "0.10"`) {
		t.Errorf("prices list -o json:\n%s", out)
	}

	code, _, errOut := e.as(tok, "prices", "set", "--offering", "l4.1x", "--amount", "1")
	oneLine(t, code, errOut, "admins only", "permission_denied")
	code, _, errOut = e.as(e.admin, "prices", "set", "--offering", "nope.1x", "--amount", "1")
	oneLine(t, code, errOut, "offering", "invalid_argument")
	e.usage(e.admin, "--offering is required", "prices", "set", "--amount", "1")
	e.usage(e.admin, "--amount is required", "prices", "set", "--offering", "l4.1x")
	e.usage(e.admin, "amount", "prices", "set", "--offering", "l4.1x", "--amount", "cheap")
	e.usage(e.admin, "--kind", "prices", "set", "--kind", "gpu", "--amount", "1")
	e.usage(e.admin, "--effective-at", "prices", "set", "--offering", "l4.1x", "--amount", "1", "--effective-at", "tomorrow")
	e.usage(tok, "--at", "prices", "list", "--at", "soon")
}

func TestSpotRequestsCreate(t *testing.T) {
	e := newCloudEnv(t)
	_, tok := e.member("acme", "alice")

	var r cloud.SpotRequest
	decodeJSON(t, e.ok(tok, "spot", "requests", "create", "--offering", "l4.1x", "--zone", "zone-a",
		"--backup", "l40s.1x/zone-b", "--persistent", "--max-price", "0.80", "--interruption", "stop",
		"--name", "train", "--env", "A=1", "-o", "json", "--", "python", "train.py"), &r)
	if !strings.HasPrefix(r.ID, "sr-") || r.Type != cloud.SpotPersistent || r.MaxPrice != money.MustParse("0.8") ||
		r.Interruption != cloud.ActionStop || len(r.Pools) != 2 || r.Pools[1] != (cloud.Pool{Offering: "l40s.1x", Zone: "zone-b"}) ||
		strings.Join(r.Command, " ") != "python train.py" || r.InstanceID == "" || r.Env["A"] != "1" {
		t.Fatalf("spot request = %+v", r)
	}
	out := e.ok(tok, "spot", "requests", "list")
	if !strings.Contains(out, r.ID) || !strings.Contains(out, "persistent") || !strings.Contains(out, "l4.1x/zone-a, l40s.1x/zone-b") {
		t.Errorf("spot requests list:\n%s", out)
	}
	out = e.ok(tok, "spot", "requests", "describe", r.ID)
	if !strings.Contains(out, "$0.8000/h") || !strings.Contains(out, r.InstanceID) || !strings.Contains(out, "stop") {
		t.Errorf("describe:\n%s", out)
	}
	// Defaults: one-time, terminate, capped at on demand.
	out = e.ok(tok, "spot", "requests", "create", "--offering", "l4.1x", "--zone", "zone-c")
	if !strings.Contains(out, "one_time") || !strings.Contains(out, "on-demand") {
		t.Errorf("default request:\n%s", out)
	}

	var c cloud.SpotRequest
	decodeJSON(t, e.ok(tok, "spot", "requests", "cancel", r.ID, "--terminate-instance", "-o", "json"), &c)
	if c.State != cloud.SpotCancelled {
		t.Errorf("cancelled = %+v", c)
	}
	var in cloud.Instance
	decodeJSON(t, e.ok(tok, "instances", "describe", r.InstanceID, "-o", "json"), &in)
	if in.State != cloud.Terminated || in.Market != cloud.MarketSpot {
		t.Errorf("instance after cancel --terminate-instance: %s %s", in.State, in.Market)
	}
	if out := e.ok(tok, "spot", "requests", "list", "--state", "open"); strings.Contains(out, r.ID) {
		t.Errorf("open requests list the cancelled one:\n%s", out)
	}

	e.usage(tok, "--offering is required", "spot", "requests", "create", "--zone", "a")
	e.usage(tok, "--interruption", "spot", "requests", "create", "--offering", "l4.1x", "--interruption", "hibernate")
	e.usage(tok, "--backup", "spot", "requests", "create", "--offering", "l4.1x", "--backup", "/zone-a")
	e.usage(tok, "--max-price", "spot", "requests", "create", "--offering", "l4.1x", "--max-price", "lots")
	e.usage(tok, "after \"--\"", "spot", "requests", "create", "--offering", "l4.1x", "python")
	e.usage(tok, "--state", "spot", "requests", "list", "--state", "sleeping")
	code, _, errOut := e.as(tok, "spot", "requests", "create", "--offering", "l4.1x", "--zone", "zone-a", "--max-price", "0")
	oneLine(t, code, errOut, "max_price", "invalid_argument")
}

func TestSpotPricesAndPools(t *testing.T) {
	e := newCloudEnv(t)
	clk := e.clock
	_, tok := e.member("acme", "alice")
	e.ok(e.admin, "prices", "set", "--offering", "l4.1x", "--amount", "1.00")
	now := clk.Now()
	pool := cloud.Pool{Offering: "l4.1x", Zone: "zone-a"}
	err := e.st.Tx(context.Background(), func(tx cloud.Tx) error {
		return tx.AppendSpotPrices(context.Background(), []cloud.SpotPrice{
			{Pool: pool, Time: now.Add(-3 * time.Hour), Price: money.MustParse("0.30")},
			{Pool: pool, Time: now.Add(-time.Hour), Price: money.MustParse("0.40")},
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	out := e.ok(tok, "spot", "prices", "--pool", "l4.1x/zone-a", "--since", "2h")
	if !strings.Contains(out, "$0.4000/h") || strings.Contains(out, "0.3000/h") {
		t.Errorf("spot prices --since 2h:\n%s", out)
	}
	out = e.ok(tok, "spot", "pools")
	if !strings.Contains(out, "l4.1x/zone-a") || !strings.Contains(out, "$0.4000/h") || !strings.Contains(out, "$1.0000/h") || !strings.Contains(out, "60%") {
		t.Errorf("spot pools:\n%s", out)
	}
	e.usage(tok, "--pool", "spot", "prices", "--pool", "l4.1x")
	e.usage(tok, "--since", "spot", "prices", "--since", "last week")
}

func TestInvoicesShow(t *testing.T) {
	e := newCloudEnv(t)
	clk := e.clock
	tenant, tok := e.member("acme", "alice")
	e.ok(e.admin, "prices", "set", "--offering", "l4.1x", "--amount", "1.00")
	var in cloud.Instance
	decodeJSON(t, e.ok(tok, "instances", "create", "--offering", "l4.1x", "-o", "json"), &in)
	e.move(in.ID, cloud.Running, testkit.Via{Zone: "zone-a"})
	clk.Advance(90 * time.Minute)

	// The table: the line in hours, its unit price and amount, the total.
	out := e.ok(tok, "invoices", "show")
	for _, want := range []string{"Invoice 2026-12, tenant " + tenant, "running total", "DESCRIPTION", "1.50 h", "$1.0000/h", "TOTAL", "$1.50"} {
		if !strings.Contains(out, want) {
			t.Errorf("invoices show lacks %q:\n%s", want, out)
		}
	}
	// JSON keeps the exact seconds.
	var invs []*billing.Invoice
	decodeJSON(t, e.ok(tok, "invoices", "show", "--month", "2026-12", "-o", "json"), &invs)
	if len(invs) != 1 || len(invs[0].Lines) != 1 || invs[0].Lines[0].Quantity != 5400 || invs[0].Total != money.MustParse("1.5") {
		t.Fatalf("invoices -o json = %+v", invs)
	}
	// CSV is the server's export.
	rows, err := csv.NewReader(strings.NewReader(e.ok(tok, "invoices", "show", "-o", "csv"))).ReadAll()
	if err != nil || len(rows) != 3 || rows[1][2] != "compute" || rows[1][8] != "5400" || rows[2][2] != "total" || rows[2][11] != "1.50" {
		t.Errorf("invoices -o csv = %v, %v", rows, err)
	}
	// Admins see every tenant with charges; another month is empty.
	if out := e.ok(e.admin, "invoices", "show", "--tenant", "acme"); !strings.Contains(out, "$1.50") {
		t.Errorf("admin, acme:\n%s", out)
	}
	if out := e.ok(tok, "invoices", "show", "--month", "2026-11"); !strings.Contains(out, "(final)") || !strings.Contains(out, "$0.00") {
		t.Errorf("November:\n%s", out)
	}

	e.usage(tok, "--month", "invoices", "show", "--month", "2026-13")
	e.usage(tok, "--output", "invoices", "show", "-o", "xml")
}

func TestBudgetCommitmentsAndAddresses(t *testing.T) {
	e := newCloudEnv(t)
	clk := e.clock
	_, tok := e.member("acme", "alice")
	e.ok(e.admin, "prices", "set", "--offering", "l4.1x", "--amount", "1.00")

	// Budget.
	if out := e.ok(tok, "budget", "show"); !strings.Contains(out, "none") {
		t.Errorf("budget show without one:\n%s", out)
	}
	out := e.ok(tok, "budget", "set", "--amount", "1000", "--threshold", "50", "--threshold", "90")
	if !strings.Contains(out, "$1,000.00 per month") || !strings.Contains(out, "50%, 90%") || !strings.Contains(out, "0% of the budget") {
		t.Errorf("budget set:\n%s", out)
	}
	e.usage(tok, "--amount is required", "budget", "set")
	code, _, errOut := e.as(tok, "budget", "set", "--amount", "10", "--threshold", "0")
	oneLine(t, code, errOut, "thresholds", "invalid_argument")

	// Commitments.
	var c cloud.Commitment
	decodeJSON(t, e.ok(tok, "commitments", "create", "--offering", "l4.1x", "--term", "1y", "--payment", "all_upfront", "-o", "json"), &c)
	if c.Plan != cloud.PlanReservation || c.UpfrontFee == 0 || c.DiscountBP != 3500 || !c.Start.Equal(clk.Now()) {
		t.Errorf("commitment = %+v", c)
	}
	if out := e.ok(tok, "commitments", "list"); !strings.Contains(out, c.ID) || !strings.Contains(out, "35%") {
		t.Errorf("commitments list:\n%s", out)
	}
	if out := e.ok(tok, "commitments", "describe", c.ID); !strings.Contains(out, "all_upfront") || !strings.Contains(out, "Upfront fee:  "+formatAmount(c.UpfrontFee)) {
		t.Errorf("commitments describe:\n%s", out)
	}
	code, _, errOut = e.as(tok, "commitments", "create", "--offering", "l4.1x", "--term", "1y", "--discount-pct", "50")
	oneLine(t, code, errOut, "discount_pct", "permission_denied")
	e.usage(tok, "--term is required", "commitments", "create", "--offering", "l4.1x")
	e.usage(tok, "--plan", "commitments", "create", "--offering", "l4.1x", "--term", "1y", "--plan", "lease")

	// Addresses.
	var a cloud.Address
	decodeJSON(t, e.ok(tok, "addresses", "allocate", "--zone", "zone-a", "-o", "json"), &a)
	if a.IP != "203.0.113.1" || a.Zone != "zone-a" {
		t.Errorf("allocated %+v", a)
	}
	var in cloud.Instance
	decodeJSON(t, e.ok(tok, "instances", "create", "--offering", "l4.1x", "-o", "json"), &in)
	if out := e.ok(tok, "addresses", "associate", a.ID, "--instance", in.ID); !strings.Contains(out, in.ID) {
		t.Errorf("associate:\n%s", out)
	}
	if out := e.ok(tok, "addresses", "list"); !strings.Contains(out, "203.0.113.1") || !strings.Contains(out, in.ID) {
		t.Errorf("addresses list:\n%s", out)
	}
	if out := e.ok(tok, "addresses", "disassociate", a.ID); strings.Contains(out, in.ID) {
		t.Errorf("disassociate:\n%s", out)
	}
	e.ok(tok, "addresses", "release", a.ID)
	if out := e.ok(tok, "addresses", "list"); strings.TrimSpace(out) != "no addresses" {
		t.Errorf("after release:\n%s", out)
	}
	if out := e.ok(tok, "addresses", "list", "--released"); !strings.Contains(out, a.ID) {
		t.Errorf("list --released:\n%s", out)
	}
	e.usage(tok, "--instance is required", "addresses", "associate", a.ID)
}

func TestInvoiceTableGroupsSpotPrices(t *testing.T) {
	spot := func(price string, secs int64) billing.Line {
		p := money.MustParse(price)
		return billing.Line{Category: billing.CategoryCompute, Model: billing.ModelSpot, Offering: "h100.1x", Zone: "a",
			Description: "spot h100.1x/a", Quantity: secs, Unit: billing.UnitSecond, UnitPrice: p, Amount: money.PerHour(p, secs)}
	}
	lines := []billing.Line{spot("1.00", 1800), spot("2.00", 1800),
		{Category: billing.CategoryVolume, Description: "volumes", Quantity: 3600, Unit: billing.UnitGiBSecond, UnitPrice: 80_000, Amount: 110}}
	inv := &billing.Invoice{TenantID: "t", Month: "2026-12", Currency: "USD", Lines: lines, Total: 1_500_000 + 110}
	var b strings.Builder
	if err := printInvoices(&b, []*billing.Invoice{inv}, false); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	// The volume line's quantity is in the unit of its price: 3600
	// GiB-seconds are 0.0014 GiB-months at $0.0800/GiB-month.
	for _, want := range []string{"1.00 h", "2 prices, avg $1.5000/h", "$1.50", "volumes", "0.0014 GiB-month", "$0.0800/GiB-month", "TOTAL"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	if err := printInvoices(&b, []*billing.Invoice{inv}, true); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "prices, avg") || strings.Count(b.String(), "spot h100.1x/a") != 2 {
		t.Errorf("--detail table:\n%s", b.String())
	}
}

// TestCreatesIdempotencyKey retries volumes create, addresses allocate and
// prices set with one --idempotency-key: each prints the first resource
// again; without the flag, each call sends a key of its own.
func TestCreatesIdempotencyKey(t *testing.T) {
	e := newCloudEnv(t)
	_, tok := e.member("acme", "alice")

	var v1, v2, v3 cloud.Volume
	decodeJSON(t, e.ok(tok, "volumes", "create", "--name", "data", "--size-gib", "10", "--idempotency-key", "k", "-o", "json"), &v1)
	decodeJSON(t, e.ok(tok, "volumes", "create", "--name", "data", "--size-gib", "10", "--idempotency-key", "k", "-o", "json"), &v2)
	decodeJSON(t, e.ok(tok, "volumes", "create", "--name", "data", "--size-gib", "10", "-o", "json"), &v3)
	if v1.ID == "" || v2.ID != v1.ID || v3.ID == v1.ID {
		t.Errorf("volumes: %s, retry %s, without a key %s", v1.ID, v2.ID, v3.ID)
	}
	if out := e.ok(tok, "volumes", "create", "--name", "data", "--size-gib", "10", "--idempotency-key", "k"); !strings.Contains(out, v1.ID) {
		t.Errorf("table retry does not print %s:\n%s", v1.ID, out)
	}
	code, _, errOut := e.as(tok, "volumes", "create", "--name", "data", "--size-gib", "20", "--idempotency-key", "k")
	oneLine(t, code, errOut, "size_gib", v1.ID)
	var vs []cloud.Volume
	decodeJSON(t, e.ok(tok, "volumes", "list", "-o", "json"), &vs)
	if len(vs) != 2 {
		t.Errorf("%d volumes after the retries, want 2", len(vs))
	}

	var a1, a2, a3 cloud.Address
	decodeJSON(t, e.ok(tok, "addresses", "allocate", "--idempotency-key", "k", "-o", "json"), &a1)
	decodeJSON(t, e.ok(tok, "addresses", "allocate", "--idempotency-key", "k", "-o", "json"), &a2)
	decodeJSON(t, e.ok(tok, "addresses", "allocate", "-o", "json"), &a3)
	if a1.ID == "" || a2.ID != a1.ID || a2.IP != a1.IP || a3.ID == a1.ID {
		t.Errorf("addresses: %s, retry %s, without a key %s", a1.ID, a2.ID, a3.ID)
	}

	var p1, p2, p3 cloud.Price
	decodeJSON(t, e.ok(e.admin, "prices", "set", "--offering", "l4.1x", "--amount", "1.50", "--idempotency-key", "k", "-o", "json"), &p1)
	decodeJSON(t, e.ok(e.admin, "prices", "set", "--offering", "l4.1x", "--amount", "1.50", "--idempotency-key", "k", "-o", "json"), &p2)
	decodeJSON(t, e.ok(e.admin, "prices", "set", "--offering", "l4.1x", "--amount", "1.50", "-o", "json"), &p3)
	if p1.ID == 0 || p2.ID != p1.ID || p3.ID == p1.ID {
		t.Errorf("prices: %d, retry %d, without a key %d", p1.ID, p2.ID, p3.ID)
	}
}
