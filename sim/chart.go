package sim

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// This file writes simple SVG line charts (allocation curves over arrival,
// for example) without pulling a plotting library into the module. The output
// is a standalone SVG file that browsers and docs render directly.

// Series is one line of a chart. X and Y must have the same length; points
// with a NaN or infinite coordinate are skipped.
type Series struct {
	Name string
	X, Y []float64
}

// VLine is a dashed vertical marker, e.g. at "100% arrival".
type VLine struct {
	X     float64
	Label string
}

// Chart describes a line chart.
//
// Axis ranges: a range is automatic (fitted to the data and rounded out to
// tick values) when both its limits are zero. When only the maximum is set,
// the minimum is taken literally as zero, which gives the common 0..N axis;
// when only the minimum is set, the maximum is fitted to the data.
type Chart struct {
	Title, XLabel, YLabel  string
	Series                 []Series
	XMin, XMax, YMin, YMax float64
	Width, Height          int // 0 means 900x560
	VLines                 []VLine
}

const (
	defaultChartWidth  = 900
	defaultChartHeight = 560
	// minChartWidth and minChartHeight keep the plot area positive after
	// the margins for labels and the legend are taken.
	minChartWidth  = 240
	minChartHeight = 160
	// maxSeriesPoints bounds the points drawn per series. A 13k-point
	// replay curve would otherwise make a multi-megabyte SVG that browsers
	// render slowly, with no visible gain at chart resolution.
	maxSeriesPoints = 2000
	// charWidth approximates the advance of a 12px sans-serif glyph; SVG
	// has no text measurement, so margins are sized from character counts.
	charWidth = 7.0
)

// palette holds the Okabe-Ito colours (without yellow, which is unreadable
// on white) followed by three from Paul Tol's muted scheme; both sets were
// chosen to stay distinguishable under the common forms of colour blindness.
var palette = []string{
	"#0072B2", // blue
	"#E69F00", // orange
	"#009E73", // bluish green
	"#D55E00", // vermillion
	"#CC79A7", // reddish purple
	"#56B4E9", // sky blue
	"#000000", // black
	"#882255", // wine
	"#999933", // olive
	"#332288", // indigo
}

// dashes distinguish series once the palette wraps around.
var dashes = []string{"", "6 3", "2 3", "8 3 2 3"}

// axis is a resolved axis range with its tick spacing.
type axis struct {
	min, max, step float64
}

// WriteSVG writes c as a standalone SVG document to w.
func WriteSVG(w io.Writer, c Chart) error {
	width, height, err := c.size()
	if err != nil {
		return err
	}
	l, err := layOut(c, width, height)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	l.writeFrame(p, c)
	l.writeLabels(p, c)
	l.writeMarkers(p, c.VLines)
	l.writeSeries(p, c.Series)
	l.writeLegend(p, c.Series)
	p("</svg>\n")
	_, err = w.Write(b.Bytes())
	return err
}

// printer appends formatted SVG text to the document being written.
type printer func(format string, args ...any)

// size checks the chart's series and axis limits and returns its size in
// pixels, with the defaults applied.
func (c Chart) size() (width, height int, err error) {
	if len(c.Series) == 0 {
		return 0, 0, errors.New("chart: no series")
	}
	for i, s := range c.Series {
		if len(s.X) != len(s.Y) {
			return 0, 0, fmt.Errorf("chart: series %d (%q) has %d x values but %d y values", i, s.Name, len(s.X), len(s.Y))
		}
	}
	width, height = c.Width, c.Height
	if width == 0 {
		width = defaultChartWidth
	}
	if height == 0 {
		height = defaultChartHeight
	}
	if width < minChartWidth || height < minChartHeight {
		return 0, 0, fmt.Errorf("chart: size %dx%d is smaller than the minimum %dx%d", width, height, minChartWidth, minChartHeight)
	}
	for _, l := range []struct {
		name string
		v    float64
	}{{"XMin", c.XMin}, {"XMax", c.XMax}, {"YMin", c.YMin}, {"YMax", c.YMax}} {
		if math.IsNaN(l.v) || math.IsInf(l.v, 0) {
			return 0, 0, fmt.Errorf("chart: %s is %v", l.name, l.v)
		}
	}
	return width, height, nil
}

