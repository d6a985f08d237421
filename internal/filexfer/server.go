package filexfer

import (
	"context"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"

	"github.com/gpucloud/gpucloud/agentapi"
)

// PartialPrefix starts the name of a put's partial file, next to the file
// it becomes: hidden, and left out of lists.
const PartialPrefix = ".gpcpart."

// FS is the tree one session serves. Names are clean, slash-separated and
// relative to its root ("." is the root); an implementation must keep
// every name inside the root whatever links the tree holds (agent/files
// resolves them with openat2 and RESOLVE_IN_ROOT).
type FS interface {
	Stat(name string) (agentapi.FileInfo, error)
	// Walk calls fn for every entry under the directory name, with paths
	// relative to it, a directory before its contents; it never follows
	// a symbolic link (nor lists one).
	Walk(name string, fn func(agentapi.FileInfo) error) error
	// Mkdir makes the directory name and its missing parents.
	Mkdir(name string, perm fs.FileMode) error
	// Open opens the regular file name to read.
	Open(name string) (*os.File, error)
	// OpenPartial opens name's partial file to read and write, creating
	// it (and the missing parents of name) empty if there is none.
	OpenPartial(name string) (*os.File, error)
	// PartialSize is the size of name's partial file; 0 when none.
	PartialSize(name string) (int64, error)
	// Commit renames name's partial file to name, with perm.
	Commit(name string, perm fs.FileMode) error
}

// CleanPath turns a request's path into a name of FS: slash-separated,
// relative to the root, with ".." resolved lexically at the root ("/.."
// is "/"). NUL bytes are refused.
func CleanPath(p string) (string, error) {
	if strings.IndexByte(p, 0) >= 0 {
		return "", &agentapi.FileError{Code: agentapi.FileInvalid, Message: "path has a NUL byte"}
	}
	c := path.Clean("/" + p)
	if c == "/" {
		return ".", nil
	}
	return c[1:], nil
}

// PartialName is the name of name's partial file.
func PartialName(name string) string {
	dir, base := path.Split(name)
	return dir + PartialPrefix + base
}

// Serve answers requests on conn from fsys until the client closes the
// connection (nil), the connection fails or ctx ends (which closes conn).
func Serve(ctx context.Context, conn io.ReadWriteCloser, fsys FS) error {
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	s := &server{fs: fsys, r: newFrameReader(conn), w: newFrameWriter(conn), buf: make([]byte, ChunkSize)}
	for {
		var req agentapi.FileRequest
		if err := s.r.header(&req); err != nil {
			if errors.Is(err, io.EOF) || ctx.Err() != nil {
				return nil
			}
			return err
		}
		if err := s.serve(req); err != nil {
			return err
		}
	}
}

type server struct {
	fs  FS
	r   *frameReader
	w   *frameWriter
	buf []byte
}

// serve answers one request; an error it returns ends the session (the
// connection failed or the peer broke the protocol), while an operation's
// failure is answered as a FileError.
func (s *server) serve(req agentapi.FileRequest) error {
	name, err := CleanPath(req.Path)
	if err != nil {
		if req.Op == agentapi.FileOpPut {
			return s.refusePut(err)
		}
		return s.fail(err)
	}
	switch req.Op {
	case agentapi.FileOpStat:
		return s.stat(name)
	case agentapi.FileOpList:
		return s.list(name)
	case agentapi.FileOpMkdir:
		if err := s.fs.Mkdir(name, perm(req.Mode, 0o755)); err != nil {
			return s.fail(err)
		}
		return s.w.header(agentapi.FileResponse{Done: true})
	case agentapi.FileOpSum:
		return s.sum(name, req.Checksum)
	case agentapi.FileOpPut:
		return s.put(name, req)
	case agentapi.FileOpGet:
		return s.get(name, req)
	}
	return s.fail(&agentapi.FileError{Code: agentapi.FileInvalid, Message: fmt.Sprintf("unknown op %q", req.Op)})
}

func perm(mode uint32, def fs.FileMode) fs.FileMode {
	if mode == 0 {
		return def
	}
	return fs.FileMode(mode) & fs.ModePerm
}

