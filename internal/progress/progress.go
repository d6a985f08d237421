// Package progress draws a single-line progress bar for long command-line
// runs such as trace replays. It stays silent when output is not a terminal,
// so logs and CI output are not filled with carriage returns.
package progress

import (
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/term"
)

const (
	// redrawEvery is the minimum time between redraws; faster updates
	// only cost terminal bandwidth without being readable.
	redrawEvery = 100 * time.Millisecond
	// checkEvery is how many Add calls pass between clock reads. Add runs
	// in hot loops, so most calls do only two atomic adds.
	checkEvery = 16
	// checkFraction also triggers a clock read whenever progress has moved
	// by 1/checkFraction of the total since the last one, so a loop that
	// adds big chunks rarely still redraws promptly.
	checkFraction = 200
	// barWidth is the number of cells inside the brackets.
	barWidth = 30
)

// Bar is a progress bar. The zero value is not usable; use New or NewForce.
type Bar struct {
	// enabled is false for a bar that never draws, making every method a
	// single branch and no more.
	enabled bool

	n         atomic.Int64 // progress so far
	calls     atomic.Uint32
	nextCheck atomic.Int64 // progress at which Add reads the clock regardless of calls
	lastDraw  atomic.Int64 // nanoseconds since start of the last draw; -1 before the first

	mu    sync.Mutex // serialises drawing and guards the fields below
	w     io.Writer
	label string
	total int64
	start time.Time
	width int // terminal columns, 0 when unknown
	done  bool
	tail  []byte // reused for the part of a frame after the label
	frame []byte // reused for the whole frame
}

// New returns a bar that draws on w only when w is an *os.File attached to a
// terminal; otherwise every method is a no-op.
func New(w io.Writer, label string, total int) *Bar {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return &Bar{}
	}
	b := newBar(w, label, total)
	if cols, _, err := term.GetSize(int(f.Fd())); err == nil && cols > 0 {
		// Writing past the last column would wrap, and "\r" then only
		// rewinds the last physical line, leaving a trail of frames.
		b.width = cols - 1
	}
	return b
}

// NewForce returns a bar that draws on w whether or not it is a terminal,
// for tests and for callers that know better.
func NewForce(w io.Writer, label string, total int) *Bar {
	return newBar(w, label, total)
}

func newBar(w io.Writer, label string, total int) *Bar {
	b := &Bar{enabled: true, w: w, label: label, total: int64(total), start: time.Now()}
	b.lastDraw.Store(-1)
	return b
}

// Add records n more units of progress. It is safe for concurrent use and
// cheap enough to call once per item in a hot loop.
func (b *Bar) Add(n int) {
	if !b.enabled {
		return
	}
	cur := b.n.Add(int64(n))
	if b.calls.Add(1)%checkEvery != 0 && cur < b.nextCheck.Load() {
		return
	}
	if b.total > 0 {
		b.nextCheck.Store(cur + max(b.total/checkFraction, 1))
	}
	elapsed := int64(time.Since(b.start))
	if last := b.lastDraw.Load(); last >= 0 && elapsed-last < int64(redrawEvery) {
		return
	}
	// Another goroutine already drawing will show nearly the same state,
	// so there is no point waiting for it.
	if !b.mu.TryLock() {
		return
	}
	defer b.mu.Unlock()
	// Re-check under the lock: another goroutine may have drawn between
	// the clock check above and acquiring the lock.
	if last := b.lastDraw.Load(); b.done || (last >= 0 && elapsed-last < int64(redrawEvery)) {
		return
	}
	b.lastDraw.Store(elapsed)
	b.draw(time.Duration(elapsed))
}

// Done draws the final state followed by a newline, leaving the bar on
// screen. Later calls to Add and Done do nothing.
func (b *Bar) Done() {
	if !b.enabled {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return
	}
	b.done = true
	b.draw(time.Since(b.start))
	b.w.Write([]byte{'\n'})
}

// draw writes one frame. The caller holds b.mu.
func (b *Bar) draw(elapsed time.Duration) {
	cur := b.n.Load()
	// The part after the label is built first so that a narrow terminal
	// shortens the label rather than the numbers, which matter more.
	tail := b.tail[:0]
	if b.total > 0 {
		frac := min(max(float64(cur)/float64(b.total), 0), 1)
		tail = append(tail, "  ["...)
		tail = appendBar(tail, frac)
		tail = fmt.Appendf(tail, "] %3d%%  %d/%d", int(frac*100), cur, b.total)
	} else {
		// Without a total there is nothing to fill; show the count only.
		tail = fmt.Appendf(tail, "  %d", cur)
	}
	tail = append(tail, "  "...)
	tail = append(tail, formatElapsed(elapsed)...)
	label := b.label
	if b.width > 0 && len(label)+len(tail) > b.width {
		// Byte-based cutting is fine: labels are ASCII in practice, and a
		// cut rune only garbles the label, never the layout.
		label = label[:max(b.width-len(tail), 0)]
	}
	line := append(b.frame[:0], '\r')
	line = append(line, label...)
	line = append(line, tail...)
	// "\x1b[K" clears what a longer previous frame left behind. Only real
	// terminals (width known) get it, since only they redraw in place.
	if b.width > 0 {
		line = append(line, "\x1b[K"...)
	}
	b.tail, b.frame = tail, line
	b.w.Write(line)
}

// bars are sliced rather than built to keep drawing allocation-free.
const (
	barFull  = "=============================="
	barEmpty = "                              "
)

// appendBar renders frac as "=====>     " across barWidth cells.
func appendBar(dst []byte, frac float64) []byte {
	filled := int(frac * barWidth)
	switch {
	case filled >= barWidth:
		return append(dst, barFull[:barWidth]...)
	case frac == 0:
		return append(dst, barEmpty[:barWidth]...)
	}
	dst = append(dst, barFull[:filled]...)
	dst = append(dst, '>')
	return append(dst, barEmpty[:barWidth-filled-1]...)
}

// formatElapsed prints durations as "1.2s" below a minute and "3m07s" or
// "1h02m" beyond, keeping the frame short.
func formatElapsed(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
}

// Bytes prints n in binary units: "512 B", "1.5 KiB", "2.0 GiB".
func Bytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
