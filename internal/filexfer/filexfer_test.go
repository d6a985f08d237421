package filexfer

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gpucloud/gpucloud/agentapi"
)

// session serves dir over a pipe and returns the client's end, cut after
// cutAfter bytes written or read by the client (0: never).
func session(t *testing.T, dir string, cutWrite, cutRead int64) *Client {
	t.Helper()
	c, _ := servedSession(t, dir, cutWrite, cutRead)
	return c
}

// servedSession is session, and a channel closed once its server has
// ended: the agent's files lock a partial file while a put writes it,
// which the test's rootFS does not, so a test that resumes a cut put
// waits for the cut one to end first.
func servedSession(t *testing.T, dir string, cutWrite, cutRead int64) (*Client, <-chan struct{}) {
	t.Helper()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	cli, srv := net.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		Serve(t.Context(), srv, rootFS{root})
		srv.Close()
	}()
	t.Cleanup(func() { cli.Close(); <-done; root.Close() })
	return NewClient(&cutConn{Conn: cli, writeLeft: cutWrite, readLeft: cutRead}), done
}

// cutConn closes its connection once the client has written writeLeft or
// read readLeft bytes (0: no limit), as a dropped network would.
type cutConn struct {
	net.Conn
	writeLeft, readLeft int64
	cut                 atomic.Bool
}

func (c *cutConn) Write(p []byte) (int, error) {
	if c.writeLeft > 0 && int64(len(p)) >= c.writeLeft {
		n, _ := c.Conn.Write(p[:c.writeLeft])
		c.writeLeft = 0
		c.cut.Store(true)
		c.Conn.Close()
		return n, net.ErrClosed
	}
	if c.writeLeft > 0 {
		c.writeLeft -= int64(len(p))
	}
	return c.Conn.Write(p)
}

func (c *cutConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.readLeft > 0 {
		if int64(n) >= c.readLeft {
			c.Conn.Close()
			return int(c.readLeft), err
		}
		c.readLeft -= int64(n)
	}
	return n, err
}

func randomFile(t *testing.T, p string, size int) []byte {
	t.Helper()
	b := make([]byte, size)
	rand.Read(b)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o640); err != nil {
		t.Fatal(err)
	}
	return b
}

func mustEqualFile(t *testing.T, p string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: %d bytes, not the %d sent", p, len(got), len(want))
	}
}