// extents returns the range of the finite data points. Markers count
// towards the x extent so that an automatic axis always shows them. With no
// finite point, lo is above hi.
func (c Chart) extents() (xlo, xhi, ylo, yhi float64) {
	xlo, xhi, ylo, yhi = math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for _, s := range c.Series {
		for i := range s.X {
			x, y := s.X[i], s.Y[i]
			if !finite(x) || !finite(y) {
				continue
			}
			xlo, xhi = math.Min(xlo, x), math.Max(xhi, x)
			ylo, yhi = math.Min(ylo, y), math.Max(yhi, y)
		}
	}
	for _, v := range c.VLines {
		if finite(v.X) {
			xlo, xhi = math.Min(xlo, v.X), math.Max(xhi, v.X)
		}
	}
	return xlo, xhi, ylo, yhi
}

// layout is where a chart's parts go: the plot area in pixels, the
// resolved axes with their ticks, and the legend's name limit.
type layout struct {
	width, height      int
	px0, px1, py0, py1 float64 // plot area
	xa, ya             axis
	xticks, yticks     []float64
	ylabels            []string
	// nameLimit is the longest series name, in characters, that the
	// legend shows unshortened.
	nameLimit int
	clip      string
}

// layOut sizes the margins and resolves both axes.
func layOut(c Chart, width, height int) (*layout, error) {
	xlo, xhi, ylo, yhi := c.extents()
	l := &layout{width: width, height: height, clip: clipID(c)}

	// Margins depend on the tick labels, which depend on the plot size, so
	// the y axis is resolved once with a provisional height.
	top := 20.0
	if c.Title != "" {
		top = 44
	}
	bottom := 36.0
	if c.XLabel != "" {
		bottom += 20
	}
	plotH := float64(height) - top - bottom
	var err error
	if l.ya, err = resolveAxis("Y", c.YMin, c.YMax, ylo, yhi, int(plotH/60)); err != nil {
		return nil, err
	}
	l.yticks = ticks(l.ya)
	l.ylabels = make([]string, len(l.yticks))
	maxY := 0
	for i, v := range l.yticks {
		l.ylabels[i] = formatTick(v, l.ya.step)
		maxY = max(maxY, len(l.ylabels[i]))
	}
	left := float64(maxY)*charWidth + 16
	if c.YLabel != "" {
		left += 22
	}

	// The legend sits right of the plot; long names are shortened so it
	// never takes more than a third of the width.
	maxName := 0
	for _, s := range c.Series {
		maxName = max(maxName, utf8.RuneCountInString(s.Name))
	}
	l.nameLimit = int((float64(width)/3 - 56) / charWidth)
	maxName = min(maxName, l.nameLimit)
	right := 56 + float64(maxName)*charWidth

	plotW := float64(width) - left - right
	if l.xa, err = resolveAxis("X", c.XMin, c.XMax, xlo, xhi, int(plotW/90)); err != nil {
		return nil, err
	}
	l.xticks = ticks(l.xa)
	l.px0, l.px1, l.py0, l.py1 = left, left+plotW, top, top+plotH
	return l, nil
}

// sx and sy map data coordinates to pixels.
func (l *layout) sx(x float64) float64 {
	return l.px0 + (x-l.xa.min)/(l.xa.max-l.xa.min)*(l.px1-l.px0)
}

func (l *layout) sy(y float64) float64 {
	return l.py1 - (y-l.ya.min)/(l.ya.max-l.ya.min)*(l.py1-l.py0)
}

