package filexfer

import (
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/gpucloud/gpucloud/agentapi"
)

// ErrChecksum is a copy whose checksum on the agent is not the one on
// this side: the data was changed on the way or on a disk.
var ErrChecksum = errors.New("checksum mismatch")

// Options of Upload and Download.
type Options struct {
	// NoResume starts every file over: no partial file is resumed and no
	// file already there is skipped.
	NoResume bool
	// Total is told how many bytes the copy covers, once it knows;
	// Add of each byte moved or found already there. Either may be nil.
	Total func(int64)
	Add   func(int64)
	// Skip is told of a local entry the copy leaves out (a symbolic
	// link, a device) and why; nil: silently.
	Skip func(name, why string)
	// Checksum is the algorithm files are compared with at the end (and
	// when deciding that a file already there is the same):
	// agentapi.ChecksumCRC32C or ChecksumSHA256; "" is DefaultChecksum.
	Checksum string
	// Parallel is how many sessions a tree's files are copied over at
	// once: the one Upload or Download is given and up to Parallel-1 more
	// that Open opens (and whose close the copy calls at its end). A file
	// is one session's, whole; a tree of many small files, whose time is
	// the agent's answers, goes about that many times faster. A session
	// Open cannot open is done without (the copy goes on over fewer).
	// With Parallel over 1, Total, Add and Skip are called from several
	// goroutines. 0 or 1: one session.
	Parallel int
	Open     func() (*Client, func(), error)
}

func (o *Options) total(n int64) {
	if o.Total != nil {
		o.Total(n)
	}
}

func (o *Options) add(n int64) {
	if o.Add != nil && n > 0 {
		o.Add(n)
	}
}

// Stats counts what a copy did.
type Stats struct {
	Files int
	Dirs  int
	// Bytes is what went over the connection; Resumed what partial files
	// already held; Skipped files were already there, checksum equal.
	Bytes, Resumed int64
	Skipped        int
	// Checksum is the algorithm the files were compared with (empty
	// when none was).
	Checksum string
}

// addWriter counts bytes into Options.Add.
type addWriter struct{ o *Options }

func (w addWriter) Write(p []byte) (int, error) { w.o.add(int64(len(p))); return len(p), nil }

// localFile is one file of a copy's plan.
type localFile struct {
	local, remote string
	size          int64
	mode          uint32
}

// Upload copies the local file or directory src to remote, as cp -r
// does: into remote when it is a directory (or ends in "/"), else as
// remote. Files are resumed from their partial upload and files already
// there with the same checksum skipped, unless opt.NoResume.
func Upload(c *Client, src, remote string, opt Options) (Stats, error) {
	var st Stats
	if err := c.SetChecksum(opt.Checksum); err != nil {
		return st, err
	}
	li, err := os.Stat(src)
	if err != nil {
		return st, err
	}
	dst := remote
	if ri, err := c.Stat(remote); err == nil && ri.IsDir || strings.HasSuffix(remote, "/") {
		dst = path.Join(remote, filepath.Base(filepath.Clean(src)))
	} else if err != nil && !IsNotFound(err) {
		return st, err
	}
	if !li.IsDir() {
		opt.total(li.Size())
		return st, uploadFile(c, localFile{src, dst, li.Size(), uint32(li.Mode().Perm())}, opt, &st)
	}
	dirs, files, err := planUpload(src, dst, opt)
	if err != nil {
		return st, err
	}
	var total int64
	for _, f := range files {
		total += f.size
	}
	opt.total(total)
	for _, d := range dirs {
		if err := c.Mkdir(d.remote, d.mode); err != nil {
			return st, fmt.Errorf("%s: %w", d.remote, err)
		}
		st.Dirs++
	}
	return st, eachFile(c, files, opt, &st, uploadFile)
}

// eachFile copies files with do, over c and, when opt asks for it, over
// more sessions at once (Options.Parallel), each file whole on one; the
// sessions' figures are added into st. It stops taking files at the
// first error, which it returns once the files under way are done.
func eachFile(c *Client, files []localFile, opt Options, st *Stats, do func(*Client, localFile, Options, *Stats) error) error {
	clients := []*Client{c}
	for len(clients) < min(opt.Parallel, len(files)) && opt.Open != nil {
		extra, closeFn, err := opt.Open()
		if err != nil {
			break // fewer sessions, not none
		}
		defer closeFn()
		if err := extra.SetChecksum(c.checksum); err != nil {
			return err
		}
		clients = append(clients, extra)
	}
	if len(clients) == 1 {
		for _, f := range files {
			if err := do(c, f, opt, st); err != nil {
				return err
			}
		}
		return nil
	}
	var (
		mu    sync.Mutex
		next  int
		first error
		wg    sync.WaitGroup
	)
	take := func() (localFile, bool) {
		mu.Lock()
		defer mu.Unlock()
		if first != nil || next == len(files) {
			return localFile{}, false
		}
		next++
		return files[next-1], true
	}
	for _, cl := range clients {
		wg.Go(func() {
			var mine Stats
			for {
				f, ok := take()
				if !ok {
					break
				}
				if err := do(cl, f, opt, &mine); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					break
				}
			}
			mu.Lock()
			st.add(mine)
			mu.Unlock()
		})
	}
	wg.Wait()
	return first
}

