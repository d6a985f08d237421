package sim

import (
	"bytes"
	"encoding/xml"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// walkXML decodes the whole document and returns the elements by local
// name, failing the test on any syntax error.
func walkXML(t *testing.T, doc []byte) map[string][]xml.StartElement {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(doc))
	d.Strict = true
	elems := make(map[string][]xml.StartElement)
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return elems
		}
		if err != nil {
			t.Fatalf("output is not well-formed XML: %v\n%s", err, doc)
		}
		if se, ok := tok.(xml.StartElement); ok {
			elems[se.Name.Local] = append(elems[se.Name.Local], se.Copy())
		}
	}
}

func attr(se xml.StartElement, name string) string {
	for _, a := range se.Attr {
		if a.Name.Local == name {
			return a.Value
		}
	}
	return ""
}

// texts returns the character data of every element, joined by newlines.
func texts(t *testing.T, doc []byte) string {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(doc))
	var b strings.Builder
	for {
		tok, err := d.Token()
		if err != nil {
			return b.String()
		}
		if cd, ok := tok.(xml.CharData); ok {
			b.Write(cd)
			b.WriteByte('\n')
		}
	}
}

func render(t *testing.T, c Chart) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := WriteSVG(&buf, c); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestWriteSVGBasic(t *testing.T) {
	c := Chart{
		Title:  "Unallocated GPUs <default> & friends",
		XLabel: "Arrived GPU request (% of capacity)",
		YLabel: "Unallocated GPU (%)",
		Series: []Series{
			{Name: "fgd \"seed\" 42", X: []float64{0, 50, 100, 130}, Y: []float64{0, 1, 5, 30}},
			{Name: "best-fit", X: []float64{0, 50, 100, 130}, Y: []float64{0, 2, 9, 35}},
			{Name: "single", X: []float64{70}, Y: []float64{3}},
		},
		VLines: []VLine{{X: 100, Label: "100% arrival"}},
	}
	doc := render(t, c)
	elems := walkXML(t, doc)
	text := texts(t, doc)
	for _, want := range []string{c.Title, c.XLabel, c.YLabel, "fgd \"seed\" 42", "best-fit", "single", "100% arrival"} {
		if !strings.Contains(text, want) {
			t.Errorf("text %q missing from output", want)
		}
	}
	if !bytes.Contains(doc, []byte("&lt;default&gt; &amp; friends")) {
		t.Error("title was not escaped")
	}
	if svg := elems["svg"]; len(svg) != 1 || attr(svg[0], "width") != "900" || attr(svg[0], "height") != "560" {
		t.Errorf("svg element = %+v, want one 900x560", svg)
	}
	lines := elems["polyline"]
	if len(lines) != 2 {
		t.Fatalf("got %d polylines, want 2", len(lines))
	}
	if attr(lines[0], "stroke") == attr(lines[1], "stroke") {
		t.Error("two series share a colour")
	}
	if len(elems["circle"]) != 1 {
		t.Errorf("single-point series should be drawn as one circle, got %d", len(elems["circle"]))
	}
	dashed := 0
	for _, l := range elems["line"] {
		if attr(l, "stroke-dasharray") == "6 4" {
			dashed++
		}
	}
	if dashed != 1 {
		t.Errorf("got %d dashed markers, want 1", dashed)
	}
	// The automatic y axis for data 0..35 should use round ticks.
	for _, want := range []string{">0<", ">10<", ">20<", ">30<", ">40<"} {
		if !bytes.Contains(doc, []byte(want)) {
			t.Errorf("tick label %s missing", want)
		}
	}
}

func TestWriteSVGErrors(t *testing.T) {
	tests := []struct {
		name string
		c    Chart
		want string
	}{
		{"no series", Chart{}, "chart: no series"},
		{"length mismatch", Chart{Series: []Series{{Name: "a", X: []float64{1, 2}, Y: []float64{1}}}},
			`chart: series 0 ("a") has 2 x values but 1 y values`},
		{"bad range", Chart{XMin: 5, XMax: 1, Series: []Series{{Name: "a", X: []float64{1}, Y: []float64{1}}}},
			"chart: XMin (5) must be below XMax (1)"},
		{"nan limit", Chart{YMax: math.NaN(), Series: []Series{{Name: "a"}}}, "chart: YMax is NaN"},
		{"too small", Chart{Width: 10, Height: 10, Series: []Series{{Name: "a"}}}, "chart: size 10x10 is smaller than the minimum 240x160"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			err := WriteSVG(&buf, tc.c)
			if err == nil || err.Error() != tc.want {
				t.Errorf("error %v, want %q", err, tc.want)
			}
			if buf.Len() != 0 {
				t.Error("wrote output despite an error")
			}
		})
	}
}

