package filexfer

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/gpucloud/gpucloud/agentapi"
)

// expected is the checksum of data computed without this package.
func expected(algo string, data []byte) Digest {
	if algo == agentapi.ChecksumSHA256 {
		s := sha256.Sum256(data)
		return Digest{algo, hex.EncodeToString(s[:])}
	}
	return Digest{algo, fmt.Sprintf("%08x", crc32.Checksum(data, crc32.MakeTable(crc32.Castagnoli)))}
}

// Both algorithms, through every path that compares: a copy, a resumed
// copy in each direction, a file already there, and a changed one.
func TestChecksums(t *testing.T) {
	for _, algo := range []string{agentapi.ChecksumCRC32C, agentapi.ChecksumSHA256} {
		t.Run(algo, func(t *testing.T) {
			local, remote := t.TempDir(), t.TempDir()
			opt := Options{Checksum: algo}
			data := randomFile(t, filepath.Join(local, "f"), 3<<20+17)
			if _, err := Upload(session(t, remote, 1<<20, 0), filepath.Join(local, "f"), "/f", opt); err == nil {
				t.Fatal("upload over a cut connection succeeded")
			}
			c := session(t, remote, 0, 0)
			st, err := Upload(c, filepath.Join(local, "f"), "/f", opt)
			if err != nil || st.Resumed == 0 {
				t.Fatalf("resumed upload: %+v, %v", st, err)
			}
			mustEqualFile(t, filepath.Join(remote, "f"), data)
			if err := c.SetChecksum(algo); err != nil {
				t.Fatal(err)
			}
			if sum, err := c.Sum("/f"); err != nil || sum != expected(algo, data) {
				t.Fatalf("sum %v, %v: want %v", sum, err, expected(algo, data))
			}
			// Already there: skipped by its checksum.
			if st, err := Upload(c, filepath.Join(local, "f"), "/f", opt); err != nil || st.Skipped != 1 {
				t.Fatalf("second upload: %+v, %v", st, err)
			}
			// Changed before a resume: caught.
			Upload(session(t, remote, 1<<20, 0), filepath.Join(local, "f"), "/g", opt)
			data[0] ^= 0xff
			os.WriteFile(filepath.Join(local, "f"), data, 0o644)
			if _, err := Upload(session(t, remote, 0, 0), filepath.Join(local, "f"), "/g", opt); !errors.Is(err, ErrChecksum) {
				t.Fatalf("resume of a changed file: %v, want %v", err, ErrChecksum)
			}
			// A download cut and resumed.
			dst := filepath.Join(local, "back")
			if _, err := Download(session(t, remote, 0, 1<<20), "/f", dst, opt); err == nil {
				t.Fatal("download over a cut connection succeeded")
			}
			if st, err := Download(session(t, remote, 0, 0), "/f", dst, opt); err != nil || st.Resumed == 0 {
				t.Fatalf("resumed download: %+v, %v", st, err)
			}
			data[0] ^= 0xff
			mustEqualFile(t, dst, data)
		})
	}
}

// An agent from before the algorithm was named ignores the request's
// field and answers SHA-256 without naming it: every comparison still
// holds, the local side hashing again with SHA-256.
func TestChecksumFromAnOldAgent(t *testing.T) {
	local, remote := t.TempDir(), t.TempDir()
	data := randomFile(t, filepath.Join(local, "f"), 2<<20+5)
	c := oldAgentSession(t, remote)
	if _, err := Upload(c, filepath.Join(local, "f"), "/f", Options{}); err != nil {
		t.Fatal(err)
	}
	mustEqualFile(t, filepath.Join(remote, "f"), data)
	if sum, err := c.Sum("/f"); err != nil || sum != expected(agentapi.ChecksumSHA256, data) {
		t.Fatalf("sum %v, %v: want SHA-256", sum, err)
	}
	if st, err := Upload(c, filepath.Join(local, "f"), "/f", Options{}); err != nil || st.Skipped != 1 {
		t.Fatalf("second upload: %+v, %v", st, err)
	}
	back := filepath.Join(local, "back")
	if _, err := Download(c, "/f", back, Options{}); err != nil {
		t.Fatal(err)
	}
	mustEqualFile(t, back, data)
	if st, err := Download(c, "/f", back, Options{}); err != nil || st.Skipped != 1 {
		t.Fatalf("second download: %+v, %v", st, err)
	}
	// A changed remote file is still caught on the way down.
	os.WriteFile(filepath.Join(remote, "f"), []byte("changed"), 0o644)
	if st, err := Download(c, "/f", back, Options{}); err != nil || st.Files != 1 {
		t.Fatalf("download of a changed file: %+v, %v", st, err)
	}
	mustEqualFile(t, back, []byte("changed"))
}

// An unknown algorithm is refused before anything is written, and the
// session goes on.
func TestUnknownChecksum(t *testing.T) {
	local, remote := t.TempDir(), t.TempDir()
	randomFile(t, filepath.Join(local, "f"), 1000)
	c := session(t, remote, 0, 0)
	var fe *agentapi.FileError
	if _, err := Upload(c, filepath.Join(local, "f"), "/f", Options{Checksum: "md5"}); !errors.As(err, &fe) || fe.Code != agentapi.FileInvalid {
		t.Fatalf("upload with md5: %v, want %s", err, agentapi.FileInvalid)
	}
	// The agent refuses it too, from a client that asks anyway.
	c.checksum = "md5"
	for _, op := range []func() error{
		func() error { _, err := c.Put("/f", io.LimitReader(nil, 0), 0, 0, 0); return err },
		func() error { _, err := c.Sum("/f"); return err },
		func() error { _, err := c.Get("/f", 0, io.Discard, nil); return err },
	} {
		if err := op(); !errors.As(err, &fe) || fe.Code != agentapi.FileInvalid {
			t.Fatalf("op with md5: %v, want %s", err, agentapi.FileInvalid)
		}
	}
	entries, _ := os.ReadDir(remote)
	if len(entries) != 0 {
		t.Fatalf("the refused put left %v", entries)
	}
	if err := c.SetChecksum(""); err != nil {
		t.Fatal(err)
	}
	if _, err := Upload(c, filepath.Join(local, "f"), "/f", Options{}); err != nil {
		t.Fatalf("the session after the refusals: %v", err)
	}
}

// oldAgentSession serves dir as an agent from before the checksum was
// named: a proxy drops the field from every header, both ways.
func oldAgentSession(t *testing.T, dir string) *Client {
	t.Helper()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	cli, p1 := net.Pipe()
	p2, srv := net.Pipe()
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); Serve(t.Context(), srv, rootFS{root}); srv.Close() }()
	go func() { defer wg.Done(); dropChecksum(p1, p2); p2.Close() }()
	go func() { defer wg.Done(); dropChecksum(p2, p1); p1.Close() }()
	t.Cleanup(func() { cli.Close(); wg.Wait(); root.Close() })
	return NewClient(cli)
}

// dropChecksum copies frames from src to dst, without the "checksum"
// field of the headers.
func dropChecksum(src, dst net.Conn) {
	r, w := newFrameReader(src), newFrameWriter(dst)
	for {
		typ, n, err := r.next()
		if err != nil {
			return
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(r.r, b); err != nil {
			return
		}
		if typ == frameHeader {
			var m map[string]any
			if json.Unmarshal(b, &m) != nil {
				return
			}
			delete(m, "checksum")
			b, _ = json.Marshal(m)
		}
		if w.frame(typ, b) != nil || w.w.Flush() != nil {
			return
		}
	}
}
