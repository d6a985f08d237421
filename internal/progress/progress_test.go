package progress

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestNewIsQuietWhenNotATerminal(t *testing.T) {
	var buf bytes.Buffer
	b := New(&buf, "replay", 100)
	for i := 0; i < 1000; i++ {
		b.Add(1)
	}
	b.Done()
	if buf.Len() != 0 {
		t.Errorf("New on a bytes.Buffer wrote %q", buf.String())
	}

	// A regular file is an *os.File but not a terminal.
	f, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b = New(f, "replay", 100)
	b.Add(100)
	b.Done()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() != 0 {
		t.Errorf("New on a regular file wrote %d bytes", st.Size())
	}
}

func TestNewForceDraws(t *testing.T) {
	var buf bytes.Buffer
	b := NewForce(&buf, "replay default [fgd seed 42]", 10)
	b.Add(5) // The first Add draws at once so a slow run shows something.
	first := buf.String()
	const wantFirst = "\rreplay default [fgd seed 42]  [===============>              ]  50%  5/10  "
	if !strings.HasPrefix(first, wantFirst) || !strings.HasSuffix(first, "s") {
		t.Errorf("first frame\n got %q\nwant %q + elapsed", first, wantFirst)
	}
	b.Add(5)
	b.Done()
	out := buf.String()
	if !strings.HasSuffix(out, "\n") {
		t.Errorf("Done did not end the line: %q", out)
	}
	last := out[strings.LastIndexByte(out, '\r'):]
	const wantLast = "\rreplay default [fgd seed 42]  [==============================] 100%  10/10  "
	if !strings.HasPrefix(last, wantLast) {
		t.Errorf("final frame\n got %q\nwant %q + elapsed", last, wantLast)
	}
	if strings.Contains(out, "\x1b") {
		t.Errorf("escape sequences written to a non-terminal: %q", out)
	}

	// Done is idempotent and Add after Done draws nothing.
	n := buf.Len()
	b.Done()
	b.Add(1)
	if buf.Len() != n {
		t.Errorf("output after Done: %q", buf.String()[n:])
	}
}

func TestRateLimited(t *testing.T) {
	var buf bytes.Buffer
	b := NewForce(&buf, "x", 1_000_000)
	start := time.Now()
	for i := 0; i < 200_000; i++ {
		b.Add(1)
	}
	elapsed := time.Since(start)
	frames := strings.Count(buf.String(), "\r")
	if limit := int(elapsed/redrawEvery) + 2; frames > limit {
		t.Errorf("%d frames in %v, want at most %d", frames, elapsed, limit)
	}
}

// TestLargeRareAdds checks that a loop adding big chunks rarely still
// redraws: the clock is read on progress, not only every checkEvery calls.
func TestLargeRareAdds(t *testing.T) {
	var buf bytes.Buffer
	b := NewForce(&buf, "x", 100)
	b.Add(10)
	time.Sleep(redrawEvery + 10*time.Millisecond)
	b.Add(10)
	if got := strings.Count(buf.String(), "\r"); got != 2 {
		t.Errorf("got %d frames, want 2: %q", got, buf.String())
	}
}

func TestConcurrentAdd(t *testing.T) {
	var buf bytes.Buffer
	const workers, each = 8, 5000
	b := NewForce(&buf, "par", workers*each)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				b.Add(1)
			}
		}()
	}
	wg.Wait()
	b.Done()
	if !strings.Contains(buf.String(), "100%  40000/40000") {
		t.Errorf("final frame missing: %q", buf.String())
	}
}

func TestUnknownTotal(t *testing.T) {
	var buf bytes.Buffer
	b := NewForce(&buf, "scan", 0)
	b.Add(7)
	b.Done()
	if out := buf.String(); !strings.HasPrefix(out, "\rscan  7  ") || strings.Contains(out, "[") {
		t.Errorf("got %q", out)
	}
}

func TestNarrowTerminalShortensLabel(t *testing.T) {
	var buf bytes.Buffer
	b := NewForce(&buf, "a very long label that does not fit", 10)
	b.width = 60 // as New would set from the terminal size
	b.Done()
	out := strings.TrimSuffix(buf.String(), "\n")
	frame := strings.TrimSuffix(strings.TrimPrefix(out, "\r"), "\x1b[K")
	if len(frame) > 60 {
		t.Errorf("frame is %d columns, want at most 60: %q", len(frame), frame)
	}
	if !strings.Contains(frame, "0/10") || !strings.HasPrefix(frame, "a very") {
		t.Errorf("the numbers should survive and the label be cut: %q", frame)
	}
	if !strings.HasSuffix(out, "\x1b[K") {
		t.Errorf("terminal frames should clear to end of line: %q", out)
	}
}

func TestFormatElapsed(t *testing.T) {
	for d, want := range map[time.Duration]string{
		1200 * time.Millisecond:       "1.2s",
		59940 * time.Millisecond:      "59.9s",
		3*time.Minute + 7*time.Second: "3m07s",
		62 * time.Minute:              "1h02m",
	} {
		if got := formatElapsed(d); got != want {
			t.Errorf("formatElapsed(%v) = %q, want %q", d, got, want)
		}
	}
}

func BenchmarkAddDisabled(b *testing.B) {
	var buf bytes.Buffer
	bar := New(&buf, "x", b.N)
	for b.Loop() {
		bar.Add(1)
	}
}

func BenchmarkAddEnabled(b *testing.B) {
	var buf bytes.Buffer
	bar := NewForce(&buf, "x", 1<<40)
	b.ReportAllocs()
	for b.Loop() {
		bar.Add(1)
	}
}