func TestWriteSVGDownsamples(t *testing.T) {
	const n = 13000
	x := make([]float64, n)
	y := make([]float64, n)
	for i := range x {
		x[i] = float64(i)
		y[i] = math.Sin(float64(i) / 300)
	}
	y[7777] = 50 // a spike that striding would likely miss
	y[100] = math.NaN()
	doc := render(t, Chart{Series: []Series{{Name: "long", X: x, Y: y}}})
	lines := walkXML(t, doc)["polyline"]
	if len(lines) != 1 {
		t.Fatalf("got %d polylines", len(lines))
	}
	pts := strings.Fields(attr(lines[0], "points"))
	if len(pts) > maxSeriesPoints || len(pts) < maxSeriesPoints/2 {
		t.Errorf("polyline has %d points, want between %d and %d", len(pts), maxSeriesPoints/2, maxSeriesPoints)
	}
	if len(doc) > 64<<10 {
		t.Errorf("SVG is %d bytes; downsampling should keep it small", len(doc))
	}

	keep := downsample(x, y, maxSeriesPoints)
	if keep[0] != 0 || keep[len(keep)-1] != n-1 {
		t.Errorf("first/last kept = %d/%d, want 0/%d", keep[0], keep[len(keep)-1], n-1)
	}
	spike := false
	for i, j := range keep {
		if j == 100 {
			t.Error("kept the NaN point")
		}
		if j == 7777 {
			spike = true
		}
		if i > 0 && j <= keep[i-1] {
			t.Fatalf("indices not increasing at %d: %d after %d", i, j, keep[i-1])
		}
	}
	if !spike {
		t.Error("min/max bucketing dropped the spike")
	}
}

func TestDownsampleSmall(t *testing.T) {
	nan := math.NaN()
	got := downsample([]float64{0, 1, 2, 3}, []float64{1, nan, 3, math.Inf(1)}, 10)
	if want := []int{0, 2}; !reflect.DeepEqual(got, want) {
		t.Errorf("downsample = %v, want %v", got, want)
	}
}

func TestResolveAxis(t *testing.T) {
	tests := []struct {
		name               string
		umin, umax, lo, hi float64
		want               axis
	}{
		{"auto", 0, 0, 3, 97, axis{0, 100, 20}},
		{"auto negative", 0, 0, -0.7, 0.3, axis{-0.8, 0.4, 0.2}},
		{"auto flat", 0, 0, 5, 5, axis{4.4, 5.6, 0.2}},
		{"auto empty", 0, 0, math.Inf(1), math.Inf(-1), axis{0, 1, 0.2}},
		{"fixed", 0, 130, 3, 97, axis{0, 130, 20}},
		{"min only", 40, 0, 3, 97, axis{40, 100, 10}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := resolveAxis("X", tc.umin, tc.umax, tc.lo, tc.hi, 5)
			if err != nil {
				t.Fatal(err)
			}
			const eps = 1e-9
			if math.Abs(got.min-tc.want.min) > eps || math.Abs(got.max-tc.want.max) > eps || math.Abs(got.step-tc.want.step) > eps {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestTickFormatting(t *testing.T) {
	a := axis{-0.4, 0.4, 0.2}
	var got []string
	for _, v := range ticks(a) {
		got = append(got, formatTick(v, a.step))
	}
	if want := []string{"-0.4", "-0.2", "0.0", "0.2", "0.4"}; !reflect.DeepEqual(got, want) {
		t.Errorf("ticks = %v, want %v", got, want)
	}
	if s := formatTick(12000, 5000); s != "12000" {
		t.Errorf("formatTick(12000) = %q", s)
	}
}

func TestPaletteWraps(t *testing.T) {
	var series []Series
	for i := 0; i < len(palette)+1; i++ {
		series = append(series, Series{Name: strings.Repeat("x", i+1), X: []float64{0, 1}, Y: []float64{0, float64(i)}})
	}
	lines := walkXML(t, render(t, Chart{Series: series}))["polyline"]
	last := lines[len(lines)-1]
	if attr(last, "stroke") != attr(lines[0], "stroke") || attr(last, "stroke-dasharray") == "" {
		t.Error("the 11th series should reuse the first colour with a dash pattern")
	}
}

// TestWriteSVGFile writes a sample chart when GPUCLOUD_CHART_OUT names a
// directory, for eyeballing the layout in a browser.
func TestWriteSVGFile(t *testing.T) {
	dir := os.Getenv("GPUCLOUD_CHART_OUT")
	if dir == "" {
		t.Skip("set GPUCLOUD_CHART_OUT to write a sample chart")
	}
	var series []Series
	for k, name := range []string{"fgd", "best-fit", "dot-product", "gpu-packing", "random"} {
		s := Series{Name: name}
		for i := 0; i <= 13000; i++ {
			a := float64(i) / 100
			s.X = append(s.X, a)
			s.Y = append(s.Y, math.Max(0, (a-60-float64(k)*5)*0.4)+math.Sin(float64(i)/40)*0.3)
		}
		series = append(series, s)
	}
	var buf bytes.Buffer
	err := WriteSVG(&buf, Chart{
		Title: "Unallocated GPU vs arrival (default)", XLabel: "Arrived GPU request (% of capacity)",
		YLabel: "Unallocated GPU (%)", XMax: 130, Series: series,
		VLines: []VLine{{X: 100, Label: "100% arrival"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sample.svg"), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}
