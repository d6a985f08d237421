package console

import (
	"fmt"
	"html/template"
	"strconv"
	"strings"
	"time"

	"github.com/gpucloud/gpucloud/billing"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/placement"
	"github.com/gpucloud/gpucloud/service"
)

// How the console words what it shows: one way on every page.

// interruptionNote is what a page says of an instance's interruption:
// a pending one (the instance still runs) as a warning with the time
// left, "terminate in 1m30s (scale-in)"; an instance that has ended, or
// is ending, says what happened, "terminated (scale-in)", in the neutral
// style, since there is nothing left to warn of.
type interruptionNote struct {
	Text    string
	Class   string // "notice" (a warning) or "reason" (neutral)
	Pending bool
}

// liveStates are the states in which an interruption is still to come.
var liveStates = map[cloud.State]bool{cloud.Pending: true, cloud.Scheduled: true, cloud.Starting: true, cloud.Running: true}

func interruption(now time.Time, in *cloud.Instance) *interruptionNote {
	i := in.Interruption
	if i == nil {
		return nil
	}
	why := ""
	if i.Reason != "" {
		why = " (" + i.Reason + ")"
	}
	if !liveStates[in.State] {
		return &interruptionNote{Text: string(in.State) + why, Class: "reason"}
	}
	if !i.Deadline.After(now) {
		return &interruptionNote{Text: i.Action + " now" + why, Class: "notice", Pending: true}
	}
	return &interruptionNote{Text: i.Action + " in " + roughDuration(i.Deadline.Sub(now)) + why, Class: "notice", Pending: true}
}

// memory prints a size in MiB in GiB, or TiB from 1 TiB up, with at most
// two decimals: "80 GiB", "0.5 GiB", "1.25 TiB". Every memory size the
// console shows goes through it.
func memory(mib int64) string {
	unit, per := "GiB", int64(1024)
	if mib >= 1024*1024 {
		unit, per = "TiB", 1024*1024
	}
	hundredths := (mib*100 + per/2) / per
	s := strconv.FormatInt(hundredths/100, 10)
	if frac := hundredths % 100; frac != 0 {
		s += strings.TrimRight(fmt.Sprintf(".%02d", frac), "0")
	}
	return s + " " + unit
}

// gib prints a size in GiB as memory does.
func gib(n int) string { return memory(int64(n) * 1024) }

// reclaims says what a spot pool went through over its window, in
// counts: "1 reclaim in 24 h over 3.0 instance-hours"; "—" without spot
// usage in the window, where no rate means anything.
func reclaims(p service.PoolStats) string {
	if p.SpotSeconds <= 0 {
		return "—"
	}
	n := "no reclaims"
	switch {
	case p.Reclaims == 1:
		n = "1 reclaim"
	case p.Reclaims > 1:
		n = fmt.Sprintf("%d reclaims", p.Reclaims)
	}
	return fmt.Sprintf("%s in %s over %s", n, windowText(p.Window), instanceTime(p.SpotSeconds))
}

// windowText is a reclaim window: "24 h", "7 d", "90 min".
func windowText(d time.Duration) string {
	switch {
	case d >= 48*time.Hour && d%(24*time.Hour) == 0:
		return fmt.Sprintf("%d d", d/(24*time.Hour))
	case d >= time.Hour && d%time.Hour == 0:
		return fmt.Sprintf("%d h", d/time.Hour)
	}
	return fmt.Sprintf("%d min", (d+time.Minute-1)/time.Minute)
}

// instanceTime is spot usage in instance-hours with a decimal, or in
// instance-minutes under an hour.
func instanceTime(seconds int64) string {
	if seconds < 3600 {
		m := (seconds + 59) / 60
		if m == 1 {
			return "1 instance-minute"
		}
		return fmt.Sprintf("%d instance-minutes", m)
	}
	tenths := (seconds + 180) / 360
	return fmt.Sprintf("%d.%d instance-hours", tenths/10, tenths%10)
}

// reasonsText says why hosts cannot take an offering, from the
// placement engine's counts per reason (placement.Reason.Describe), most
// hosts first: "4 hosts: fewer than 2 free GPUs; 1 host: wrong GPU
// model". The reasons are phrases, not sentences, so each is put after
// its count of hosts rather than read as a noun of it.
func reasonsText(reasons map[string]int) string {
	keys := placement.ReasonsByCount(reasons)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = hostsText(reasons[k]) + ": " + k
	}
	return strings.Join(parts, "; ")
}

func hostsText(n int) string {
	if n == 1 {
		return "1 host"
	}
	return fmt.Sprintf("%d hosts", n)
}

// tenantName shows a tenant by its name, with its ID in the title; by
// its ID alone where the viewer may not see the tenant (names holds
// only the tenants the session may read).
func tenantName(names map[string]string, id string) template.HTML {
	if n, ok := names[id]; ok && n != "" {
		return template.HTML(`<span class="tenant" title="` + esc(id) + `">` + esc(n) + `</span>`)
	}
	return template.HTML(`<span class="tenant">` + esc(id) + `</span>`)
}

// tenantText is a tenant's name where the viewer may read it, else its
// ID, as plain text (an attribute's value).
func tenantText(names map[string]string, id string) string {
	if n := names[id]; n != "" {
		return n
	}
	return id
}

// lastDecision is a group's newest decision (its decisions are kept
// newest last), nil for none.
func lastDecision(ds []cloud.GroupDecision) *cloud.GroupDecision {
	if len(ds) == 0 {
		return nil
	}
	return &ds[len(ds)-1]
}

// newestFirstOf is a list kept oldest first, newest first.
func newestFirstOf[T any](xs []T) []T {
	out := make([]T, len(xs))
	for i, x := range xs {
		out[len(xs)-1-i] = x
	}
	return out
}

// newestFirst is a group's decisions, newest first.
func newestFirst(ds []cloud.GroupDecision) []cloud.GroupDecision {
	out := make([]cloud.GroupDecision, len(ds))
	for i, d := range ds {
		out[len(ds)-1-i] = d
	}
	return out
}

// invoiceQuantity is a line's quantity as the console shows it: in the
// unit of its price (billing.FormatQuantity), except a time-metered
// quantity of a minute or less, which reads better in seconds: "9 s".
func invoiceQuantity(l billing.Line) string {
	if l.Unit == billing.UnitSecond && l.Quantity >= 0 && l.Quantity <= 60 {
		return strconv.FormatInt(l.Quantity, 10) + " s"
	}
	return billing.FormatQuantity(l)
}

// spanText is a chart's time span in words: "last hour", "last 5 min".
func spanText(d time.Duration) string {
	if d >= chartWindow {
		return "last hour"
	}
	return "last " + intervalText(d.Round(time.Minute))
}

// intervalText is an interval in words: "10 s", "5 min", "1 h", "90 s";
// "" for none.
func intervalText(d time.Duration) string {
	switch {
	case d <= 0:
		return ""
	case d%time.Hour == 0:
		return fmt.Sprintf("%d h", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%d min", d/time.Minute)
	case d%time.Second == 0:
		return fmt.Sprintf("%d s", d/time.Second)
	}
	return d.String()
}
