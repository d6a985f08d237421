package autoscale

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

var h0 = time.Date(2024, 3, 4, 0, 0, 0, 0, time.UTC) // a Monday

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol }

func TestHistoryMinuteMeanAndMax(t *testing.T) {
	h := NewHistory()
	for i, v := range []float64{1, 2, 6} { // one minute, 10 s apart
		h.Add("load:gpu", h0.Add(time.Duration(i)*10*time.Second), v)
	}
	h.Add("load:gpu", h0.Add(time.Minute), 4)
	h.Add("load:gpu", h0.Add(time.Minute), math.NaN()) // dropped
	got := h.Series("load:gpu", h0, h0.Add(2*time.Minute), time.Minute)
	if len(got) != 2 || !near(got[0], 3, 1e-6) || got[1] != 4 {
		t.Fatalf("means %v, want [3 4]", got)
	}
	if mx := h.SeriesMax("load:gpu", h0, h0.Add(2*time.Minute), time.Minute); mx[0] != 6 || mx[1] != 4 {
		t.Fatalf("maxima %v, want [6 4]", mx)
	}
	if v, at, ok := h.Last("load:gpu"); !ok || v != 4 || !at.Equal(h0.Add(time.Minute)) {
		t.Fatalf("last %v %v %v", v, at, ok)
	}
	if h.Span("load:gpu") != 2*time.Minute || h.Span("nope") != 0 {
		t.Fatalf("span %v", h.Span("load:gpu"))
	}
	// A late sample merges into its minute; one for a minute with none
	// is inserted in order.
	h.Add("load:gpu", h0.Add(30*time.Second), 3)
	h.Add("load:gpu", h0.Add(5*time.Minute), 10)
	h.Add("load:gpu", h0.Add(3*time.Minute), 8)
	got = h.Series("load:gpu", h0, h0.Add(6*time.Minute), time.Minute)
	want := []float64{3, 4, 4, 8, 8, 10} // minute 2 and 4 carry forward
	for i := range want {
		if !near(got[i], want[i], 1e-6) {
			t.Fatalf("after late samples %v, want %v", got, want)
		}
	}
}

func TestHistorySeriesGapsAndSteps(t *testing.T) {
	h := NewHistory()
	if h.Series("x", h0, h0.Add(time.Hour), time.Minute) != nil {
		t.Fatal("a series with no point should be nil")
	}
	h.Add("x", h0.Add(10*time.Minute), 5)
	h.Add("x", h0.Add(20*time.Minute), 1)
	got := h.Series("x", h0, h0.Add(30*time.Minute), time.Minute)
	for i, v := range got {
		want := 5.0 // before the first point: its value
		if i >= 20 {
			want = 1
		}
		if v != want {
			t.Fatalf("minute %d: %v, want %v (%v)", i, v, want, got)
		}
	}
	// A 10-minute step is the mean of its minutes.
	got = h.Series("x", h0.Add(15*time.Minute), h0.Add(35*time.Minute), 10*time.Minute)
	if len(got) != 2 || got[0] != 3 || got[1] != 1 {
		t.Fatalf("10-minute steps %v, want [3 1]", got)
	}
	// Far outside the data: edge values, without materializing years.
	got = h.Series("x", h0.AddDate(-50, 0, 0), h0.Add(time.Hour), 24*365*time.Hour)
	if len(got) != 51 || got[0] != 5 || got[49] != 5 || !(got[50] < 5 && got[50] > 4.9) {
		t.Fatalf("from 50 years back: %v", got)
	}
	if h.Series("x", time.Time{}, h0, time.Hour) != nil || h.Series("x", h0, h0.AddDate(30, 0, 0), time.Minute) != nil {
		t.Fatal("absurd ranges should be nil")
	}
	if got = h.Series("x", h0.Add(100*24*time.Hour), h0.Add(101*24*time.Hour), time.Hour); len(got) != 24 || got[23] != 1 {
		t.Fatalf("after the data: %v", got)
	}
	// A sub-minute step repeats its minute; len is ceil(range/step).
	got = h.Series("x", h0.Add(19*time.Minute+30*time.Second), h0.Add(20*time.Minute+31*time.Second), 30*time.Second)
	if len(got) != 3 || got[0] != 5 || got[1] != 1 || got[2] != 1 {
		t.Fatalf("30 s steps %v", got)
	}
}

