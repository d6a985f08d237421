package console

import (
	"fmt"
	"html/template"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/money"
)

// point is one sample of a chart's series.
type point struct {
	At    time.Time
	Value float64
}

// chart is a drawn chart with a text summary for screen readers.
type chart struct {
	Title   string
	Summary string
	SVG     template.HTML
}

// A chart's size in SVG units. padL leaves the y axis's labels room:
// "100%", "$12.50" and "12.5 GiB" at 11 px are under 56 units wide.
const (
	chartW, chartH = 640, 160
	padL, padB     = 64, 24
)

func esc(s string) string { return template.HTMLEscapeString(s) }

// lineChart draws one series over [from, to]. Utilization values are
// fractions (0..1) and are drawn in percent; memory in bytes is drawn in
// GiB.
func lineChart(title, unit string, ps []point, from, to time.Time) chart {
	scale := 1.0
	switch unit {
	case "%":
		scale = 100
	case "GiB":
		scale = 1.0 / (1 << 30)
	}
	top := 100.0
	if unit != "%" {
		top = 0
		for _, p := range ps {
			top = math.Max(top, p.Value*scale)
		}
		if top == 0 {
			top = 1
		}
	}
	span := spanText(to.Sub(from))
	summary := "no samples in the " + span
	if n := len(ps); n > 0 {
		summary = fmt.Sprintf("latest %.1f %s, %d samples in the %s", ps[n-1].Value*scale, unit, n, span)
	}
	return chart{Title: title, Summary: summary, SVG: draw(title, unit, [][]point{ps}, []float64{scale}, top, from, to, nil)}
}

// dollarsToMicros turns a chart's price in dollars back into micros, for
// money's one format.
func dollarsToMicros(v float64) money.Micros {
	return money.Micros(math.Round(v * float64(money.Unit)))
}

// Sparklines: the spot page's small price charts, one per pool in a
// table row, with no axes (the row states the prices).
const sparkW, sparkH = 240, 40

