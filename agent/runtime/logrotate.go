package runtime

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Rotated logs. A workload's log is the file at its path, and once that
// holds its size the file is renamed PATH.<offset> (rotated) and a new one
// begun; of the rotated files only the newest are kept, so the log never
// takes more than size × files on disk. <offset> is where the rotated
// file's first byte lies in all the output the workload ever wrote, so a
// reader's offsets (the agent ships from an offset) count that output and
// stay valid across rotations; output rotated away before it was read is
// skipped.

// RotatingLog writes a log that rotates. It is not safe for concurrent
// use.
type RotatingLog struct {
	path  string
	max   int64
	files int
	f     *os.File
	base  int64 // offset of the current file's first byte
	size  int64 // bytes in the current file
}

// OpenRotatingLog opens the log at path to append to it, in files of at
// most max bytes, files of them in all: the current one and at least one
// rotated one, whose name keeps the offsets counting across a reopening.
func OpenRotatingLog(path string, max int64, files int) (*RotatingLog, error) {
	if max <= 0 || files < 2 {
		return nil, fmt.Errorf("rotating log %s: size %d, %d files: %w", path, max, files, ErrInvalid)
	}
	l := &RotatingLog{path: path, max: max, files: files}
	rot, err := rotated(path)
	if err != nil {
		return nil, err
	}
	if n := len(rot); n > 0 {
		fi, err := os.Stat(rotatedName(path, rot[n-1]))
		if err != nil {
			return nil, err
		}
		l.base = rot[n-1] + fi.Size()
	}
	if err := l.open(); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *RotatingLog) open() error {
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	l.f, l.size = f, fi.Size()
	return nil
}

// Write appends p, rotating the file as it fills.
func (l *RotatingLog) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		if l.size >= l.max {
			if err := l.rotate(); err != nil {
				return written, err
			}
		}
		n, err := l.f.Write(p[:min(int64(len(p)), l.max-l.size)])
		l.size += int64(n)
		written += n
		p = p[n:]
		if err != nil {
			return written, err
		}
	}
	return written, nil
}

// rotate renames the current file after its offset, starts a new one and
// removes the rotated files beyond the count.
func (l *RotatingLog) rotate() error {
	if err := l.f.Close(); err != nil {
		return err
	}
	if err := os.Rename(l.path, rotatedName(l.path, l.base)); err != nil {
		return err
	}
	l.base += l.size
	// The oldest go before the new file is made: never more files than
	// the count.
	rot, err := rotated(l.path)
	if err != nil {
		return err
	}
	for len(rot) > l.files-1 {
		if err := os.Remove(rotatedName(l.path, rot[0])); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		rot = rot[1:]
	}
	return l.open()
}

// Close closes the current file.
func (l *RotatingLog) Close() error { return l.f.Close() }

func rotatedName(path string, off int64) string { return path + "." + strconv.FormatInt(off, 10) }

// rotated lists the offsets of the rotated files of the log at path, in
// order.
func rotated(path string) ([]int64, error) {
	entries, err := os.ReadDir(filepath.Dir(path))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	prefix := filepath.Base(path) + "."
	var offs []int64
	for _, e := range entries {
		if s, ok := strings.CutPrefix(e.Name(), prefix); ok {
			if off, err := strconv.ParseInt(s, 10, 64); err == nil && off >= 0 && strconv.FormatInt(off, 10) == s {
				offs = append(offs, off)
			}
		}
	}
	slices.Sort(offs)
	return offs, nil
}

// segment is one file of a log: its name and where it lies in the output.
type segment struct {
	name        string
	start, size int64
}

// segments lists the files of the log at path, oldest first; the last is
// the current file (absent: size 0).
func segments(path string) ([]segment, error) {
	for range 5 {
		rot, err := rotated(path)
		if err != nil {
			return nil, err
		}
		var segs []segment
		next := int64(0)
		ok := true
		for _, off := range rot {
			fi, err := os.Stat(rotatedName(path, off))
			if err != nil {
				ok = false // removed meanwhile: look again
				break
			}
			segs = append(segs, segment{rotatedName(path, off), off, fi.Size()})
			next = off + fi.Size()
		}
		cur := segment{name: path, start: next}
		if fi, err := os.Stat(path); err == nil {
			cur.size = fi.Size()
		}
		again, err := rotated(path)
		if err != nil {
			return nil, err
		}
		if ok && slices.Equal(rot, again) {
			return append(segs, cur), nil
		}
	}
	return nil, errors.New("the log rotates too fast to read")
}

// ReadLogFile reads the log at path, rotated or not, from offset on: at
// most MaxLogChunk bytes, and the offset to ask for next. An offset
// before the oldest file kept reads from its start (the output between was
// rotated away); one at or past the end returns no data and the end. A
// log not written yet is empty.
func ReadLogFile(path string, offset int64) ([]byte, int64, error) {
	if offset < 0 {
		return nil, 0, fmt.Errorf("log offset %d: %w", offset, ErrInvalid)
	}
list:
	for range 5 {
		segs, err := segments(path)
		if err != nil {
			return nil, 0, err
		}
		offset = max(offset, segs[0].start)
		for _, sg := range segs {
			if offset >= sg.start+sg.size && sg.name != path {
				continue
			}
			f, err := os.Open(sg.name)
			if errors.Is(err, fs.ErrNotExist) {
				if sg.name == path {
					// Not written yet, or renamed by a rotation and not
					// made again yet: nothing more to read for now (the
					// reader's offset stays; sg.start may be behind it).
					return nil, offset, nil
				}
				break // rotated away meanwhile: list again
			}
			if err != nil {
				return nil, 0, err
			}
			if sg.name == path {
				// A rotation between the listing and the open makes path
				// a new file, which starts later than sg says. Every
				// rotation adds a rotated file named after a larger
				// offset (a file's identity would not tell: the inode of
				// a removed file is given to the next one), so the same
				// list after the open means none happened; else list
				// again.
				if now, err := rotated(path); err != nil || !sameRotated(now, segs[:len(segs)-1]) {
					f.Close()
					continue list
				}
			}
			data, next, err := ReadLog(f, offset-sg.start)
			f.Close()
			if err != nil {
				return nil, 0, err
			}
			return data, sg.start + next, nil
		}
	}
	return nil, 0, errors.New("the log rotates too fast to read")
}

// sameRotated reports whether offs are the offsets of the rotated
// segments segs.
func sameRotated(offs []int64, segs []segment) bool {
	return slices.EqualFunc(offs, segs, func(o int64, s segment) bool { return o == s.start })
}

// LogEnd is the offset after the last byte of the log at path.
func LogEnd(path string) (int64, error) {
	segs, err := segments(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return 0, nil
		}
		return 0, err
	}
	last := segs[len(segs)-1]
	return last.start + last.size, nil
}

var _ io.WriteCloser = (*RotatingLog)(nil)