// TestHistoryFoldsAndStaysBounded: 30 days of 1-minute samples (six per
// minute) keep at most MaxHistoryPoints per series, two days at 1
// minute, 14 days in all, and the backing arrays stay small.
func TestHistoryFoldsAndStaysBounded(t *testing.T) {
	h := NewHistory()
	rng := rand.New(rand.NewPCG(1, 1))
	value := func(m int) float64 { return 10 + 5*math.Sin(float64(m)/100) }
	const days = 30
	maxPoints := 0
	for m := 0; m < days*24*60; m++ {
		for k := 0; k < 6; k++ {
			at := h0.Add(time.Duration(m)*time.Minute + time.Duration(k)*10*time.Second)
			h.Add("load:gpu", at, value(m)+rng.Float64()-0.5)
			h.Add("ready", at, 4)
		}
		maxPoints = max(maxPoints, h.Points())
	}
	if maxPoints > 2*MaxHistoryPoints {
		t.Fatalf("%d points for two series, bound %d", maxPoints, 2*MaxHistoryPoints)
	}
	s := h.s["load:gpu"]
	if n := len(s.fine) - s.fh; n != int(fineMinutes) {
		t.Errorf("%d 1-minute points, want %d", n, fineMinutes)
	}
	if cap(s.fine) > 2*int(fineMinutes)+600 || cap(s.coarse) > 2*MaxHistoryPoints {
		t.Errorf("backing arrays %d and %d: memory grows", cap(s.fine), cap(s.coarse))
	}
	if span := h.Span("load:gpu"); span < HistoryRetention || span > HistoryRetention+HistoryCoarseStep {
		t.Errorf("span %v, want 14 days", span)
	}
	end := h0.Add(days * 24 * time.Hour)
	// A folded stretch (5 days ago) holds 10-minute means of the minutes.
	from := end.Add(-5 * 24 * time.Hour)
	got := h.Series("load:gpu", from, from.Add(time.Hour), time.Minute)
	m0 := int(from.Sub(h0) / time.Minute)
	for slot := 0; slot < 6; slot++ {
		mean := 0.0
		for k := 0; k < 10; k++ {
			mean += value(m0 + slot*10 + k)
		}
		mean /= 10
		for k := 0; k < 10; k++ {
			if v := got[slot*10+k]; !near(v, mean, 0.2) || v != got[slot*10] {
				t.Fatalf("folded minute %d: %v, slot mean %v", slot*10+k, v, mean)
			}
		}
	}
	// The last day is at 1 minute.
	got = h.Series("load:gpu", end.Add(-time.Hour), end, time.Minute)
	for k, v := range got {
		if !near(v, value(days*24*60-60+k), 0.3) {
			t.Fatalf("recent minute %d: %v, want about %v", k, v, value(days*24*60-60+k))
		}
	}
	// Older than 14 days: the first point's value fills in.
	old := h.Series("load:gpu", h0, h0.Add(time.Minute), time.Minute)
	start := h.Newest("load:gpu").Add(-h.Span("load:gpu"))
	if first := h.Series("load:gpu", start, start.Add(time.Minute), time.Minute); old[0] != first[0] {
		t.Errorf("before the history: %v, first point %v", old[0], first[0])
	}
	if h.Points() > 2*MaxHistoryPoints {
		t.Errorf("Points() %d", h.Points())
	}
	// A sample for a folded minute is dropped.
	before := h.Points()
	h.Add("load:gpu", end.Add(-3*24*time.Hour), 1000)
	if h.Points() != before {
		t.Error("a sample older than the 1-minute window was kept")
	}
}

func TestHistoryMarshalRoundTrip(t *testing.T) {
	h := fullHistory(14, 3)
	h.Add("custom:queue", h0.Add(time.Hour), 17)
	b, err := h.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("14-day history of %d points: %d bytes", h.Points(), len(b))
	var r History
	if err := r.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	if r.Points() != h.Points() {
		t.Fatalf("points %d, want %d", r.Points(), h.Points())
	}
	end := h0.Add(14 * 24 * time.Hour)
	for _, name := range h.Names() {
		a := h.Series(name, h0, end, time.Minute)
		c := r.Series(name, h0, end, time.Minute)
		am, cm := h.SeriesMax(name, h0, end, time.Minute), r.SeriesMax(name, h0, end, time.Minute)
		for i := range a {
			if a[i] != c[i] || am[i] != cm[i] {
				t.Fatalf("%s minute %d: %v/%v after the round trip, want %v/%v", name, i, c[i], cm[i], a[i], am[i])
			}
		}
		if h.Span(name) != r.Span(name) {
			t.Fatalf("%s span %v, want %v", name, r.Span(name), h.Span(name))
		}
	}
	b2, _ := r.MarshalBinary()
	if !bytes.Equal(b, b2) {
		t.Fatal("a second encoding differs")
	}
	// Adding after a round trip continues the series.
	r.Add("load:gpu", end, 3)
	if v, _, _ := r.Last("load:gpu"); v != 3 {
		t.Fatalf("last after add: %v", v)
	}
	// Damaged input is an error, never a panic, and leaves h as it was.
	for cut := 0; cut < len(b); cut += 1 + cut/3 {
		var x History
		if err := x.UnmarshalBinary(b[:cut]); err == nil {
			t.Fatalf("a cut at %d decoded", cut)
		}
	}
	rng := rand.New(rand.NewPCG(9, 9))
	for i := 0; i < 200; i++ {
		d := append([]byte(nil), b...)
		d[3+rng.IntN(len(d)-3)] ^= byte(1 + rng.IntN(255))
		var x History
		_ = x.UnmarshalBinary(d)
	}
	keep := r.Points()
	if err := r.UnmarshalBinary([]byte("GH\x09")); err == nil || r.Points() != keep {
		t.Fatalf("version: %v, points %d", err, r.Points())
	}
	var empty History
	eb, _ := NewHistory().MarshalBinary()
	if err := empty.UnmarshalBinary(eb); err != nil || empty.Points() != 0 {
		t.Fatal(err)
	}
}

// fullHistory is what the controller would have saved after days of
// 10-second steps: load:gpu, load:cpu and ready, with a daily cycle
// (one sample per minute here, as the minute means are what is kept).
func fullHistory(days int, seed uint64) *History {
	h := NewHistory()
	s := Synthetic(SyntheticConfig{Start: h0, Steps: days * 24 * 60, Seed: seed})
	for i, v := range s.GPUs {
		at := s.Time(i)
		load := v / 8 * 0.7
		h.Add("load:gpu", at, load)
		h.Add("load:cpu", at, load*0.6)
		h.Add("ready", at, math.Ceil(v/8))
	}
	return h
}