// writeFrame writes the document header, the background, the plot's clip
// path, the grid, the plot border and the tick labels.
func (l *layout) writeFrame(p printer, c Chart) {
	p(`<?xml version="1.0" encoding="UTF-8"?>` + "\n")
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		l.width, l.height, l.width, l.height)
	if c.Title != "" {
		p("<title>%s</title>\n", esc(c.Title))
	}
	p(`<rect width="100%%" height="100%%" fill="#ffffff"/>` + "\n")
	p(`<defs><clipPath id="%s"><rect x="%s" y="%s" width="%s" height="%s"/></clipPath></defs>`+"\n",
		l.clip, num(l.px0), num(l.py0), num(l.px1-l.px0), num(l.py1-l.py0))

	p(`<g stroke="#e6e6e6" stroke-width="1">` + "\n")
	for _, v := range l.xticks {
		x := num(l.sx(v))
		p(`<line x1="%s" y1="%s" x2="%s" y2="%s"/>`+"\n", x, num(l.py0), x, num(l.py1))
	}
	for _, v := range l.yticks {
		y := num(l.sy(v))
		p(`<line x1="%s" y1="%s" x2="%s" y2="%s"/>`+"\n", num(l.px0), y, num(l.px1), y)
	}
	p("</g>\n")
	p(`<rect x="%s" y="%s" width="%s" height="%s" fill="none" stroke="#888888"/>`+"\n",
		num(l.px0), num(l.py0), num(l.px1-l.px0), num(l.py1-l.py0))
	p(`<g fill="#333333" text-anchor="middle">` + "\n")
	for _, v := range l.xticks {
		p(`<text x="%s" y="%s">%s</text>`+"\n", num(l.sx(v)), num(l.py1+17), esc(formatTick(v, l.xa.step)))
	}
	p("</g>\n")
	p(`<g fill="#333333" text-anchor="end">` + "\n")
	for i, v := range l.yticks {
		p(`<text x="%s" y="%s">%s</text>`+"\n", num(l.px0-6), num(l.sy(v)+4), esc(l.ylabels[i]))
	}
	p("</g>\n")
}

// writeLabels writes the chart title and the axis labels.
func (l *layout) writeLabels(p printer, c Chart) {
	if c.Title != "" {
		p(`<text x="%s" y="26" text-anchor="middle" font-size="16" font-weight="bold" fill="#222222">%s</text>`+"\n",
			num((l.px0+l.px1)/2), esc(c.Title))
	}
	if c.XLabel != "" {
		p(`<text x="%s" y="%s" text-anchor="middle" fill="#222222">%s</text>`+"\n",
			num((l.px0+l.px1)/2), num(l.py1+38), esc(c.XLabel))
	}
	if c.YLabel != "" {
		p(`<text transform="translate(16 %s) rotate(-90)" text-anchor="middle" fill="#222222">%s</text>`+"\n",
			num((l.py0+l.py1)/2), esc(c.YLabel))
	}
}

// writeMarkers writes the vertical markers inside the x range. They are
// drawn before the series so they never hide data.
func (l *layout) writeMarkers(p printer, vlines []VLine) {
	for _, v := range vlines {
		if !finite(v.X) || v.X < l.xa.min || v.X > l.xa.max {
			continue
		}
		x := l.sx(v.X)
		p(`<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#555555" stroke-width="1.2" stroke-dasharray="6 4"/>`+"\n",
			num(x), num(l.py0), num(x), num(l.py1))
		if v.Label != "" {
			// Labels near the right edge go on the left of the line.
			anchor, lx := "start", x+4
			if x+4+float64(utf8.RuneCountInString(v.Label))*charWidth*0.9 > l.px1 {
				anchor, lx = "end", x-4
			}
			p(`<text x="%s" y="%s" text-anchor="%s" font-size="11" fill="#555555">%s</text>`+"\n",
				num(lx), num(l.py0+13), anchor, esc(v.Label))
		}
	}
}