func TestFileRoundTrips(t *testing.T) {
	for _, tt := range []struct {
		desc   string
		size   int
		remote string // where it is put
		stored string // where it lands under the root
	}{
		{"empty file", 0, "/empty", "empty"},
		{"one byte", 1, "/one", "one"},
		{"a chunk and one byte", ChunkSize + 1, "/a/b/c.bin", "a/b/c.bin"},
		{"three MiB", 3 << 20, "/big", "big"},
		{"dot-dot stays in the root", 10, "/../../etc/x", "etc/x"},
		{"relative path", 10, "rel/x", "rel/x"},
	} {
		t.Run(tt.desc, func(t *testing.T) {
			local, remote := t.TempDir(), t.TempDir()
			data := randomFile(t, filepath.Join(local, "src"), tt.size)
			c := session(t, remote, 0, 0)
			st, err := Upload(c, filepath.Join(local, "src"), tt.remote, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if st.Files != 1 || st.Bytes != int64(tt.size) {
				t.Errorf("stats %+v, want 1 file of %d bytes", st, tt.size)
			}
			mustEqualFile(t, filepath.Join(remote, tt.stored), data)
			if fi, _ := os.Stat(filepath.Join(remote, tt.stored)); fi.Mode().Perm() != 0o640 {
				t.Errorf("mode %v, want 0640", fi.Mode().Perm())
			}
			back := filepath.Join(local, "back")
			if _, err := Download(c, tt.remote, back, Options{}); err != nil {
				t.Fatal(err)
			}
			mustEqualFile(t, back, data)
		})
	}
}

func TestOpErrors(t *testing.T) {
	remote := t.TempDir()
	randomFile(t, filepath.Join(remote, "file"), 10)
	os.Mkdir(filepath.Join(remote, "dir"), 0o755)
	c := session(t, remote, 0, 0)
	for _, tt := range []struct {
		desc string
		do   func() error
		code string
	}{
		{"stat of nothing", func() error { _, err := c.Stat("/nothing"); return err }, agentapi.FileNotFound},
		{"get of nothing", func() error { _, err := c.Get("/nothing", 0, &bytes.Buffer{}, nil); return err }, agentapi.FileNotFound},
		{"get past the end", func() error { _, err := c.Get("/file", 11, &bytes.Buffer{}, nil); return err }, agentapi.FileOutOfRange},
		{"put onto a directory", func() error { _, err := c.Put("/dir", bytes.NewReader(nil), 0, 0, 0); return err }, agentapi.FileIsDir},
		{"put of the root", func() error { _, err := c.Put("/", bytes.NewReader(nil), 0, 0, 0); return err }, agentapi.FileInvalid},
		{"put past its partial", func() error { _, err := c.Put("/new", bytes.NewReader(nil), 5, 10, 0); return err }, agentapi.FileOutOfRange},
		{"put with a NUL", func() error { _, err := c.Put("/a\x00b", bytes.NewReader(nil), 0, 0, 0); return err }, agentapi.FileInvalid},
		{"sum of a directory", func() error { _, err := c.Sum("/dir"); return err }, agentapi.FileIsDir},
		{"mkdir under a file", func() error { return c.Mkdir("/file/sub", 0) }, agentapi.FileNotDir},
		{"list of nothing", func() error { _, err := c.List("/nothing"); return err }, agentapi.FileNotFound},
		{"unknown op", func() error { _, err := c.do(agentapi.FileRequest{Op: "chmod", Path: "/file"}); return err }, agentapi.FileInvalid},
	} {
		t.Run(tt.desc, func(t *testing.T) {
			err := tt.do()
			var fe *agentapi.FileError
			if !errors.As(err, &fe) || fe.Code != tt.code {
				t.Fatalf("error %v, want code %s", err, tt.code)
			}
		})
	}
	// The session goes on after each failure.
	if sum, err := c.Sum("/file"); err != nil || sum.Algo != DefaultChecksum || len(sum.Hex) != 8 {
		t.Fatalf("sum after the failures: %q, %v", sum, err)
	}
}

// tree writes a small directory tree under dir and returns its files.
func tree(t *testing.T, dir string) map[string][]byte {
	files := map[string][]byte{}
	for name, size := range map[string]int{"a.txt": 5, "sub/b.bin": ChunkSize * 2, "sub/deeper/c": 0, "d": 1000} {
		files[name] = randomFile(t, filepath.Join(dir, filepath.FromSlash(name)), size)
	}
	os.MkdirAll(filepath.Join(dir, "empty"), 0o755)
	return files
}

func TestDirectoryBothWays(t *testing.T) {
	local, remote := t.TempDir(), t.TempDir()
	files := tree(t, filepath.Join(local, "data"))
	os.Symlink("/etc/passwd", filepath.Join(local, "data", "link"))
	c := session(t, remote, 0, 0)
	var skipped []string
	// Into an existing directory: it lands as remote/ckpt/data.
	if err := c.Mkdir("/ckpt", 0); err != nil {
		t.Fatal(err)
	}
	st, err := Upload(c, filepath.Join(local, "data"), "/ckpt", Options{Skip: func(n, _ string) { skipped = append(skipped, n) }})
	if err != nil {
		t.Fatal(err)
	}
	if st.Files != len(files) || len(skipped) != 1 {
		t.Errorf("stats %+v, skipped %v: want %d files and the link skipped", st, skipped, len(files))
	}
	for name, data := range files {
		mustEqualFile(t, filepath.Join(remote, "ckpt", "data", filepath.FromSlash(name)), data)
	}
	if fi, err := os.Stat(filepath.Join(remote, "ckpt", "data", "empty")); err != nil || !fi.IsDir() {
		t.Errorf("empty directory not copied: %v", err)
	}
	// And back into a new local directory.
	back := filepath.Join(local, "back")
	if _, err := Download(c, "/ckpt/data", back, Options{}); err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		mustEqualFile(t, filepath.Join(back, filepath.FromSlash(name)), data)
	}
	if fi, err := os.Stat(filepath.Join(back, "empty")); err != nil || !fi.IsDir() {
		t.Errorf("empty directory not copied back: %v", err)
	}
	// Again: everything is there with the same checksum, nothing moves.
	st, err = Download(c, "/ckpt/data", back+"/", Options{})
	if err == nil {
		// back/ exists: the copy lands in back/data, a fresh tree.
		if st.Skipped != 0 || st.Files != len(files) {
			t.Errorf("into back/data: %+v", st)
		}
	} else {
		t.Fatal(err)
	}
	st, err = Upload(c, filepath.Join(local, "data"), "/ckpt", Options{})
	if err != nil || st.Skipped != len(files) || st.Bytes != 0 {
		t.Errorf("second upload: %+v, %v: want every file skipped", st, err)
	}
}

