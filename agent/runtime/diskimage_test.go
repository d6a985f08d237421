package runtime

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// needLoop skips a test that mounts filesystem images where it cannot
// (not root, no mkfs.ext4), and fails it instead when CI is set.
func needLoop(t *testing.T) {
	t.Helper()
	why := ""
	if os.Geteuid() != 0 {
		why = "loop mounts need root"
	}
	for _, p := range []string{"mkfs.ext4", "mount", "umount"} {
		if _, err := exec.LookPath(p); err != nil && why == "" {
			why = p + " is not installed"
		}
	}
	if why == "" {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("the filesystem image tests must run in CI: %s", why)
	}
	t.Skipf("skipping: %s", why)
}

func TestUnescapeMount(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"/a/b", "/a/b"},
		{`/a\040b`, "/a b"},
		{`/tab\011x\012y`, "/tab\tx\ny"},
		{`/back\134slash`, `/back\slash`},
		{`/short\04`, `/short\04`},
		{`/not\999octal`, `/not\999octal`},
	} {
		if got := unescapeMount(c.in); got != c.want {
			t.Errorf("unescapeMount(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestImageLimits: a mounted image holds at most its size (a write past
// it is ENOSPC), takes on the host's disk about what was written in it,
// and once unmounted is attached to no loop device.
func TestImageLimits(t *testing.T) {
	needLoop(t)
	dir := t.TempDir()
	img, mnt := filepath.Join(dir, "v.img"), filepath.Join(dir, "v")
	if err := os.Mkdir(mnt, 0o750); err != nil {
		t.Fatal(err)
	}
	const size = 64 << 20
	if err := MakeImage(img, size); err != nil {
		t.Fatal(err)
	}
	if err := MakeImage(img, size); !errors.Is(err, os.ErrExist) {
		t.Errorf("making it again: %v, want exists", err)
	}
	if err := MakeImage(filepath.Join(dir, "tiny.img"), 4096); !errors.Is(err, ErrInvalid) {
		t.Errorf("a 4 KiB image: %v, want invalid", err)
	}
	if err := MountImage(img, mnt); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = Unmount(mnt) })
	if ok, err := Mounted(mnt); err != nil || !ok {
		t.Fatalf("Mounted = %v, %v", ok, err)
	}
	if entries, _ := os.ReadDir(mnt); len(entries) != 0 {
		t.Errorf("a new image holds %v", entries)
	}
	// Fill it: the write that does not fit is ENOSPC.
	f, err := os.Create(filepath.Join(mnt, "fill"))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	var written int64
	for written < 2*size {
		n, err := f.Write(buf)
		written += int64(n)
		if err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("write at %d: %v, want ENOSPC", written, err)
			}
			break
		}
	}
	f.Close()
	if written >= size {
		t.Errorf("wrote %d bytes into a %d-byte image", written, size)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(img, &st); err != nil {
		t.Fatal(err)
	}
	if used := st.Blocks * 512; used > size {
		t.Errorf("the image takes %d bytes on disk, more than its %d", used, size)
	}
	if ok, _ := ImageAttached(img); !ok {
		t.Error("ImageAttached = false while mounted")
	}
	// What is deleted leaves the host's disk (discard punches it out).
	full := allocatedBytes(t, img)
	if err := os.Remove(filepath.Join(mnt, "fill")); err != nil {
		t.Fatal(err)
	}
	// The discards follow the journal's commit.
	after := full
	for deadline := time.Now().Add(10 * time.Second); after > full/2 && time.Now().Before(deadline); {
		syscall.Sync()
		time.Sleep(100 * time.Millisecond)
		after = allocatedBytes(t, img)
	}
	if after > full/2 {
		t.Errorf("after deleting the fill the image takes %d bytes on disk, was %d", after, full)
	}
	if err := os.WriteFile(filepath.Join(mnt, "fill"), make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	written = 1 << 20
	if err := Unmount(mnt); err != nil {
		t.Fatal(err)
	}
	if err := Unmount(mnt); err != nil {
		t.Errorf("unmounting again: %v", err)
	}
	if ok, err := Mounted(mnt); err != nil || ok {
		t.Errorf("Mounted after Unmount = %v, %v", ok, err)
	}
	if ok, err := ImageAttached(img); err != nil || ok {
		t.Errorf("ImageAttached after Unmount = %v, %v", ok, err)
	}
	// Mounted again, the data is there.
	if err := MountImage(img, mnt); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(mnt, "fill")); err != nil || fi.Size() != written {
		t.Errorf("after a remount: %v, %v (wrote %d)", fi, err, written)
	}
	if err := Unmount(mnt); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(img + ".new"); !os.IsNotExist(err) {
		t.Errorf("a temporary image is left: %v", err)
	}
	if err := MountImage(filepath.Join(dir, "missing.img"), mnt); err == nil || !strings.Contains(err.Error(), "missing.img") {
		t.Errorf("mounting a missing image: %v", err)
	}
}

func allocatedBytes(t *testing.T, p string) int64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}