// writeSeries draws each series, clipped to the plot area, as a polyline
// of at most maxSeriesPoints points, or as a dot when it has one point.
func (l *layout) writeSeries(p printer, series []Series) {
	p(`<g clip-path="url(#%s)" fill="none" stroke-width="1.6" stroke-linejoin="round" stroke-linecap="round">`+"\n", l.clip)
	var pts []byte
	for i, s := range series {
		keep := downsample(s.X, s.Y, maxSeriesPoints)
		if len(keep) == 0 {
			continue
		}
		color, dash := seriesStyle(i)
		if len(keep) == 1 {
			// A single point draws nothing as a polyline; show a dot.
			j := keep[0]
			p(`<circle cx="%s" cy="%s" r="3" fill="%s" stroke="none"><title>%s</title></circle>`+"\n",
				num(l.sx(s.X[j])), num(l.sy(s.Y[j])), color, esc(s.Name))
			continue
		}
		pts = pts[:0]
		for k, j := range keep {
			if k > 0 {
				pts = append(pts, ' ')
			}
			pts = appendNum(pts, l.sx(s.X[j]))
			pts = append(pts, ',')
			pts = appendNum(pts, l.sy(s.Y[j]))
		}
		p(`<polyline stroke="%s"`, color)
		if dash != "" {
			p(` stroke-dasharray="%s"`, dash)
		}
		p(` points="%s"><title>%s</title></polyline>`+"\n", pts, esc(s.Name))
	}
	p("</g>\n")
}

// writeLegend writes one line sample and name per series right of the
// plot, shortening names longer than the layout's limit.
func (l *layout) writeLegend(p printer, series []Series) {
	lx := l.px1 + 14
	p(`<g font-size="12" fill="#222222">` + "\n")
	for i, s := range series {
		y := l.py0 + 10 + float64(i)*18
		color, dash := seriesStyle(i)
		p(`<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="2.5"`, num(lx), num(y), num(lx+26), num(y), color)
		if dash != "" {
			p(` stroke-dasharray="%s"`, dash)
		}
		p("/>\n")
		name := s.Name
		if utf8.RuneCountInString(name) > l.nameLimit {
			name = string([]rune(name)[:max(l.nameLimit-1, 1)]) + "…"
		}
		p(`<text x="%s" y="%s">%s<title>%s</title></text>`+"\n", num(lx+32), num(y+4), esc(name), esc(s.Name))
	}
	p("</g>\n")
}

// resolveAxis applies the Chart range rules to one axis. target is the
// desired number of tick intervals.
func resolveAxis(name string, umin, umax, dlo, dhi float64, target int) (axis, error) {
	target = max(target, 2)
	hasData := dlo <= dhi
	switch {
	case umin == 0 && umax == 0:
		if !hasData {
			dlo, dhi = 0, 1
		}
		if dlo == dhi {
			// A flat line still needs a non-empty range around it.
			pad := math.Abs(dlo) * 0.1
			if pad == 0 {
				pad = 1
			}
			dlo, dhi = dlo-pad, dhi+pad
		}
		step := niceStep((dhi - dlo) / float64(target))
		lo := math.Floor(dlo/step) * step
		hi := math.Ceil(dhi/step) * step
		return axis{lo, hi, step}, nil
	case umax == 0:
		// Only the minimum is set: fit the maximum to the data.
		hi := dhi
		if !hasData || hi <= umin {
			hi = umin + math.Max(math.Abs(umin), 1)
		}
		step := niceStep((hi - umin) / float64(target))
		hi = math.Ceil(hi/step) * step
		return axis{umin, hi, step}, nil
	}
	if umin >= umax {
		return axis{}, fmt.Errorf("chart: %sMin (%v) must be below %sMax (%v)", name, umin, name, umax)
	}
	return axis{umin, umax, niceStep((umax - umin) / float64(target))}, nil
}