func TestResumeUpload(t *testing.T) {
	local, remote := t.TempDir(), t.TempDir()
	const size = 5 << 20
	data := randomFile(t, filepath.Join(local, "f"), size)
	// The connection drops after 2 MiB.
	cut, served := servedSession(t, remote, 2<<20, 0)
	if _, err := Upload(cut, filepath.Join(local, "f"), "/f", Options{}); err == nil {
		t.Fatal("upload over a cut connection succeeded")
	}
	<-served
	if _, err := os.Stat(filepath.Join(remote, "f")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the file is there after a cut upload: %v", err)
	}
	c := session(t, remote, 0, 0)
	fi, err := c.Stat("/f")
	if !IsNotFound(err) || fi == nil || fi.Partial == 0 || fi.Partial >= size {
		t.Fatalf("stat after the cut: %+v, %v: want not found with a partial", fi, err)
	}
	var moved atomic.Int64
	st, err := Upload(c, filepath.Join(local, "f"), "/f", Options{Add: func(n int64) { moved.Add(n) }})
	if err != nil {
		t.Fatal(err)
	}
	if st.Resumed != fi.Partial || st.Bytes != size-fi.Partial || moved.Load() != size {
		t.Errorf("stats %+v, progress %d: want %d resumed", st, moved.Load(), fi.Partial)
	}
	mustEqualFile(t, filepath.Join(remote, "f"), data)
	if _, err := os.Stat(filepath.Join(remote, PartialPrefix+"f")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("partial file left behind: %v", err)
	}
}

func TestResumeUploadOfAChangedFile(t *testing.T) {
	local, remote := t.TempDir(), t.TempDir()
	data := randomFile(t, filepath.Join(local, "f"), 3<<20)
	Upload(session(t, remote, 1<<20, 0), filepath.Join(local, "f"), "/f", Options{})
	// The local file changes before the resume: the checksum catches it.
	data[0] ^= 0xff
	os.WriteFile(filepath.Join(local, "f"), data, 0o644)
	c := session(t, remote, 0, 0)
	if _, err := Upload(c, filepath.Join(local, "f"), "/f", Options{}); !errors.Is(err, ErrChecksum) {
		t.Fatalf("resume of a changed file: %v, want %v", err, ErrChecksum)
	}
	// --no-resume starts over and succeeds.
	st, err := Upload(c, filepath.Join(local, "f"), "/f", Options{NoResume: true})
	if err != nil || st.Resumed != 0 {
		t.Fatalf("no-resume: %+v, %v", st, err)
	}
	mustEqualFile(t, filepath.Join(remote, "f"), data)
}

func TestResumeDownload(t *testing.T) {
	local, remote := t.TempDir(), t.TempDir()
	const size = 5 << 20
	data := randomFile(t, filepath.Join(remote, "f"), size)
	dst := filepath.Join(local, "f")
	if _, err := Download(session(t, remote, 0, 2<<20), "/f", dst, Options{}); err == nil {
		t.Fatal("download over a cut connection succeeded")
	}
	fi, err := os.Stat(filepath.Join(local, PartialPrefix+"f"))
	if err != nil || fi.Size() == 0 || fi.Size() >= size {
		t.Fatalf("partial after the cut: %v, %v", fi, err)
	}
	st, err := Download(session(t, remote, 0, 0), "/f", dst, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if st.Resumed != fi.Size() || st.Bytes != size-fi.Size() {
		t.Errorf("stats %+v: want %d resumed", st, fi.Size())
	}
	mustEqualFile(t, dst, data)
}

func TestLocalNameStaysUnderDst(t *testing.T) {
	for _, rel := range []string{"../x", "/x", "a/../../x", "", "."} {
		if _, err := localName("/dst", rel); err == nil {
			t.Errorf("listed path %q accepted", rel)
		}
	}
	if got, err := localName("/dst", "a/b"); err != nil || got != "/dst/a/b" {
		t.Errorf("a/b: %q, %v", got, err)
	}
}

func FuzzFrameReader(f *testing.F) {
	for _, seed := range [][]byte{
		{'H', 0, 0, 0, 2, '{', '}'},
		{'D', 0, 0, 0, 3, 1, 2, 3, 'E', 0, 0, 0, 0},
		{'D', 0xff, 0xff, 0xff, 0xff},
		{'E', 0, 0, 0, 1, 0},
		{'X'},
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r := newFrameReader(bytes.NewReader(b))
		for range 64 {
			var resp agentapi.FileResponse
			if err := r.header(&resp); err != nil {
				n, _, err := r.copyData(&bytes.Buffer{}, 1<<20)
				if n > 1<<20 {
					t.Fatalf("copied %d bytes past the limit", n)
				}
				if err != nil {
					return
				}
			}
		}
	})
}

