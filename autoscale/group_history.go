package autoscale

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"time"
)

// History resolution and retention.
const (
	// HistoryFine is how long 1-minute points are kept: the last two
	// days before the newest sample of a series.
	HistoryFine = 48 * time.Hour
	// HistoryCoarseStep is the step of the points older than HistoryFine:
	// 10-minute slots aligned to the UTC clock (:00, :10, ...).
	HistoryCoarseStep = 10 * time.Minute
	// HistoryRetention is how far back a series reaches: 14 days before
	// its newest sample. Older points are dropped.
	HistoryRetention = 14 * 24 * time.Hour

	fineMinutes   = int32(HistoryFine / time.Minute)
	coarseMinutes = int32(HistoryCoarseStep / time.Minute)
	keepMinutes   = int32(HistoryRetention / time.Minute)
	// MaxHistoryPoints bounds Points per series: 2,880 1-minute points,
	// 1,728 10-minute points, and a partly folded slot at each end.
	MaxHistoryPoints = int(fineMinutes + (keepMinutes-fineMinutes)/coarseMinutes + 2)
)

// History is a bounded per-group metric history: enough for 14 days at
// 1-minute resolution, folded down as it ages, so that memory stays flat.
//
// Each series (any name: "load:gpu", "load:cpu", "ready", "custom:queue")
// keeps one point per minute for HistoryFine (two days) before its newest
// sample: the mean of the samples of that minute and their maximum. A
// minute older than that is folded into its 10-minute slot (the mean of
// the minutes seen in the slot, and their maximum), and slots older than
// HistoryRetention (14 days) are dropped. A series never holds more than
// MaxHistoryPoints points (4,610), about 74 KiB in memory.
//
// Values are kept as float32 (seven significant digits). Times are whole
// UTC minutes; a sample's minute is its time truncated to the minute.
// History is not safe for concurrent use; the zero value is not usable
// (use NewHistory).
type History struct {
	s map[string]*hseries
}

// hpoint is one point: a minute (fine) or a 10-minute slot (coarse).
type hpoint struct {
	t    int32  // unix minute of the point's start
	n    uint16 // samples (fine) or minutes (coarse) folded into it
	mean float32
	max  float32
}

// hseries holds the points of one series, oldest first: coarse points,
// all older than the fine ones. Both are deques: live points start at the
// head index.
type hseries struct {
	fine, coarse []hpoint
	fh, ch       int
}

// NewHistory returns an empty history.
func NewHistory() *History { return &History{s: map[string]*hseries{}} }

// unixMinute is t's minute since the epoch (floor).
func unixMinute(t time.Time) int64 {
	s := t.Unix()
	if s < 0 {
		return (s - 59) / 60
	}
	return s / 60
}

func minuteTime(m int64) time.Time { return time.Unix(m*60, 0).UTC() }

// clampMinute keeps a minute in int32's range (years 1 to 6053).
func clampMinute(m int64) int32 {
	return int32(max(math.MinInt32+1, min(m, math.MaxInt32-1)))
}

// Add records a sample of series name at t. Samples within one minute are
// averaged, and their maximum is kept. A sample for a minute already
// folded (older than two days before the series' newest sample) is
// dropped; NaN and infinite values are dropped.
func (h *History) Add(name string, t time.Time, v float64) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return
	}
	if h.s == nil {
		h.s = map[string]*hseries{}
	}
	s := h.s[name]
	if s == nil {
		s = &hseries{}
		h.s[name] = s
	}
	s.add(clampMinute(unixMinute(t)), float32(v))
}

func (s *hseries) add(m int32, v float32) {
	live := s.fine[s.fh:]
	if n := len(live); n == 0 || m > live[n-1].t {
		if n == 0 && s.ch < len(s.coarse) && m < s.coarse[len(s.coarse)-1].t+coarseMinutes {
			return // older than what is already folded
		}
		s.fine = append(s.fine, hpoint{t: m, n: 1, mean: v, max: v})
		s.fold(m)
		return
	}
	newest := live[len(live)-1].t
	if m <= newest-fineMinutes {
		return
	}
	i := sort.Search(len(live), func(i int) bool { return live[i].t >= m })
	if i < len(live) && live[i].t == m {
		merge(&live[i], v)
		return
	}
	// A late sample for a minute with none: insert it in order.
	at := s.fh + i
	s.fine = append(s.fine, hpoint{})
	copy(s.fine[at+1:], s.fine[at:])
	s.fine[at] = hpoint{t: m, n: 1, mean: v, max: v}
}

// merge adds one sample (or one minute) to a point.
func merge(p *hpoint, v float32) {
	if p.n < math.MaxUint16 {
		p.n++
	}
	p.mean += (v - p.mean) / float32(p.n)
	p.max = max(p.max, v)
}

