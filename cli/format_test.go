package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/billing"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
)

// TestBareAmount checks the pattern the cost tests use to find an amount
// printed without its currency sign.
func TestBareAmount(t *testing.T) {
	for s, bare := range map[string]bool{
		"total 4320.00 here": true, "held: 6,480.00;": true, "3240.00": true,
		"$4,320.00": false, "$12.0000/h": false, "59.77%": false, "362.1 h": false, "-$0.13": false,
	} {
		if got := bareAmount.MatchString(s); got != bare {
			t.Errorf("bareAmount on %q: %v, want %v", s, got, bare)
		}
	}
}

// TestInvoiceRoundingNote: when line amounts shown to the cent do not add
// up to the total shown, the table says why.
// TestInvoiceLinesAddUp: an invoice's table shows each line's amount in
// cents, and the amounts shown add up to the total shown.
func TestInvoiceLinesAddUp(t *testing.T) {
	line := func(desc string, micros money.Micros) billing.Line {
		return billing.Line{Category: billing.CategoryCompute, Description: desc, Quantity: 1, Unit: billing.UnitSecond, UnitPrice: 1, Amount: micros}
	}
	for _, tc := range []struct {
		name  string
		lines []billing.Line
		want  []string // the AMOUNT column, lines then total
	}{
		{"exact cents", []billing.Line{line("a", 1_500_000), line("b", 10_000)}, []string{"$1.50", "$0.01", "$1.51"}},
		{"sub-cent lines adding up", []billing.Line{line("a", 4_000), line("b", 4_000)}, []string{"$0.01", "$0.00", "$0.01"}},
		// Each alone rounds to $0.14: $0.41 under a $0.40 total.
		{"halves over the total", []billing.Line{line("a", 135_000), line("b", 135_000), line("c", 130_000)},
			[]string{"$0.14", "$0.13", "$0.13", "$0.40"}},
		{"no lines", nil, []string{"$0.00"}},
	} {
		var total money.Micros
		for _, l := range tc.lines {
			total += l.Amount
		}
		var b strings.Builder
		inv := &billing.Invoice{TenantID: "t", Month: "2026-12", Currency: "USD", Lines: tc.lines, Total: total}
		if err := printInvoices(&b, []*billing.Invoice{inv}, true); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, row := range strings.Split(strings.TrimSpace(b.String()), "\n")[2:] {
			f := strings.Fields(row)
			got = append(got, f[len(f)-1])
		}
		if strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("%s: amounts %v, want %v:\n%s", tc.name, got, tc.want, b.String())
		}
	}
}

func TestShortDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		92 * time.Second: "1m32s", 2 * time.Minute: "2m", 45 * time.Second: "45s", time.Hour + 5*time.Minute: "1h5m",
		1500 * time.Millisecond: "2s", 0: "0s", time.Millisecond: "1s",
	} {
		if got := shortDuration(d); got != want {
			t.Errorf("shortDuration(%s) = %q, want %q", d, got, want)
		}
	}
}

// TestInstanceNotice: the notice an instance is under shows with its state.
func TestInstanceNotice(t *testing.T) {
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	reclaim := &cloud.Interruption{Action: cloud.ActionTerminate, Reason: cloud.ReclaimCapacity, NoticedAt: now.Add(-28 * time.Second), Deadline: now.Add(92 * time.Second)}
	scaleIn := &cloud.Interruption{Action: cloud.ActionTerminate, Reason: cloud.ReclaimScaleIn, NoticedAt: now, Deadline: now.Add(30 * time.Second)}
	due := &cloud.Interruption{Action: cloud.ActionStop, Reason: cloud.ReclaimPrice, NoticedAt: now.Add(-3 * time.Minute), Deadline: now.Add(-time.Minute)}
	rebalance := &cloud.Interruption{Reason: cloud.ReclaimRebalance, NoticedAt: now}
	for _, tc := range []struct {
		state cloud.State
		it    *cloud.Interruption
		want  string
	}{
		{cloud.Running, nil, "running"},
		{cloud.Running, reclaim, "running (reclaim in 1m32s)"},
		{cloud.Running, scaleIn, "running (scale-in in 30s)"},
		{cloud.Running, due, "running (reclaim due)"},
		{cloud.Running, rebalance, "running (rebalance recommended)"},
		{cloud.Starting, reclaim, "starting (reclaim in 1m32s)"},
		// Once the workload is being stopped, or is gone, the state says it.
		{cloud.Stopping, due, "stopping"},
		{cloud.Terminating, reclaim, "terminating"},
		{cloud.Terminated, reclaim, "terminated"},
		{cloud.Stopped, due, "stopped"},
	} {
		in := &cloud.Instance{ID: "i-1", State: tc.state, Interruption: tc.it}
		if got := stateText(in, now); got != tc.want {
			t.Errorf("%s with %+v: %q, want %q", tc.state, tc.it, got, tc.want)
		}
	}
}

func TestNoOutputNote(t *testing.T) {
	for _, tc := range []struct {
		in     cloud.Instance
		follow bool
		want   string
	}{
		{cloud.Instance{ID: "i-1", State: cloud.Pending, Reason: "0/8 hosts available: 8 wrong GPU model"}, false,
			"i-1 has not started yet (pending: 0/8 hosts available: 8 wrong GPU model), so it has no output"},
		{cloud.Instance{ID: "i-1", State: cloud.Scheduled}, true, "i-1 has not started yet (scheduled); waiting for its output"},
		{cloud.Instance{ID: "i-1", State: cloud.Starting}, false, "i-1 has not started yet (starting), so it has no output"},
		{cloud.Instance{ID: "i-1", State: cloud.Failed, Reason: `program "./train" is not an executable file`}, false,
			`i-1 wrote no output; it is failed: program "./train" is not an executable file`},
		{cloud.Instance{ID: "i-1", State: cloud.Running}, false, ""},
		{cloud.Instance{ID: "i-1", State: cloud.Stopped}, false, ""},
	} {
		if got := noOutputNote(&tc.in, tc.follow); got != tc.want {
			t.Errorf("%s (follow %v): %q, want %q", tc.in.State, tc.follow, got, tc.want)
		}
	}
}

