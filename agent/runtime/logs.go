package runtime

import (
	"errors"
	"io"
	"os"
)

// MaxLogChunk bounds what one Logs call returns.
const MaxLogChunk = 1 << 20

// ReadLog reads a workload's log file f from byte offset on, at most
// MaxLogChunk bytes, and returns them with the offset to ask for next: the
// one read of Runtime.Logs, for every runtime. An offset at or past the
// end returns no data and the end offset, so a reader whose file was
// truncated resumes. offset must not be negative.
func ReadLog(f *os.File, offset int64) ([]byte, int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	size := fi.Size()
	if offset >= size {
		return nil, size, nil
	}
	buf := make([]byte, min(size-offset, MaxLogChunk))
	n, err := f.ReadAt(buf, offset)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, 0, err
	}
	return buf[:n], offset + int64(n), nil
}