// fold moves the minutes older than HistoryFine before newest into their
// 10-minute slots and drops slots older than HistoryRetention.
func (s *hseries) fold(newest int32) {
	for s.fh < len(s.fine) && s.fine[s.fh].t <= newest-fineMinutes {
		p := s.fine[s.fh]
		s.fh++
		slot := floorDiv32(p.t, coarseMinutes) * coarseMinutes
		if k := len(s.coarse); k > s.ch && s.coarse[k-1].t == slot {
			c := &s.coarse[k-1]
			if c.n < math.MaxUint16 {
				c.n++
			}
			c.mean += (p.mean - c.mean) / float32(c.n)
			c.max = max(c.max, p.max)
			continue
		}
		s.coarse = append(s.coarse, hpoint{t: slot, n: 1, mean: p.mean, max: p.max})
	}
	for s.ch < len(s.coarse) && s.coarse[s.ch].t+coarseMinutes <= newest-keepMinutes {
		s.ch++
	}
	s.fine, s.fh = compact(s.fine, s.fh)
	s.coarse, s.ch = compact(s.coarse, s.ch)
}

// compact drops a deque's dead head once it is large, so that the backing
// array stays within about twice the live points.
func compact(p []hpoint, head int) ([]hpoint, int) {
	if head == 0 || head < 256 && head*2 < len(p) {
		return p, head
	}
	n := copy(p, p[head:])
	return p[:n], 0
}

func floorDiv32(a, b int32) int32 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// segment i of the series: coarse points first, then fine ones, each
// covering [a, b) in unix minutes. A coarse slot ends where the first fine
// minute begins if that is earlier.
func (s *hseries) nseg() int { return len(s.coarse) - s.ch + len(s.fine) - s.fh }

func (s *hseries) seg(i int, useMax bool) (a, b int64, v float64) {
	nc := len(s.coarse) - s.ch
	var p hpoint
	if i < nc {
		p = s.coarse[s.ch+i]
		a, b = int64(p.t), int64(p.t+coarseMinutes)
		if s.fh < len(s.fine) {
			b = min(b, int64(s.fine[s.fh].t))
		}
	} else {
		p = s.fine[s.fh+i-nc]
		a, b = int64(p.t), int64(p.t)+1
	}
	v = float64(p.mean)
	if useMax {
		v = float64(p.max)
	}
	return a, b, v
}

// minutes fills out[k] with the value of minute from+k: the minute's
// point, its 10-minute slot's, or the last value before it (carried
// forward over gaps); minutes before the first point take the first
// point's value. It reports false when the series has no point.
func (s *hseries) minutes(from int64, out []float64, useMax bool) bool {
	n := s.nseg()
	if n == 0 {
		return false
	}
	to := from + int64(len(out))
	i := sort.Search(n, func(i int) bool { _, b, _ := s.seg(i, false); return b > from })
	// Carried into a gap: the last value before it, or before the first
	// point, the first point's.
	var carry float64
	if i > 0 {
		_, _, carry = s.seg(i-1, useMax)
	} else {
		_, _, carry = s.seg(0, useMax)
	}
	cur := from
	for ; i < n && cur < to; i++ {
		a, b, v := s.seg(i, useMax)
		if a >= to {
			break
		}
		for ; cur < a; cur++ {
			out[cur-from] = carry
		}
		for ; cur < min(b, to); cur++ {
			out[cur-from] = v
		}
		carry = v
	}
	for ; cur < to; cur++ {
		out[cur-from] = carry
	}
	return true
}

// Bounds of a Series call: longer ranges or more steps return nil.
const (
	maxSeriesRange = 100 * 365 * 24 * time.Hour
	maxSeriesSteps = 10_000_000
)

// Series returns the values of name over [from, to) at step: one value
// per step starting at from, len ceil((to-from)/step). A step of a minute
// or less gives each time the value of its minute; a longer step gives
// the mean of the minutes in it. A minute's value is its 1-minute mean;
// a folded minute takes its 10-minute slot's mean; a minute with no point
// carries the last value before it forward, and minutes before the first
// point take the first point's value. Series returns nil when name has no
// point, the range is empty, longer than 100 years or more than ten
// million steps.
func (h *History) Series(name string, from, to time.Time, step time.Duration) []float64 {
	return h.series(name, from, to, step, false)
}

// SeriesMax is Series over the maxima: each minute's highest sample (a
// folded minute's: its slot's highest), and the highest of the minutes of
// a step longer than a minute.
func (h *History) SeriesMax(name string, from, to time.Time, step time.Duration) []float64 {
	return h.series(name, from, to, step, true)
}