// fail answers the request with err as a FileError.
func (s *server) fail(err error) error {
	return s.w.header(agentapi.FileResponse{Error: ToFileError(err)})
}

func (s *server) stat(name string) error {
	info, err := s.fs.Stat(name)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return s.fail(err)
	}
	found := err == nil
	if !info.IsDir && name != "." {
		p, perr := s.fs.PartialSize(name)
		if perr != nil && !errors.Is(perr, fs.ErrNotExist) {
			return s.fail(perr)
		}
		info.Partial = p
	}
	if !found && info.Partial == 0 {
		return s.fail(err)
	}
	if !found {
		// Only a partial upload: the file itself is not there yet.
		return s.w.header(agentapi.FileResponse{Error: &agentapi.FileError{Code: agentapi.FileNotFound,
			Message: "no such file (a partial upload of it is)"}, Info: &agentapi.FileInfo{Path: name, Partial: info.Partial}})
	}
	info.Path = name
	return s.w.header(agentapi.FileResponse{Info: &info})
}

// listBatch is how many entries one list response carries.
const listBatch = 1000

func (s *server) list(name string) error {
	var batch []agentapi.FileInfo
	err := s.fs.Walk(name, func(fi agentapi.FileInfo) error {
		if strings.HasPrefix(path.Base(fi.Path), PartialPrefix) {
			return nil
		}
		batch = append(batch, fi)
		if len(batch) < listBatch {
			return nil
		}
		if err := s.w.header(agentapi.FileResponse{Entries: batch}); err != nil {
			return connError{err}
		}
		batch = batch[:0]
		return nil
	})
	var ce connError
	if errors.As(err, &ce) {
		return ce.err
	}
	if err != nil {
		return s.fail(err)
	}
	return s.w.header(agentapi.FileResponse{Entries: batch, Done: true})
}

// connError carries a connection's error out of Walk's callback.
type connError struct{ err error }

func (e connError) Error() string { return e.err.Error() }

func (s *server) sum(name, algo string) error {
	h, err := newHash(algo)
	if err != nil {
		return s.fail(err)
	}
	f, err := s.fs.Open(name)
	if err != nil {
		return s.fail(err)
	}
	defer f.Close()
	if _, err := io.CopyBuffer(h, f, s.buf); err != nil {
		return s.fail(err)
	}
	return s.done(algo, h)
}

// done is an operation's last answer, with the file's checksum.
func (s *server) done(algo string, h hash.Hash) error {
	d := digestOf(algo, h)
	return s.w.header(agentapi.FileResponse{Sum: d.Hex, Checksum: d.Algo, Done: true})
}

// refusePut answers a put with err and drops its data, which the client
// sends only after a ready answer: nothing to drop.
func (s *server) refusePut(err error) error { return s.fail(err) }

func (s *server) put(name string, req agentapi.FileRequest) error {
	if name == "." || req.Size < 0 || req.Offset < 0 || req.Offset > req.Size {
		return s.refusePut(&agentapi.FileError{Code: agentapi.FileInvalid,
			Message: fmt.Sprintf("put %q: offset %d and size %d", req.Path, req.Offset, req.Size)})
	}
	if info, err := s.fs.Stat(name); err == nil && info.IsDir {
		return s.refusePut(&agentapi.FileError{Code: agentapi.FileIsDir, Message: req.Path + " is a directory"})
	}
	h, err := newHash(req.Checksum)
	if err != nil {
		return s.refusePut(err)
	}
	f, err := s.fs.OpenPartial(name)
	if err != nil {
		return s.refusePut(err)
	}
	defer f.Close()
	if err := s.resumeAt(f, h, req.Offset); err != nil {
		return s.refusePut(err)
	}
	if err := s.w.header(agentapi.FileResponse{Info: &agentapi.FileInfo{Path: name, Partial: req.Offset}}); err != nil {
		return err
	}
	want := req.Size - req.Offset
	n, werr, err := s.r.copyData(io.MultiWriter(f, h), want)
	if err != nil {
		return err
	}
	if werr == nil && n < want {
		werr = &agentapi.FileError{Code: agentapi.FileInvalid,
			Message: fmt.Sprintf("put %q ended after %d of %d bytes; the partial file is kept to resume", req.Path, req.Offset+n, req.Size)}
	}
	if werr == nil {
		werr = f.Close()
	}
	if werr == nil {
		werr = s.fs.Commit(name, perm(req.Mode, 0o644))
	}
	if errors.Is(werr, syscall.ENOSPC) || errors.Is(werr, syscall.EDQUOT) {
		// A partial file that filled the volume would leave it full:
		// its space goes back, and the copy starts over once there is
		// room.
		f.Truncate(0)
	}
	if werr != nil {
		return s.fail(werr)
	}
	return s.done(req.Checksum, h)
}