// niceStep returns the 1, 2 or 5 times a power of ten closest to raw (on a
// log scale), so that ticks land on round numbers and their count stays near
// the target; always rounding up would turn 0..130 into 0, 50, 100.
func niceStep(raw float64) float64 {
	if !(raw > 0) || math.IsInf(raw, 0) {
		return 1
	}
	exp := math.Floor(math.Log10(raw))
	base := math.Pow(10, exp)
	f := raw / base
	switch {
	case f < 1.5:
		return base
	case f < 3:
		return 2 * base
	case f < 7:
		return 5 * base
	}
	return 10 * base
}

// ticks lists the multiples of a.step inside [a.min, a.max].
func ticks(a axis) []float64 {
	eps := a.step * 1e-9
	var out []float64
	first := math.Ceil((a.min-eps)/a.step) * a.step
	for i := 0; i < 1000; i++ {
		v := first + float64(i)*a.step
		if v > a.max+eps {
			break
		}
		if math.Abs(v) < eps {
			v = 0 // avoid labels like "-0" or "1e-17"
		}
		out = append(out, v)
	}
	return out
}

// formatTick prints v with just enough decimals for the tick spacing.
func formatTick(v, step float64) string {
	decimals := 0
	if step < 1 {
		decimals = int(math.Ceil(-math.Log10(step) - 1e-9))
	}
	s := strconv.FormatFloat(v, 'f', decimals, 64)
	if s == "-0" || strings.Trim(s, "-0.") == "" {
		s = strings.TrimPrefix(s, "-")
	}
	return s
}

// downsample returns the indices of the points to draw, in order: all finite
// points when there are at most limit of them, otherwise the first and last
// point plus the lowest and highest point of each of (limit-2)/2 buckets.
// Keeping both extremes preserves spikes that plain striding would drop.
func downsample(xs, ys []float64, limit int) []int {
	idx := make([]int, 0, min(len(xs), limit))
	n := 0
	for i := range xs {
		if finite(xs[i]) && finite(ys[i]) {
			n++
		}
	}
	if n <= limit {
		for i := range xs {
			if finite(xs[i]) && finite(ys[i]) {
				idx = append(idx, i)
			}
		}
		return idx
	}
	valid := make([]int, 0, n)
	for i := range xs {
		if finite(xs[i]) && finite(ys[i]) {
			valid = append(valid, i)
		}
	}
	idx = append(idx, valid[0])
	inner := valid[1 : n-1]
	buckets := (limit - 2) / 2
	for k := 0; k < buckets; k++ {
		part := inner[k*len(inner)/buckets : (k+1)*len(inner)/buckets]
		if len(part) == 0 {
			continue
		}
		lo, hi := part[0], part[0]
		for _, j := range part[1:] {
			if ys[j] < ys[lo] {
				lo = j
			}
			if ys[j] > ys[hi] {
				hi = j
			}
		}
		switch {
		case lo == hi:
			idx = append(idx, lo)
		case lo < hi:
			idx = append(idx, lo, hi)
		default:
			idx = append(idx, hi, lo)
		}
	}
	return append(idx, valid[n-1])
}

func seriesStyle(i int) (color, dash string) {
	return palette[i%len(palette)], dashes[(i/len(palette))%len(dashes)]
}

// clipID derives the clip-path id from the chart content, so that several
// charts inlined into one HTML page do not share (and break) one id.
func clipID(c Chart) string {
	h := fnv.New32a()
	io.WriteString(h, c.Title)
	for _, s := range c.Series {
		io.WriteString(h, "\x00")
		io.WriteString(h, s.Name)
		fmt.Fprint(h, len(s.X))
	}
	return fmt.Sprintf("plot-%08x", h.Sum32())
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// appendNum appends a pixel coordinate rounded to 0.1 px; finer precision
// only makes the file bigger.
func appendNum(b []byte, v float64) []byte {
	return strconv.AppendFloat(b, math.Round(v*10)/10, 'f', -1, 64)
}

func num(v float64) string { return string(appendNum(nil, v)) }

// esc escapes text for use in SVG element content and attribute values.
func esc(s string) string {
	var b strings.Builder
	xml.EscapeText(&b, []byte(s))
	return b.String()
}