func (h *History) series(name string, from, to time.Time, step time.Duration, useMax bool) []float64 {
	s := h.s[name]
	if s == nil || !to.After(from) || step <= 0 || s.nseg() == 0 || to.Sub(from) > maxSeriesRange {
		return nil
	}
	n64 := (int64(to.Sub(from)) + int64(step) - 1) / int64(step)
	if n64 > maxSeriesSteps {
		return nil
	}
	n := int(n64)
	out := make([]float64, n)
	// Only the minutes the series covers are materialized: before them
	// every minute has the first point's value, after them the last's.
	first, _, firstV := s.seg(0, useMax)
	_, last, lastV := s.seg(s.nseg()-1, useMax)
	m0 := unixMinute(from)
	m1 := unixMinute(to.Add(-time.Nanosecond)) + 1
	lo, hi := max(m0, first), min(m1, last)
	var mins []float64
	if lo < hi {
		mins = make([]float64, hi-lo)
		s.minutes(lo, mins, useMax)
	}
	val := func(m int64) float64 {
		switch {
		case m < lo:
			return firstV
		case m >= hi:
			return lastV
		}
		return mins[m-lo]
	}
	for k := range out {
		a := unixMinute(from.Add(time.Duration(k) * step))
		if step <= time.Minute {
			out[k] = val(a)
			continue
		}
		b := min(unixMinute(from.Add(time.Duration(k+1)*step).Add(-time.Nanosecond))+1, m1)
		acc := val(a)
		for m := a + 1; m < b; m++ {
			if useMax {
				acc = max(acc, val(m))
			} else {
				acc += val(m)
			}
		}
		if !useMax && b > a {
			acc /= float64(b - a)
		}
		out[k] = acc
	}
	return out
}

// Last returns the newest minute's mean of name and the minute's start;
// ok is false when name has no point.
func (h *History) Last(name string) (v float64, at time.Time, ok bool) {
	s := h.s[name]
	if s == nil {
		return 0, time.Time{}, false
	}
	if k := len(s.fine); k > s.fh {
		p := s.fine[k-1]
		return float64(p.mean), minuteTime(int64(p.t)), true
	}
	if k := len(s.coarse); k > s.ch {
		p := s.coarse[k-1]
		return float64(p.mean), minuteTime(int64(p.t)), true
	}
	return 0, time.Time{}, false
}

// Span is how much history name has: from the start of its oldest point
// to the end of its newest minute (0 when it has none).
func (h *History) Span(name string) time.Duration {
	s := h.s[name]
	if s == nil || s.nseg() == 0 {
		return 0
	}
	a, _, _ := s.seg(0, false)
	_, b, _ := s.seg(s.nseg()-1, false)
	return time.Duration(b-a) * time.Minute
}

// Newest is the end of name's newest minute (zero when it has none).
func (h *History) Newest(name string) time.Time {
	s := h.s[name]
	if s == nil || s.nseg() == 0 {
		return time.Time{}
	}
	_, b, _ := s.seg(s.nseg()-1, false)
	return minuteTime(b)
}

// Names lists the series, sorted.
func (h *History) Names() []string {
	out := make([]string, 0, len(h.s))
	for name := range h.s {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// Points is the number of points held over all series (at most
// MaxHistoryPoints per series).
func (h *History) Points() int {
	n := 0
	for _, s := range h.s {
		n += s.nseg()
	}
	return n
}

// The binary form: "GH" and a version byte, then the body, raw (version
// 1) or compressed with DEFLATE (version 2, what MarshalBinary writes).
// The body is a uvarint series count, then per series in name order:
// uvarint name length, name, the coarse block, the fine block.
//
// A block is a uvarint point count, then the first point's minute
// (varint) and each next one's distance from the one before (uvarint),
// the counts (uvarint each), and the values: each mean's float32 bits
// XORed with the previous mean's, and each maximum's XORed with its own
// mean's (uvarint each, so that steady values and single samples take a
// byte).
const (
	historyRaw     = 1
	historyDeflate = 2
	// maxHistoryBody bounds a decompressed body: far more than the
	// largest real history (about 40 bytes a point), so that damaged
	// input cannot make the decoder allocate without end.
	maxHistoryBody = 64 << 20
)

// MarshalBinary encodes the history compactly: a 14-day history of
// three series (13,824 points) takes about 50 KB. UnmarshalBinary
// restores it exactly.
func (h *History) MarshalBinary() ([]byte, error) {
	names := h.Names()
	body := binary.AppendUvarint(nil, uint64(len(names)))
	for _, name := range names {
		s := h.s[name]
		body = binary.AppendUvarint(body, uint64(len(name)))
		body = append(body, name...)
		body = appendBlock(body, s.coarse[s.ch:])
		body = appendBlock(body, s.fine[s.fh:])
	}
	var buf bytes.Buffer
	buf.Write([]byte{'G', 'H', historyDeflate})
	w, err := flate.NewWriter(&buf, flate.BestSpeed)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(body); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func appendBlock(buf []byte, ps []hpoint) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(ps)))
	if len(ps) == 0 {
		return buf
	}
	buf = binary.AppendVarint(buf, int64(ps[0].t))
	for i := 1; i < len(ps); i++ {
		buf = binary.AppendUvarint(buf, uint64(ps[i].t-ps[i-1].t))
	}
	for _, p := range ps {
		buf = binary.AppendUvarint(buf, uint64(p.n))
	}
	var prev uint32
	for _, p := range ps {
		b := math.Float32bits(p.mean)
		buf = binary.AppendUvarint(buf, uint64(b^prev))
		buf = binary.AppendUvarint(buf, uint64(math.Float32bits(p.max)^b))
		prev = b
	}
	return buf
}