// resumeAt readies a partial file to be written from offset: it hashes
// the bytes before it into h, drops any after it, and seeks there.
func (s *server) resumeAt(f *os.File, h hash.Hash, offset int64) error {
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if offset > st.Size() {
		return &agentapi.FileError{Code: agentapi.FileOutOfRange,
			Message: fmt.Sprintf("resume offset %d is past the partial file's %d bytes", offset, st.Size())}
	}
	if _, err := io.CopyBuffer(h, io.NewSectionReader(f, 0, offset), s.buf); err != nil {
		return err
	}
	if err := f.Truncate(offset); err != nil {
		return err
	}
	_, err = f.Seek(offset, io.SeekStart)
	return err
}

func (s *server) get(name string, req agentapi.FileRequest) error {
	offset := req.Offset
	h, err := newHash(req.Checksum)
	if err != nil {
		return s.fail(err)
	}
	f, err := s.fs.Open(name)
	if err != nil {
		return s.fail(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return s.fail(err)
	}
	size := st.Size()
	if offset < 0 || offset > size {
		return s.fail(&agentapi.FileError{Code: agentapi.FileOutOfRange,
			Message: fmt.Sprintf("offset %d is outside the file's %d bytes", offset, size)})
	}
	if _, err := io.CopyBuffer(h, io.NewSectionReader(f, 0, offset), s.buf); err != nil {
		return s.fail(err)
	}
	info := agentapi.FileInfo{Path: name, Size: size, Mode: uint32(st.Mode().Perm())}
	if err := s.w.header(agentapi.FileResponse{Info: &info}); err != nil {
		return err
	}
	n, rerr, err := s.w.sendData(io.TeeReader(io.NewSectionReader(f, offset, size-offset), h), s.buf)
	if err != nil {
		return err
	}
	if rerr == nil && n < size-offset {
		rerr = &agentapi.FileError{Code: agentapi.FileInternal, Message: name + " shrank while it was read"}
	}
	if rerr != nil {
		return s.fail(rerr)
	}
	return s.done(req.Checksum, h)
}

// ToFileError maps an error of FS to the protocol's FileError.
func ToFileError(err error) *agentapi.FileError {
	var fe *agentapi.FileError
	if errors.As(err, &fe) {
		return fe
	}
	msg := err.Error()
	var pe *fs.PathError
	if errors.As(err, &pe) {
		// The agent's own paths (the volume's directory) are not the
		// tenant's business: name the operation and the cause only.
		msg = pe.Op + ": " + pe.Err.Error()
	}
	code := agentapi.FileInternal
	switch {
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		code, msg = agentapi.FileNoSpace, "no space left: the volume or the filesystem is full ("+msg+")"
	case errors.Is(err, fs.ErrNotExist):
		code = agentapi.FileNotFound
	case errors.Is(err, syscall.EISDIR):
		code = agentapi.FileIsDir
	case errors.Is(err, syscall.ENOTDIR):
		code = agentapi.FileNotDir
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.ELOOP), errors.Is(err, syscall.EXDEV):
		code = agentapi.FilePermission
	case errors.Is(err, fs.ErrExist):
		code = agentapi.FileNotDir
	}
	return &agentapi.FileError{Code: code, Message: msg}
}