// sparkline draws a spot price history over [from, to] in dollars per
// hour, as a step line from 0 to a little above the highest price (or
// the on-demand price, drawn dashed), with the newest price as a dot.
func sparkline(title string, ps []point, onDemand float64, from, to time.Time) chart {
	top := onDemand
	for _, p := range ps {
		top = math.Max(top, p.Value)
	}
	if top == 0 {
		top = 1
	}
	top *= 1.1
	summary := "no price changes in the last 24 hours"
	if n := len(ps); n > 0 {
		summary = fmt.Sprintf("spot %s now, on-demand %s, %d price points in 24 hours", perHour(dollarsToMicros(ps[n-1].Value)), perHour(dollarsToMicros(onDemand)), n)
	}
	x := func(t time.Time) float64 {
		span := to.Sub(from).Seconds()
		if span <= 0 {
			return 0
		}
		return 2 + (sparkW-6)*math.Min(1, math.Max(0, t.Sub(from).Seconds()/span))
	}
	y := func(v float64) float64 { return 2 + (sparkH-4)*(1-math.Min(1, math.Max(0, v/top))) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="spark" viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-label="%s" xmlns="http://www.w3.org/2000/svg"><title>%s</title>`,
		sparkW, sparkH, sparkW, sparkH, esc(title+": "+summary), esc(summary))
	if onDemand > 0 {
		fmt.Fprintf(&b, `<line class="ref" x1="0" x2="%d" y1="%.1f" y2="%.1f"/>`, sparkW, y(onDemand), y(onDemand))
	}
	if len(ps) > 0 {
		var d strings.Builder
		for j, p := range ps {
			if j == 0 {
				fmt.Fprintf(&d, "M%.1f %.1f", x(p.At), y(p.Value))
			} else {
				fmt.Fprintf(&d, " H%.1f V%.1f", x(p.At), y(p.Value))
			}
		}
		fmt.Fprintf(&d, " H%.1f", x(to))
		last := ps[len(ps)-1]
		fmt.Fprintf(&b, `<path class="series s0" d="%s"/><circle class="dot s0" cx="%.1f" cy="%.1f" r="2.5"/>`, d.String(), x(last.At), y(last.Value))
	}
	b.WriteString(`</svg>`)
	return chart{Title: title, Summary: summary, SVG: template.HTML(b.String())}
}

// draw renders series as step lines (a value holds until the next sample)
// with a y axis from 0 to top and horizontal reference lines.
func draw(title, unit string, series [][]point, scales []float64, top float64, from, to time.Time, refs []float64) template.HTML {
	var b strings.Builder
	w, h := float64(chartW-padL-8), float64(chartH-padB-8)
	x := func(t time.Time) float64 {
		span := to.Sub(from).Seconds()
		if span <= 0 {
			return padL
		}
		return padL + w*math.Min(1, math.Max(0, t.Sub(from).Seconds()/span))
	}
	y := func(v float64) float64 { return 8 + h - h*math.Min(1, math.Max(0, v/top)) }
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %d %d" role="img" aria-label="%s" xmlns="http://www.w3.org/2000/svg">`, chartW, chartH, esc(title))
	for _, f := range []float64{0, 0.5, 1} {
		fmt.Fprintf(&b, `<line class="grid" x1="%d" x2="%d" y1="%.1f" y2="%.1f"/>`, padL, chartW-8, y(top*f), y(top*f))
		fmt.Fprintf(&b, `<text class="axis" x="%d" y="%.1f" text-anchor="end">%s</text>`, padL-4, y(top*f)+4, esc(axisLabel(top*f, unit)))
	}
	fmt.Fprintf(&b, `<text class="axis" x="%d" y="%d">%s ago</text>`, padL, chartH-6, esc(roughDuration(to.Sub(from))))
	fmt.Fprintf(&b, `<text class="axis" x="%d" y="%d" text-anchor="end">now (%s UTC)</text>`, chartW-8, chartH-6, esc(to.UTC().Format("15:04")))
	for _, r := range refs {
		fmt.Fprintf(&b, `<line class="ref" x1="%d" x2="%d" y1="%.1f" y2="%.1f"><title>on-demand %s</title></line>`, padL, chartW-8, y(r), y(r), esc(axisLabel(r, unit)))
	}
	for i, ps := range series {
		if len(ps) == 0 {
			continue
		}
		var d strings.Builder
		for j, p := range ps {
			v := p.Value * scales[i]
			if j == 0 {
				fmt.Fprintf(&d, "M%.1f %.1f", x(p.At), y(v))
			} else {
				fmt.Fprintf(&d, " H%.1f V%.1f", x(p.At), y(v))
			}
		}
		fmt.Fprintf(&d, " H%.1f", x(to))
		last := ps[len(ps)-1]
		fmt.Fprintf(&b, `<path class="series s%d" d="%s"/>`, i, d.String())
		// The newest value as a dot: a series that only began at the right
		// edge is still visible.
		fmt.Fprintf(&b, `<circle class="dot s%d" cx="%.1f" cy="%.1f" r="3"/>`, i, x(last.At), y(last.Value*scales[i]))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

func axisLabel(v float64, unit string) string {
	switch unit {
	case "%":
		return fmt.Sprintf("%.0f%%", v)
	case "$/h":
		return fmt.Sprintf("$%.2f", v)
	}
	return fmt.Sprintf("%.1f %s", v, unit)
}

// --- fleet map -------------------------------------------------------------

// hostMap is one host of the fleet map: its facts and its GPUs drawn to
// scale (whole GPUs, MIG slices by memory slot, shares by compute).
type hostMap struct {
	H        *cloud.Host
	Model    string
	GPUs     int
	FreeGPUs int
	Partial  int
	SVG      template.HTML
	Allocs   int
}

// fleetSummary counts what the fleet map shows: fragmentation is the GPUs
// that are partly used (some MIG slots or share taken, some free).
type fleetSummary struct {
	Hosts, GPUs, Free, Partial, Full int
}

func summarize(ms []hostMap) fleetSummary {
	var s fleetSummary
	for _, m := range ms {
		s.Hosts++
		s.GPUs += m.GPUs
		s.Free += m.FreeGPUs
		s.Partial += m.Partial
	}
	s.Full = s.GPUs - s.Free - s.Partial
	return s
}

const (
	gpuW, gpuH, gpuGap = 120, 28, 6
	migSlots           = 8
)

// drawHost draws a host's GPUs with what the instances holding capacity
// on it take.
func drawHost(cat *catalog.Catalog, h *cloud.Host, ins []*cloud.Instance) hostMap {
	gpus := h.Spec.GPUs
	pieces, metal := gpuPieces(gpus, ins)
	m := hostMap{H: h, GPUs: len(gpus), Allocs: len(ins)}
	if len(gpus) > 0 {
		m.Model = gpus[0].Model
	}
	perRow := 8
	rows := (len(gpus) + perRow - 1) / perRow
	if rows == 0 {
		rows = 1
	}
	width := perRow*(gpuW+gpuGap) - gpuGap
	height := rows*(gpuH+gpuGap) - gpuGap
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="hostmap" viewBox="0 0 %d %d" role="img" aria-label="GPUs of host %s" xmlns="http://www.w3.org/2000/svg">`, width, height, esc(h.ID))
	if len(gpus) == 0 {
		fmt.Fprintf(&b, `<text class="axis" x="4" y="18">CPU-only host</text>`)
	}
	for i := range gpus {
		used := 0.0
		for _, p := range pieces[i] {
			used += p.x1 - p.x0
		}
		switch {
		case used == 0 && metal == "":
			m.FreeGPUs++
		case used < 0.999 && metal == "":
			m.Partial++
		}
		writeGPU(&b, &gpus[i], (i%perRow)*(gpuW+gpuGap), (i/perRow)*(gpuH+gpuGap), pieces[i], metal)
	}
	b.WriteString(`</svg>`)
	m.SVG = template.HTML(b.String())
	return m
}

// gpuPiece is a part of a GPU's bar: what one instance (or the hardware's
// own MIG layout) takes of the GPU.
type gpuPiece struct {
	x0, x1 float64 // fraction of the GPU
	class  string
	id     string // the instance, "" for hardware
	label  string
}

// gpuPieces lists, per GPU, the MIG instances present on the hardware but
// not rented, then the devices each instance holds, in instance ID order
// (shares laid side by side). metal is the instance holding the host as
// bare metal, if any.
func gpuPieces(gpus []fleet.GPU, ins []*cloud.Instance) (pieces [][]gpuPiece, metal string) {
	pieces = make([][]gpuPiece, len(gpus))
	shareAt := make([]float64, len(gpus))
	for i, g := range gpus {
		for _, mi := range g.Instances {
			if mi.Alloc == "" {
				pieces[i] = append(pieces[i], gpuPiece{float64(mi.Start) / migSlots, float64(mi.Start+mi.Slots) / migSlots, "hw", "", "MIG instance present on the hardware, not rented"})
			}
		}
	}
	sort.Slice(ins, func(i, j int) bool { return ins[i].ID < ins[j].ID })
	for _, in := range ins {
		if in.Placement == nil {
			continue
		}
		if in.Placement.Metal {
			metal = in.ID
		}
		for _, d := range in.Placement.Devices {
			if d.GPU < 0 || d.GPU >= len(gpus) {
				continue
			}
			label := in.ID + " (" + in.Offering + ", " + string(in.State) + ")"
			switch d.Kind {
			case fleet.Whole:
				pieces[d.GPU] = append(pieces[d.GPU], gpuPiece{0, 1, "whole", in.ID, label})
			case fleet.MIGSlice:
				pieces[d.GPU] = append(pieces[d.GPU], gpuPiece{float64(d.MIGStart) / migSlots, float64(d.MIGStart+d.MIGSlots) / migSlots, "mig", in.ID, label + " MIG " + d.MIGProfile})
			case fleet.Partition, fleet.VF:
				// One of the GPU's equal devices (an AMD compute partition or VF).
				if d.Parts > 0 {
					what := fmt.Sprintf(" %s partition %d of %d", d.Partition, d.Part, d.Parts)
					if d.Kind == fleet.VF {
						what = fmt.Sprintf(" VF %d of %d", d.Part, d.Parts)
					}
					pieces[d.GPU] = append(pieces[d.GPU], gpuPiece{float64(d.Part) / float64(d.Parts), float64(d.Part+1) / float64(d.Parts), "mig", in.ID, label + what})
				}
			case fleet.Share:
				x0 := shareAt[d.GPU]
				x1 := x0 + float64(d.Milli)/fleet.MilliPerGPU
				shareAt[d.GPU] = x1
				pieces[d.GPU] = append(pieces[d.GPU], gpuPiece{x0, math.Min(1, x1), "share", in.ID, label + fmt.Sprintf(" share %d milli", d.Milli)})
			}
		}
	}
	return pieces, metal
}

// writeGPU draws GPU g at (gx, gy): its box, the bare-metal holder or its
// pieces, the MIG slot marks and its index.
func writeGPU(b *strings.Builder, g *fleet.GPU, gx, gy int, pieces []gpuPiece, metal string) {
	mode := ""
	if g.MIG {
		mode = " (MIG mode)"
	}
	if m := g.ModeString(); m != "" {
		mode = " (" + m + ")"
	}
	fmt.Fprintf(b, `<g><title>GPU %d %s%s %s</title><rect class="gpu" x="%d" y="%d" width="%d" height="%d" rx="3"/>`, g.Index, esc(g.Model), mode, esc(g.UUID), gx, gy, gpuW, gpuH)
	if metal != "" {
		fmt.Fprintf(b, `<a href="/instances/%s"><rect class="alloc metal" x="%d" y="%d" width="%d" height="%d" rx="3"><title>bare metal: %s</title></rect></a>`, esc(metal), gx, gy, gpuW, gpuH, esc(metal))
	}
	for _, p := range pieces {
		x := float64(gx) + p.x0*gpuW
		w := math.Max(1, (p.x1-p.x0)*gpuW-1)
		rect := fmt.Sprintf(`<rect class="alloc %s" x="%.1f" y="%d" width="%.1f" height="%d"><title>%s</title></rect>`, p.class, x, gy+2, w, gpuH-4, esc(p.label))
		if p.id != "" {
			rect = fmt.Sprintf(`<a href="/instances/%s">%s</a>`, esc(p.id), rect)
		}
		b.WriteString(rect)
	}
	if g.MIG {
		for s := 1; s < migSlots; s++ {
			x := gx + s*gpuW/migSlots
			fmt.Fprintf(b, `<line class="slot" x1="%d" x2="%d" y1="%d" y2="%d"/>`, x, x, gy+gpuH-5, gy+gpuH)
		}
	}
	fmt.Fprintf(b, `<text class="gpulabel" x="%d" y="%d">%d</text></g>`, gx+4, gy+gpuH/2+4, g.Index)
}