// busyFS holds every partial file busy for its first n opens.
type busyFS struct {
	rootFS
	n *atomic.Int32
}

func (f busyFS) OpenPartial(name string) (*os.File, error) {
	if f.n.Add(-1) >= 0 {
		return nil, &agentapi.FileError{Code: agentapi.FileBusy, Message: "busy"}
	}
	return f.rootFS.OpenPartial(name)
}

// TestUploadWaitsOutABusyFile: a put answered busy (an interrupted copy's
// session still closing) is tried again, and the copy completes.
func TestUploadWaitsOutABusyFile(t *testing.T) {
	local, remote := t.TempDir(), t.TempDir()
	data := randomFile(t, filepath.Join(local, "f"), 1000)
	root, err := os.OpenRoot(remote)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	var n atomic.Int32
	n.Store(2)
	cli, srv := net.Pipe()
	go Serve(t.Context(), srv, busyFS{rootFS{root}, &n})
	defer cli.Close()
	if _, err := Upload(NewClient(cli), filepath.Join(local, "f"), "/f", Options{}); err != nil {
		t.Fatal(err)
	}
	mustEqualFile(t, filepath.Join(remote, "f"), data)
}

// TestParallelTree: a tree's files go over several sessions at once
// (Options.Parallel), each file whole on one, both ways; the sessions'
// figures add up, each extra session is closed at the end, a session that
// cannot be opened leaves the copy to fewer, and a file's error stops the
// copy.
func TestParallelTree(t *testing.T) {
	local, remote := t.TempDir(), t.TempDir()
	files := map[string][]byte{}
	for i := range 40 {
		name := fmt.Sprintf("d%d/f%02d", i%4, i)
		files[name] = randomFile(t, filepath.Join(local, "data", filepath.FromSlash(name)), 1000+i*100)
	}
	files["big"] = randomFile(t, filepath.Join(local, "data", "big"), 3*ChunkSize+7)
	var opened, closed, failed atomic.Int32
	open := func(fail int32) func() (*Client, func(), error) {
		return func() (*Client, func(), error) {
			if opened.Add(1) == fail {
				failed.Add(1)
				return nil, nil, errors.New("over the session limit")
			}
			return session(t, remote, 0, 0), func() { closed.Add(1) }, nil
		}
	}
	var moved atomic.Int64
	st, err := Upload(session(t, remote, 0, 0), filepath.Join(local, "data"), "/", Options{Parallel: 4, Open: open(0),
		Add: func(n int64) { moved.Add(n) }})
	if err != nil {
		t.Fatal(err)
	}
	var size int64
	for _, b := range files {
		size += int64(len(b))
	}
	if st.Files != len(files) || st.Bytes != size || moved.Load() != size || st.Checksum != DefaultChecksum {
		t.Errorf("stats %+v, progress %d: want %d files, %d bytes", st, moved.Load(), len(files), size)
	}
	if opened.Load() != 3 || closed.Load() != 3 {
		t.Errorf("%d sessions opened and %d closed; want the 3 extra ones both", opened.Load(), closed.Load())
	}
	for name, data := range files {
		mustEqualFile(t, filepath.Join(remote, "data", filepath.FromSlash(name)), data)
	}
	// Back, with the second extra session refused: three do it.
	opened.Store(0)
	closed.Store(0)
	back := filepath.Join(local, "back")
	st, err = Download(session(t, remote, 0, 0), "/data", back, Options{Parallel: 4, Open: open(2)})
	if err != nil || st.Files != len(files) || failed.Load() != 1 {
		t.Fatalf("download: %+v, %v (refused %d)", st, err, failed.Load())
	}
	for name, data := range files {
		mustEqualFile(t, filepath.Join(back, filepath.FromSlash(name)), data)
	}
	// A file's error stops the copy: a remote directory where a file goes.
	if err := os.MkdirAll(filepath.Join(remote, "again", "data", "d1", "f05"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := session(t, remote, 0, 0).Mkdir("/again", 0); err != nil {
		t.Fatal(err)
	}
	_, err = Upload(session(t, remote, 0, 0), filepath.Join(local, "data"), "/again", Options{Parallel: 4, Open: open(0)})
	if err == nil || !strings.Contains(err.Error(), "f05") {
		t.Fatalf("a tree with a directory in a file's place: %v; want its error", err)
	}
}
