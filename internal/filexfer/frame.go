// Package filexfer is the files protocol of `gpucloud volumes cp` and
// `gpucloud instances cp`: a small request/response protocol over one
// connection (the relayed session between the client and an agent), with
// file data streamed in bounded frames, so that neither end ever holds a
// whole file in memory and a slow reader slows the writer through the
// connection itself.
//
// Every frame is a type byte, a 4-byte big-endian payload length and the
// payload:
//
//	'H' header: one JSON agentapi.FileRequest or agentapi.FileResponse
//	'D' data:   file bytes, at most MaxData
//	'E' end:    the end of a data stream (empty)
//
// The client sends a request and reads its responses before the next one.
// A put's data follows the agent's ready response; a get's follows its
// first response and is followed by a trailer with the file's SHA-256.
package filexfer

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Frame types.
const (
	frameHeader = 'H'
	frameData   = 'D'
	frameEnd    = 'E'
)

// Limits of one frame's payload.
const (
	// MaxHeader bounds a header (a list's batch of entries among them).
	MaxHeader = 1 << 20
	// MaxData bounds a data frame; writers send ChunkSize.
	MaxData = 1 << 20
	// ChunkSize is the data a writer puts in one frame.
	ChunkSize = 256 << 10
)

// ErrFrame is a malformed frame: the session cannot go on.
var ErrFrame = errors.New("filexfer: malformed frame")

// frameReader reads frames from a buffered connection.
type frameReader struct {
	r   *bufio.Reader
	hdr [5]byte
	buf []byte // a data frame's bytes on their way to the writer
}

func newFrameReader(r io.Reader) *frameReader {
	return &frameReader{r: bufio.NewReaderSize(r, 64<<10), buf: make([]byte, ChunkSize)}
}

// next reads the next frame's type and length, checking the length
// against the type's limit; the payload is read with payload or header.
func (f *frameReader) next() (byte, int, error) {
	if _, err := io.ReadFull(f.r, f.hdr[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, 0, fmt.Errorf("%w: cut short", ErrFrame)
		}
		return 0, 0, err
	}
	typ, n := f.hdr[0], binary.BigEndian.Uint32(f.hdr[1:])
	switch {
	case typ == frameHeader && n <= MaxHeader, typ == frameData && n <= MaxData, typ == frameEnd && n == 0:
		return typ, int(n), nil
	case typ != frameHeader && typ != frameData && typ != frameEnd:
		return 0, 0, fmt.Errorf("%w: type %#x", ErrFrame, typ)
	default:
		return 0, 0, fmt.Errorf("%w: %c frame of %d bytes", ErrFrame, typ, n)
	}
}

// header reads a header frame into v; any other frame is an error.
func (f *frameReader) header(v any) error {
	typ, n, err := f.next()
	if err != nil {
		return err
	}
	if typ != frameHeader {
		return fmt.Errorf("%w: want a header, got a %c frame", ErrFrame, typ)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(f.r, buf); err != nil {
		return fmt.Errorf("%w: header cut short", ErrFrame)
	}
	if err := json.Unmarshal(buf, v); err != nil {
		return fmt.Errorf("%w: header: %v", ErrFrame, err)
	}
	return nil
}

// copyData copies a data stream (data frames up to an end frame) to w,
// at most limit bytes, and returns how many it copied. err is the
// stream's error (the session cannot go on; a stream longer than limit is
// ErrFrame); werr is w's first error, after which the rest of the stream
// is read and dropped, so that the session stays in step.
func (f *frameReader) copyData(w io.Writer, limit int64) (n int64, werr, err error) {
	var got int64 // read, whether or not written
	for {
		typ, size, err := f.next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("%w: data cut short", ErrFrame)
			}
			return n, werr, err
		}
		switch typ {
		case frameEnd:
			return n, werr, nil
		case frameHeader:
			return n, werr, fmt.Errorf("%w: a header inside a data stream", ErrFrame)
		}
		if got += int64(size); got > limit {
			return n, werr, fmt.Errorf("%w: data past its announced size", ErrFrame)
		}
		left := size
		for left > 0 {
			// A read gives what one TLS record held (16 KiB); a chunk is
			// filled first, so that the file (or the hash) is written a
			// chunk at a time, not a record at a time.
			k, err := io.ReadFull(f.r, f.buf[:min(left, len(f.buf))])
			left -= k
			if k > 0 && werr == nil {
				var m int
				m, werr = w.Write(f.buf[:k])
				n += int64(m)
			}
			if err != nil {
				if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
					err = fmt.Errorf("%w: data cut short", ErrFrame)
				}
				return n, werr, err
			}
		}
	}
}

// frameWriter writes frames to a buffered connection.
type frameWriter struct {
	w *bufio.Writer
}

func newFrameWriter(w io.Writer) *frameWriter {
	return &frameWriter{w: bufio.NewWriterSize(splitWriter{w}, MaxWrite)}
}

// MaxWrite bounds one write to the connection: over a WebSocket each
// write is a message. Both ends of a relayed session read through
// websocket.NetConn, which lifts the read limit, and the relay streams a
// message without holding it whole; 256 KiB keeps messages bounded and
// their frames, flushes and TLS records few.
const MaxWrite = 256 << 10

// splitWriter writes at most MaxWrite bytes at a time.
type splitWriter struct{ w io.Writer }

func (s splitWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k, err := s.w.Write(p[:min(len(p), MaxWrite)])
		n += k
		if err != nil {
			return n, err
		}
		p = p[k:]
	}
	return n, nil
}

func (f *frameWriter) frame(typ byte, payload []byte) error {
	var hdr [5]byte
	hdr[0] = typ
	binary.BigEndian.PutUint32(hdr[1:], uint32(len(payload)))
	if _, err := f.w.Write(hdr[:]); err != nil {
		return err
	}
	_, err := f.w.Write(payload)
	return err
}

// header writes v as a header frame and flushes.
func (f *frameWriter) header(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(b) > MaxHeader {
		return fmt.Errorf("filexfer: header of %d bytes over %d", len(b), MaxHeader)
	}
	if err := f.frame(frameHeader, b); err != nil {
		return err
	}
	return f.w.Flush()
}

// sendData streams r as data frames followed by an end frame, reading
// ChunkSize at a time, and returns the bytes sent. rerr is r's error,
// which ends the stream early (the end frame still goes, so that the peer
// stays in step); err is the connection's.
func (f *frameWriter) sendData(r io.Reader, buf []byte) (n int64, rerr, err error) {
	for {
		m, err := io.ReadFull(r, buf)
		if m > 0 {
			if err := f.frame(frameData, buf[:m]); err != nil {
				return n, nil, err
			}
			n += int64(m)
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
				rerr = err
			}
			break
		}
	}
	if err := f.frame(frameEnd, nil); err != nil {
		return n, rerr, err
	}
	return n, rerr, f.w.Flush()
}