var errHistory = errors.New("autoscale: bad history encoding")

// UnmarshalBinary replaces h with the history encoded in data. On error h
// is left as it was.
func (h *History) UnmarshalBinary(data []byte) error {
	if len(data) < 3 || data[0] != 'G' || data[1] != 'H' {
		return errHistory
	}
	body := data[3:]
	switch data[2] {
	case historyRaw:
	case historyDeflate:
		var err error
		body, err = io.ReadAll(io.LimitReader(flate.NewReader(bytes.NewReader(body)), maxHistoryBody+1))
		if err != nil || len(body) > maxHistoryBody {
			return errHistory
		}
	default:
		return fmt.Errorf("autoscale: history encoding version %d, want %d", data[2], historyDeflate)
	}
	r := &reader{b: body}
	n := r.uvarint()
	if n > uint64(len(body)) {
		return errHistory
	}
	out := map[string]*hseries{}
	for i := uint64(0); i < n && r.err == nil; i++ {
		l := r.uvarint()
		if l > uint64(len(r.b)) {
			return errHistory
		}
		name := string(r.b[:l])
		r.b = r.b[l:]
		s := &hseries{coarse: r.block(), fine: r.block()}
		if r.err != nil {
			break
		}
		if _, dup := out[name]; dup || !s.valid() {
			return errHistory
		}
		out[name] = s
	}
	if r.err != nil || len(r.b) != 0 {
		return errHistory
	}
	h.s = out
	return nil
}

// valid checks what Add relies on: ascending minutes, coarse slots
// aligned and older than the fine minutes.
func (s *hseries) valid() bool {
	for i := range s.fine {
		if i > 0 && s.fine[i].t <= s.fine[i-1].t {
			return false
		}
	}
	for i, c := range s.coarse {
		if c.t%coarseMinutes != 0 || i > 0 && c.t <= s.coarse[i-1].t {
			return false
		}
	}
	if len(s.coarse) > 0 && len(s.fine) > 0 && s.fine[0].t <= s.coarse[len(s.coarse)-1].t {
		return false
	}
	return len(s.fine) <= MaxHistoryPoints && len(s.coarse) <= MaxHistoryPoints
}

type reader struct {
	b   []byte
	err error
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, k := binary.Uvarint(r.b)
	if k <= 0 {
		r.err = errHistory
		return 0
	}
	r.b = r.b[k:]
	return v
}

func (r *reader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, k := binary.Varint(r.b)
	if k <= 0 {
		r.err = errHistory
		return 0
	}
	r.b = r.b[k:]
	return v
}

func (r *reader) block() []hpoint {
	n := r.uvarint()
	if r.err != nil || n == 0 {
		return nil
	}
	if n > uint64(MaxHistoryPoints) || n > uint64(len(r.b)) {
		r.err = errHistory
		return nil
	}
	ps := make([]hpoint, n)
	t := r.varint()
	for i := range ps {
		if i > 0 {
			t += int64(r.uvarint())
		}
		if t < math.MinInt32 || t > math.MaxInt32 {
			r.err = errHistory
			return nil
		}
		ps[i].t = int32(t)
	}
	for i := range ps {
		c := r.uvarint()
		if c == 0 || c > math.MaxUint16 {
			r.err = errHistory
			return nil
		}
		ps[i].n = uint16(c)
	}
	var prev uint32
	for i := range ps {
		b := uint32(r.uvarint()) ^ prev
		ps[i].mean = math.Float32frombits(b)
		ps[i].max = math.Float32frombits(uint32(r.uvarint()) ^ b)
		prev = b
	}
	return ps
}
