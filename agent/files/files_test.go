//go:build linux

package files

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/internal/filexfer"
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true: this test needs root (it chowns and mounts)")
		}
		t.Skip("needs root")
	}
}

// client serves root over a pipe.
func client(t *testing.T, root *Root) *filexfer.Client {
	t.Helper()
	cli, srv := net.Pipe()
	done := make(chan struct{})
	go func() { defer close(done); filexfer.Serve(t.Context(), srv, root); srv.Close() }()
	t.Cleanup(func() { cli.Close(); <-done; root.Close() })
	return filexfer.NewClient(cli)
}

func openRoot(t *testing.T, dir string, uid, gid int) *Root {
	t.Helper()
	r, err := OpenRoot(dir, uid, gid)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func code(err error) string {
	var fe *agentapi.FileError
	if errors.As(err, &fe) {
		return fe.Code
	}
	return fmt.Sprint(err)
}

// A host file the tests check is never read nor written through a root.
func hostFile(t *testing.T) (string, []byte) {
	p := filepath.Join(t.TempDir(), "host-secret")
	data := []byte("host secret\n")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p, data
}

func TestLinksNeverLeaveTheRoot(t *testing.T) {
	secret, secretData := hostFile(t)
	dir := t.TempDir()
	os.Symlink(secret, filepath.Join(dir, "abs-link"))
	os.Symlink("../../../../../../.."+secret, filepath.Join(dir, "rel-link"))
	os.Symlink(filepath.Dir(secret), filepath.Join(dir, "dir-link"))
	os.Symlink("/etc/passwd", filepath.Join(dir, "passwd"))
	os.Symlink(secret, filepath.Join(dir, filexfer.PartialPrefix+"planted"))
	c := client(t, openRoot(t, dir, -1, -1))
	for _, tt := range []struct {
		desc, path string
	}{
		{"absolute link to a host file", "/abs-link"},
		{"relative link climbing out", "/rel-link"},
		{"link to /etc/passwd", "/passwd"},
		{"dot-dot path", "/../../../../" + secret},
		{"through a linked directory", "/dir-link/host-secret"},
	} {
		t.Run(tt.desc, func(t *testing.T) {
			var buf bytes.Buffer
			_, err := c.Get(tt.path, 0, &buf, nil)
			if code(err) != agentapi.FileNotFound {
				t.Fatalf("get %s: %v (%q), want not_found", tt.path, err, buf.String())
			}
		})
	}
	// Writing through links lands inside the root, never on the host.
	for _, p := range []string{"/abs-link", "/dir-link/host-secret", "/planted"} {
		if _, err := c.Put(p, strings.NewReader("x"), 0, 1, 0); err == nil && p == "/planted" {
			t.Errorf("put over a planted partial link succeeded")
		}
	}
	if got, _ := os.ReadFile(secret); !bytes.Equal(got, secretData) {
		t.Fatalf("the host file changed: %q", got)
	}
	// The put to the link replaced the link itself, inside the root.
	if fi, err := os.Lstat(filepath.Join(dir, "abs-link")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("the put to a link: %v, %v: want the link replaced by a file", fi, err)
	}
	// A link inside the root to a file inside it is followed there.
	os.WriteFile(filepath.Join(dir, "real"), []byte("inside"), 0o644)
	os.Symlink("/real", filepath.Join(dir, "inner-link"))
	var buf bytes.Buffer
	if _, err := c.Get("/inner-link", 0, &buf, nil); err != nil || buf.String() != "inside" {
		t.Errorf("inner link: %q, %v", buf.String(), err)
	}
}

func TestRawPathsStayInside(t *testing.T) {
	secret, _ := hostFile(t)
	r := openRoot(t, t.TempDir(), -1, -1)
	defer r.Close()
	for _, name := range []string{"../../../../../../.." + secret, secret, "a/../../.." + secret} {
		if f, err := r.Open(name); !errors.Is(err, os.ErrNotExist) {
			if f != nil {
				f.Close()
			}
			t.Errorf("open %q: %v, want not found", name, err)
		}
	}
}

func TestSpecialFilesRefused(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	if err := unix.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(filepath.Join(dir, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	c := client(t, openRoot(t, dir, -1, -1))
	for _, p := range []string{"/fifo", "/null"} {
		if _, err := c.Get(p, 0, &bytes.Buffer{}, nil); code(err) != agentapi.FilePermission {
			t.Errorf("get %s: %v, want permission", p, err)
		}
	}
	// Kernel filesystems: /proc through a root of "/".
	c = client(t, openRoot(t, "/", -1, -1))
	if _, err := c.Get("/proc/version", 0, &bytes.Buffer{}, nil); code(err) != agentapi.FilePermission {
		t.Errorf("get /proc/version: %v, want permission", err)
	}
	if _, err := c.Get("/proc/self/root/etc/hostname", 0, &bytes.Buffer{}, nil); err == nil {
		t.Errorf("a magic link was followed")
	}
}

func TestCreatedFilesBelongToTheInstance(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	const uid, gid = 1_000_123, 1_000_124
	c := client(t, openRoot(t, dir, uid, gid))
	if _, err := c.Put("/a/b/file", strings.NewReader("data"), 0, 4, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := c.Mkdir("/c/d", 0); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"a", "a/b", "a/b/file", "c", "c/d"} {
		fi, err := os.Lstat(filepath.Join(dir, p))
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if st.Uid != uid || st.Gid != gid {
			t.Errorf("%s owned by %d:%d, want %d:%d", p, st.Uid, st.Gid, uid, gid)
		}
	}
	if fi, _ := os.Stat(filepath.Join(dir, "a/b/file")); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", fi.Mode().Perm())
	}
}

func TestFullVolumeIsNoSpace(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=256k"); err != nil {
		t.Fatalf("mount a small tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	c := client(t, openRoot(t, dir, -1, -1))
	big := make([]byte, 1<<20)
	_, err := c.Put("/big", bytes.NewReader(big), 0, int64(len(big)), 0)
	if code(err) != agentapi.FileNoSpace || !strings.Contains(err.Error(), "full") {
		t.Fatalf("put past the volume's size: %v, want no_space", err)
	}
	// The session goes on.
	if _, err := c.Put("/small", strings.NewReader("ok"), 0, 2, 0); err != nil {
		t.Fatalf("after no_space: %v", err)
	}
}

type fakeRoots map[string]string

func (f fakeRoots) FilesRoot(id string) (string, int, int, error) {
	if d, ok := f[id]; ok {
		return d, -1, -1, nil
	}
	return "", 0, 0, errors.New("instance " + id + " is not running: its files are copied only while it runs")
}

func TestHandlerTargets(t *testing.T) {
	vols, inst := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(inst, "in-instance"), []byte("i"), 0o644)
	h := &Handler{VolumeDir: func(id string, _ bool, _ int64) (string, func(), error) {
		d := filepath.Join(vols, id)
		return d, func() {}, os.MkdirAll(d, 0o750)
	}, Runtime: fakeRoots{"i-1": inst}}
	for _, tt := range []struct {
		desc     string
		req      agentapi.SessionRequest
		stat     string
		wantCode string
	}{
		{"a volume's directory, made on first use", agentapi.SessionRequest{Files: target(agentapi.FilesTarget{VolumeID: "v-1"})}, "/", ""},
		{"a running instance", agentapi.SessionRequest{InstanceID: "i-1"}, "/in-instance", ""},
		{"a stopped instance", agentapi.SessionRequest{InstanceID: "i-2"}, "/", agentapi.FileInvalid},
		{"a bad volume id", agentapi.SessionRequest{Files: target(agentapi.FilesTarget{VolumeID: "../x"})}, "/", agentapi.FileInvalid},
	} {
		t.Run(tt.desc, func(t *testing.T) {
			cli, srv := net.Pipe()
			done := make(chan error, 1)
			go func() { done <- h.ServeSession(t.Context(), tt.req, srv) }()
			_, err := filexfer.NewClient(cli).Stat(tt.stat)
			cli.Close()
			<-done
			if tt.wantCode == "" && err != nil || tt.wantCode != "" && code(err) != tt.wantCode {
				t.Fatalf("stat: %v, want %q", err, tt.wantCode)
			}
		})
	}
	if fi, err := os.Stat(filepath.Join(vols, "v-1")); err != nil || !fi.IsDir() {
		t.Errorf("volume directory: %v", err)
	}
}

func target(t agentapi.FilesTarget) json.RawMessage {
	b, _ := json.Marshal(t)
	return b
}

// TestOneWriterPerFile: while one put holds a file's partial, another
// session's put of the same file is refused as busy; once it is done, the
// file can be written again.
func TestOneWriterPerFile(t *testing.T) {
	dir := t.TempDir()
	r := openRoot(t, dir, -1, -1)
	defer r.Close()
	first, err := r.OpenPartial("f")
	if err != nil {
		t.Fatal(err)
	}
	c := client(t, openRoot(t, dir, -1, -1))
	if _, err := c.Put("/f", strings.NewReader("x"), 0, 1, 0); code(err) != agentapi.FileBusy {
		t.Fatalf("a second writer: %v, want busy", err)
	}
	first.Close()
	if _, err := c.Put("/f", strings.NewReader("x"), 0, 1, 0); err != nil {
		t.Fatalf("after the first writer: %v", err)
	}
}