// add adds o's figures to s.
func (s *Stats) add(o Stats) {
	s.Files += o.Files
	s.Dirs += o.Dirs
	s.Bytes += o.Bytes
	s.Resumed += o.Resumed
	s.Skipped += o.Skipped
	if s.Checksum == "" {
		s.Checksum = o.Checksum
	}
}

// planUpload lists the directories (src itself first) and regular files
// under src with their remote names under dst.
func planUpload(src, dst string, opt Options) (dirs, files []localFile, err error) {
	err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		remote := path.Join(dst, filepath.ToSlash(rel))
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			dirs = append(dirs, localFile{p, remote, 0, uint32(info.Mode().Perm())})
		case info.Mode().IsRegular():
			if strings.HasPrefix(d.Name(), PartialPrefix) {
				return nil
			}
			files = append(files, localFile{p, remote, info.Size(), uint32(info.Mode().Perm())})
		case opt.Skip != nil:
			opt.Skip(p, "not a regular file or directory ("+info.Mode().Type().String()+")")
		}
		return nil
	})
	return dirs, files, err
}

// uploadFile copies one file, resuming or skipping it when it can.
func uploadFile(c *Client, f localFile, opt Options, st *Stats) error {
	file, err := os.Open(f.local)
	if err != nil {
		return err
	}
	defer file.Close()
	var offset int64
	if !opt.NoResume {
		ri, err := c.Stat(f.remote)
		switch {
		case err == nil && ri.IsDir:
			return fmt.Errorf("%s: %w", f.remote, &agentapi.FileError{Code: agentapi.FileIsDir, Message: "is a directory"})
		case err == nil && ri.Size == f.size && ri.Partial == 0:
			if same, err := sameSum(c, f.remote, file, st); err != nil || same {
				if same {
					st.Skipped++
					opt.add(f.size)
				}
				return err
			}
		case ri != nil && ri.Partial <= f.size:
			offset = ri.Partial
		case err != nil && !IsNotFound(err):
			return fmt.Errorf("%s: %w", f.remote, err)
		}
	}
	h, err := newHash(c.checksum)
	if err != nil {
		return err
	}
	if err := hashPrefix(h, file, offset); err != nil {
		return err
	}
	opt.add(offset)
	body := io.TeeReader(file, io.MultiWriter(h, addWriter{&opt}))
	sum, err := c.Put(f.remote, body, offset, f.size, f.mode)
	// An interrupted copy's session may still be closing on the agent,
	// holding the partial file: busy is answered before any data is read,
	// so the same put is tried again for a little while.
	for try := 0; isBusy(err) && try < busyTries; try++ {
		time.Sleep(busyWait)
		sum, err = c.Put(f.remote, body, offset, f.size, f.mode)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", f.remote, err)
	}
	local, err := checkedAs(sum, digestOf(c.checksum, h), file)
	if err != nil {
		return err
	}
	if sum != local {
		return fmt.Errorf("%s: %w: sent %s, the agent wrote %s (run the copy again with --no-resume)", f.remote, ErrChecksum, local, sum)
	}
	st.Checksum = sum.Algo
	st.Files++
	st.Bytes += f.size - offset
	st.Resumed += offset
	return nil
}

// How long uploadFile waits for a busy partial file.
const (
	busyTries = 15
	busyWait  = 200 * time.Millisecond
)

func isBusy(err error) bool {
	var fe *agentapi.FileError
	return errors.As(err, &fe) && fe.Code == agentapi.FileBusy
}

// checkedAs is local, the checksum of the whole of file computed as it
// was read or written, in the algorithm of the agent's sum: an agent from
// before the algorithm was named answers SHA-256 whatever was asked, and
// file is then read again from its start.
func checkedAs(sum, local Digest, file *os.File) (Digest, error) {
	if sum.Algo == local.Algo {
		return local, nil
	}
	if _, err := file.Seek(0, io.SeekStart); err != nil {
		return Digest{}, err
	}
	return hashAll(sum.Algo, file)
}

// sameSum reports whether the remote file's checksum is the local one's
// (read from the start); it leaves the local file at its start.
func sameSum(c *Client, remote string, file *os.File, st *Stats) (bool, error) {
	sum, err := c.Sum(remote)
	if err != nil {
		return false, fmt.Errorf("%s: %w", remote, err)
	}
	local, err := hashAll(sum.Algo, file)
	if err != nil {
		return false, err
	}
	if _, err := file.Seek(0, io.SeekStart); err != nil {
		return false, err
	}
	if local == sum {
		st.Checksum = sum.Algo
	}
	return local == sum, nil
}

