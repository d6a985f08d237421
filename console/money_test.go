package console

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/billing"
	"github.com/gpucloud/gpucloud/money"
)

// TestBillingPageMoney renders an invoice on the billing page: amounts in
// dollars and cents, unit prices with their unit to a hundredth of a cent,
// and line amounts that add up to the total shown.
func TestBillingPageMoney(t *testing.T) {
	line := func(desc, unit, price, amount string) billing.Line {
		return billing.Line{Category: billing.CategoryCompute, Description: desc, Quantity: 1, Unit: unit,
			UnitPrice: money.MustParse(price), Amount: money.MustParse(amount)}
	}
	for _, tc := range []struct {
		name  string
		lines []billing.Line
		want  []string // in order on the page
	}{
		{"lines over the total", []billing.Line{
			line("a", billing.UnitSecond, "7.152378", "0.135"),
			line("b", billing.UnitGiBSecond, "0.08", "0.135"),
			line("c", billing.UnitEach, "0.13", "0.13"),
		}, []string{"$7.1524/h", "$0.14", "$0.0800/GiB-month", "$0.13", "$0.1300 each", "$0.13", "$0.40"}},
		{"thousands", []billing.Line{line("a", billing.UnitSecond, "2.49", "3240")},
			[]string{"$2.4900/h", "$3,240.00", "$3,240.00"}},
	} {
		var total money.Micros
		for _, l := range tc.lines {
			total += l.Amount
		}
		inv := &billing.Invoice{TenantID: "t", Month: "2026-12", Currency: "USD", Lines: tc.lines, Total: total, AsOf: time.Unix(0, 0)}
		var buf bytes.Buffer
		p := page{Data: map[string]any{"Title": "Billing", "Invoices": []invoiceView{viewInvoice(inv)}, "Month": "2026-12"}}
		if err := parseTemplates()["billing"].Execute(&buf, p); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		table := buf.String()
		table = table[strings.Index(table, "<table class=\"list invoice\">"):]
		got := regexp.MustCompile(`-?\$[0-9][0-9,.]*(/h|/GiB-month| each)?`).FindAllString(table, -1)
		if strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("%s: money on the page %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestFuncsMoney(t *testing.T) {
	for _, tc := range []struct {
		fn   string
		in   string
		want string
	}{
		{"amount", "250.526712", "$250.53"},
		{"amount", "0.0592", "$0.06"},
		{"amount", "-0.125", "-$0.13"},
		{"perHour", "0.0592", "$0.0592/h"},
		{"perHour", "2.49", "$2.4900/h"},
		{"perHour", "0.00004", "$0.00004/h"},
	} {
		got := funcs[tc.fn].(func(money.Micros) string)(money.MustParse(tc.in))
		if got != tc.want {
			t.Errorf("%s %s = %q, want %q", tc.fn, tc.in, got, tc.want)
		}
	}
}