func TestWarnRelativeCommand(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	if err := os.WriteFile("train", []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		command []string
		want    []string // in the note; none: no note
	}{
		{nil, nil},
		{[]string{"python", "train.py"}, nil}, // a PATH lookup
		{[]string{"/usr/bin/env", "true"}, nil},
		{[]string{"./train", "--steps", "3"}, []string{"note: ./train is relative to the instance's working directory", "give " + filepath.Join(dir, "train")}},
		{[]string{"bin/missing"}, []string{"note: bin/missing is relative to the instance's working directory"}},
	} {
		var b bytes.Buffer
		warnRelativeCommand(&b, tc.command)
		got := b.String()
		if len(tc.want) == 0 && got != "" {
			t.Errorf("%q: unexpected note %q", tc.command, got)
		}
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("%q: note %q lacks %q", tc.command, got, w)
			}
		}
		if strings.Count(got, "\n") > 1 {
			t.Errorf("%q: note is not one line: %q", tc.command, got)
		}
	}
}

func TestAvailabilityText(t *testing.T) {
	for _, tc := range []struct {
		a    *api.OfferingAvailability
		want string
	}{
		{nil, "?"},
		{&api.OfferingAvailability{}, "no host"},
		{&api.OfferingAvailability{Hosts: 0, Reasons: map[string]int{"wrong GPU model": 8}}, "no host"},
		{&api.OfferingAvailability{Hosts: 2, FitsNow: 2}, "yes (2 hosts free)"},
		{&api.OfferingAvailability{Hosts: 4, FitsNow: 1}, "yes (1 host free)"},
		{&api.OfferingAvailability{Hosts: 2, FitsNow: 0, Reasons: map[string]int{"not enough free GPUs": 2}}, "full (2 hosts could run it)"},
		{&api.OfferingAvailability{Hosts: 1}, "full (1 host could run it)"},
	} {
		if got := availabilityText(tc.a); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.a, got, tc.want)
		}
	}
}

// TestOfferingRows joins offerings with prices, spot pools and
// availability, and renders them.
func TestOfferingRows(t *testing.T) {
	cat := catalog.Default()
	var offs []*catalog.Offering
	for _, n := range []string{"h100.1x", "l4.1x", "h200.mig.1g.18gb", "a10.1x"} {
		o, err := cat.Offering(n)
		if err != nil {
			t.Fatal(err)
		}
		offs = append(offs, o)
	}
	m := money.MustParse
	prices := []*cloud.Price{
		{Kind: cloud.PriceCompute, Offering: "h100.1x", Amount: m("2.49")},
		{Kind: cloud.PriceCompute, Offering: "l4.1x", Amount: m("1.00")},
		{Kind: cloud.PriceCompute, Offering: "l4.1x", Zone: "zone-b", Amount: m("0.90")},
		{Kind: cloud.PriceCompute, Offering: "h200.mig.1g.18gb", Zone: "zone-a", Amount: m("0.70")},
		{Kind: cloud.PriceVolume, Amount: m("0.10")},
	}
	pools := []api.SpotPool{
		{Pool: cloud.Pool{Offering: "h100.1x", Zone: "a"}, Price: m("0.85")},
		{Pool: cloud.Pool{Offering: "h100.1x", Zone: "b"}, Price: m("0.60")},
		{Pool: cloud.Pool{Offering: "l4.1x", Zone: "a"}, Price: m("0.30")},
	}
	avail := map[string]api.OfferingAvailability{
		"h100.1x":          {Hosts: 2, FitsNow: 2},
		"l4.1x":            {Hosts: 4, FitsNow: 0},
		"h200.mig.1g.18gb": {Hosts: 0, Reasons: map[string]int{"wrong GPU model": 8}},
	}
	table := offeringsTable(offeringRows(offs, prices, pools, avail), true, true)
	want := map[string][3]string{
		"h100.1x":          {"$2.4900/h", "from $0.6000/h", "yes (2 hosts free)"},
		"l4.1x":            {"from $0.9000/h", "$0.3000/h", "full (4 hosts could run it)"},
		"h200.mig.1g.18gb": {"$0.7000/h", "-", "no host"},
		"a10.1x":           {"-", "-", "?"},
	}
	if h := table[0]; strings.Join(h[7:], ",") != "ON-DEMAND,SPOT,AVAILABLE" {
		t.Errorf("header %q", h)
	}
	for _, row := range table[1:] {
		w, ok := want[row[0]]
		if !ok {
			t.Errorf("unexpected row %q", row)
			continue
		}
		if got := [3]string{row[7], row[8], row[9]}; got != w {
			t.Errorf("%s: %q, want %q", row[0], got, w)
		}
	}
	// Prices or pools that could not be read are unknown, not absent.
	table = offeringsTable(offeringRows(offs[:1], nil, nil, nil), false, false)
	if got := table[1][7:]; strings.Join(got, ",") != "?,?,?" {
		t.Errorf("unknown prices: %q", got)
	}
}