// hashPrefix hashes f's first n bytes into h and leaves f at n.
func hashPrefix(h hash.Hash, f *os.File, n int64) error {
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, n)); err != nil {
		return err
	}
	_, err := f.Seek(n, io.SeekStart)
	return err
}

// Download copies the remote file or directory src to the local dst, as
// cp -r does: into dst when it is a directory (or ends in a separator),
// else as dst. A file comes through a hidden partial file next to it,
// which a later run resumes from unless opt.NoResume.
func Download(c *Client, src, dst string, opt Options) (Stats, error) {
	var st Stats
	if err := c.SetChecksum(opt.Checksum); err != nil {
		return st, err
	}
	ri, err := c.Stat(src)
	if err != nil {
		return st, fmt.Errorf("%s: %w", src, err)
	}
	if li, err := os.Stat(dst); err == nil && li.IsDir() || strings.HasSuffix(dst, string(filepath.Separator)) {
		if base := path.Base(path.Clean("/" + src)); base != "/" {
			dst = filepath.Join(dst, base)
		}
	}
	if !ri.IsDir {
		opt.total(ri.Size)
		return st, downloadFile(c, localFile{dst, src, ri.Size, ri.Mode}, opt, &st)
	}
	entries, err := c.List(src)
	if err != nil {
		return st, fmt.Errorf("%s: %w", src, err)
	}
	var total int64
	for _, e := range entries {
		total += e.Size
	}
	opt.total(total)
	if err := os.MkdirAll(dst, fs.FileMode(ri.Mode)|0o700); err != nil {
		return st, err
	}
	st.Dirs++
	var files []localFile
	for _, e := range entries {
		local, err := localName(dst, e.Path)
		if err != nil {
			return st, err
		}
		if e.IsDir {
			if err := os.MkdirAll(local, fs.FileMode(e.Mode)|0o700); err != nil {
				return st, err
			}
			st.Dirs++
			continue
		}
		files = append(files, localFile{local, path.Join(src, e.Path), e.Size, e.Mode})
	}
	return st, eachFile(c, files, opt, &st, downloadFile)
}

// localName is where the listed entry rel lands under dst: never outside
// it, whatever name the agent sent.
func localName(dst, rel string) (string, error) {
	clean := path.Clean("/" + rel)
	if clean == "/" || clean != "/"+rel {
		return "", fmt.Errorf("%w: listed path %q", ErrFrame, rel)
	}
	return filepath.Join(dst, filepath.FromSlash(clean[1:])), nil
}

// downloadFile copies one remote file to f.local.
func downloadFile(c *Client, f localFile, opt Options, st *Stats) error {
	dir, base := filepath.Split(f.local)
	partial := filepath.Join(dir, PartialPrefix+base)
	if opt.NoResume {
		if err := os.Remove(partial); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	} else if li, err := os.Stat(f.local); err == nil && li.Mode().IsRegular() && li.Size() == f.size {
		if same, err := sameLocal(c, f, st); err != nil || same {
			if same {
				st.Skipped++
				opt.add(f.size)
			}
			return err
		}
	}
	if dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	file, err := os.OpenFile(partial, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	defer file.Close()
	fi, err := file.Stat()
	if err != nil {
		return err
	}
	offset := min(fi.Size(), f.size)
	h, err := newHash(c.checksum)
	if err != nil {
		return err
	}
	if err := hashPrefix(h, file, offset); err != nil {
		return err
	}
	if err := file.Truncate(offset); err != nil {
		return err
	}
	opt.add(offset)
	sum, err := c.Get(f.remote, offset, io.MultiWriter(file, h, addWriter{&opt}), nil)
	if err != nil {
		return fmt.Errorf("%s: %w", f.remote, err)
	}
	local, err := checkedAs(sum, digestOf(c.checksum, h), file)
	if err != nil {
		return err
	}
	if sum != local {
		file.Close()
		os.Remove(partial)
		return fmt.Errorf("%s: %w: the agent sent %s, %s was written (run the copy again)", f.remote, ErrChecksum, sum, local)
	}
	st.Checksum = sum.Algo
	if err := file.Chmod(fs.FileMode(f.mode) & fs.ModePerm); err != nil {
		return err
	}
	if err := file.Close(); err != nil {
		return err
	}
	if err := os.Rename(partial, f.local); err != nil {
		return err
	}
	st.Files++
	st.Bytes += f.size - offset
	st.Resumed += offset
	return nil
}

// sameLocal reports whether the local file f.local has the remote file's
// checksum.
func sameLocal(c *Client, f localFile, st *Stats) (bool, error) {
	file, err := os.Open(f.local)
	if err != nil {
		return false, err
	}
	defer file.Close()
	return sameSum(c, f.remote, file, st)
}
