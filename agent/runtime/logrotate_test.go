package runtime

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// readAll reads the log at path from off on, as the agent ships it.
func readAll(t *testing.T, path string, off int64) ([]byte, int64) {
	t.Helper()
	var out []byte
	for range 10000 {
		b, next, err := ReadLogFile(path, off)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b...)
		if next == off {
			break
		}
		off = next
	}
	return out, off
}

// diskUse sums the sizes of the log's files.
func diskUse(t *testing.T, path string) (total int64, files int) {
	t.Helper()
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		total += fi.Size()
		files++
	}
	return total, files
}

// TestRotatingLog: the log never takes more than size × files on disk;
// a reader that keeps up gets every byte in order across rotations; one
// that falls behind resumes at the oldest byte kept; offsets count all the
// output ever written, also when the log is opened again.
func TestRotatingLog(t *testing.T) {
	for _, c := range []struct {
		name        string
		max         int64
		files       int
		writes      []int // sizes of the writes
		readEvery   int   // read after every n writes (0: only at the end)
		wantAllRead bool
	}{
		{"small writes, reader keeps up", 100, 3, repeat(7, 200), 1, true},
		{"writes of a few files", 100, 3, []int{250, 30, 40, 1}, 1, true},
		{"a write larger than the cap", 100, 2, []int{30, 999, 1}, 1, false},
		{"reader falls behind", 100, 2, repeat(30, 40), 0, false},
		{"nothing written", 100, 3, nil, 0, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "i-1.log")
			if b, next, err := ReadLogFile(path, 0); err != nil || len(b) != 0 || next != 0 {
				t.Fatalf("a log not written yet: %q, %d, %v", b, next, err)
			}
			l, err := OpenRotatingLog(path, c.max, c.files)
			if err != nil {
				t.Fatal(err)
			}
			var all, got []byte
			var off int64
			for i, n := range c.writes {
				p := bytes.Repeat([]byte{byte('a' + i%26)}, n)
				p = append(p[:0:0], fmt.Appendf(nil, "%d:", i)...)
				p = append(p, bytes.Repeat([]byte{byte('a' + i%26)}, n)...)
				if w, err := l.Write(p); err != nil || w != len(p) {
					t.Fatalf("write %d: %d, %v", i, w, err)
				}
				all = append(all, p...)
				if use, files := diskUse(t, path); use > c.max*int64(c.files) || files > c.files {
					t.Fatalf("after write %d: %d bytes in %d files, cap %d in %d", i, use, files, c.max*int64(c.files), c.files)
				}
				if c.readEvery > 0 && (i+1)%c.readEvery == 0 {
					b, next := readAll(t, path, off)
					got, off = append(got, b...), next
				}
			}
			b, next := readAll(t, path, off)
			got, off = append(got, b...), next
			if off != int64(len(all)) {
				t.Errorf("the reader ends at %d, want %d (all the output ever written)", off, len(all))
			}
			if end, err := LogEnd(path); err != nil || end != int64(len(all)) {
				t.Errorf("LogEnd = %d, %v; want %d", end, err, len(all))
			}
			if c.wantAllRead && !bytes.Equal(got, all) {
				t.Errorf("read %q, want %q", got, all)
			}
			if !c.wantAllRead && !bytes.HasSuffix(all, got[len(got)-min(len(got), 50):]) {
				t.Errorf("behind, read %d bytes %q: want the last ones written, at most the cap", len(got), got)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			// Opened again (a new run of the instance), offsets go on.
			l, err = OpenRotatingLog(path, c.max, c.files)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := l.Write([]byte("more")); err != nil {
				t.Fatal(err)
			}
			l.Close()
			if b, next := readAll(t, path, off); string(b) != "more" || next != off+4 {
				t.Errorf("after reopening: %q up to %d, want %q up to %d", b, next, "more", off+4)
			}
		})
	}
	for _, bad := range []struct {
		max   int64
		files int
	}{{0, 3}, {100, 1}} {
		if _, err := OpenRotatingLog(filepath.Join(t.TempDir(), "x.log"), bad.max, bad.files); !errors.Is(err, ErrInvalid) {
			t.Errorf("%d bytes in %d files: %v, want invalid", bad.max, bad.files, err)
		}
	}
	if _, _, err := ReadLogFile(filepath.Join(t.TempDir(), "x.log"), -1); !errors.Is(err, ErrInvalid) {
		t.Errorf("a negative offset: %v", err)
	}
}

func repeat(n, times int) []int {
	out := make([]int, times)
	for i := range out {
		out[i] = n
	}
	return out
}

// TestReadLogWhileRotating: a reader concurrent with a writer that rotates
// often gets, in every chunk, the bytes at the offsets the chunk claims,
// and never goes back: neither a rotation between its listing of the
// files and its open of the current one, nor the moment between a
// rotation's rename and the new file, may read as an earlier offset.
// (Going back made a log shipper send 381 lines twice under CI's load.)
func TestReadLogWhileRotating(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.log")
	l, err := OpenRotatingLog(path, 4096, 3)
	if err != nil {
		t.Fatal(err)
	}
	const lines, width = 20000, 15
	line := func(i int) string { return fmt.Sprintf("line-%09d\n", i) }
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range lines {
			if _, err := l.Write([]byte(line(i))); err != nil {
				t.Error(err)
				return
			}
			if i%100 == 99 {
				time.Sleep(50 * time.Microsecond) // a workload's bursts
			}
		}
	}()
	t.Cleanup(func() { <-done })
	var off int64
	for finished := false; !finished; {
		select {
		case <-done:
			finished = true
		default:
		}
		for {
			b, next, err := ReadLogFile(path, off)
			if err != nil {
				t.Fatal(err)
			}
			if next < off {
				t.Fatalf("the reader went back from %d to %d", off, next)
			}
			from := next - int64(len(b))
			for p := from; p < next; {
				want := line(int(p / width))[p%width:]
				want = want[:min(int64(len(want)), next-p)]
				if got := string(b[p-from : p-from+int64(len(want))]); got != want {
					t.Fatalf("bytes %d..%d read %q, want %q", p, p+int64(len(want)), got, want)
				}
				p += int64(len(want))
			}
			off = next
			if len(b) == 0 {
				break
			}
		}
	}
	if off != lines*width {
		t.Errorf("the reader ends at %d, want %d", off, lines*width)
	}
}
