package runtime

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Filesystem images: a sparse file holding an ext4 filesystem of a fixed
// size, loop-mounted where a workload's files go (a volume, a container's
// writable root). The filesystem's size is the most it can hold: a
// workload that writes past it gets ENOSPC, and nothing else on the host
// fills up. The file is sparse, so it takes on the host's disk what is
// written in it (plus the filesystem's own metadata), never more than its
// size. These need root and the host's mkfs.ext4, mount and umount
// (Debian's e2fsprogs, mount).

// MakeImage makes a sparse file of size bytes at path holding an empty
// ext4 filesystem with no blocks reserved for root (-m 0: a tenant's
// volume is all the tenant's) and no lost+found. It is made under a
// temporary name and renamed, so that a crash leaves no half-made image
// at path. An existing file at path is an error.
func MakeImage(path string, size int64) error { return makeImage(path, size, "") }

// MakeScratchImage is MakeImage for an instance store, which is made
// anew for each run and never grows: without the inode that reserves room
// to grow the filesystem online, and with two superblock backups rather
// than dozens (sparse_super2), an empty image of 7.5 TiB takes 27 MiB of
// the host's disk instead of 106 MiB, made in about a second.
func MakeScratchImage(path string, size int64) error {
	return makeImage(path, size, "^resize_inode,sparse_super2")
}

func makeImage(path string, size int64, features string) error {
	if size < 1<<20 {
		return fmt.Errorf("filesystem image %s: %d bytes is too small: %w", path, size, ErrInvalid)
	}
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("filesystem image %s: %w", path, fs.ErrExist)
	}
	tmp := path + ".new"
	_ = os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		// nodiscard: the file is new and sparse, there is nothing to
		// discard; lazy init keeps mkfs of a large image fast.
		args := []string{"-F", "-q", "-m", "0", "-E", "nodiscard,lazy_itable_init=1,lazy_journal_init=1"}
		if features != "" {
			args = append(args, "-O", features)
		}
		err = run("mkfs.ext4", append(args, tmp)...)
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("filesystem image %s: %w", path, err)
	}
	return nil
}

// MountImage mounts the filesystem image img at dir (which must exist) on
// a loop device, nosuid and nodev. The loop device goes with the mount
// (autoclear), so Unmount leaves nothing attached to img. With discard,
// what the workload deletes is punched out of the image: the file takes
// on the host's disk what the filesystem holds now, not the most it ever
// held. A fresh image's lost+found is removed: the workload sees an empty
// directory.
func MountImage(img, dir string) error {
	if err := run("mount", "-t", "ext4", "-o", "loop,nosuid,nodev,noatime,discard", img, dir); err != nil {
		return fmt.Errorf("mount %s at %s: %w", img, dir, err)
	}
	lf := filepath.Join(dir, "lost+found")
	if entries, err := os.ReadDir(lf); err == nil && len(entries) == 0 {
		_ = os.Remove(lf)
	}
	return nil
}

// Unmount unmounts the filesystem mounted at dir; a dir with nothing
// mounted is no error. A loop device the mount held is detached by the
// kernel asynchronously (autoclear): Unmount waits for that, up to
// loopDetachWait, so that a caller that removes the image next removes
// blocks nothing holds.
func Unmount(dir string) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	points, err := mountPoints()
	if err != nil {
		return err
	}
	source, ok := points[filepath.Clean(dir)]
	if !ok {
		return nil
	}
	if err := run("umount", dir); err != nil {
		return fmt.Errorf("unmount %s: %w", dir, err)
	}
	if loop, ok := strings.CutPrefix(source, "/dev/"); ok && strings.HasPrefix(loop, "loop") {
		backing := filepath.Join("/sys/block", loop, "loop", "backing_file")
		for deadline := time.Now().Add(loopDetachWait); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if _, err := os.Stat(backing); err != nil {
				break
			}
		}
	}
	return nil
}

// loopDetachWait bounds how long Unmount waits for the kernel to detach
// the loop device of an unmounted image.
const loopDetachWait = 5 * time.Second

// Mounted reports whether a filesystem is mounted at dir, as the host's
// mount table (/proc/self/mountinfo) says.
func Mounted(dir string) (bool, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return false, err
	}
	points, err := mountPoints()
	if err != nil {
		return false, err
	}
	_, ok := points[filepath.Clean(dir)]
	return ok, nil
}

// ImageAttached reports whether a loop device has img as its backing
// file: the image's blocks are still in use (mounted here or in some
// container's mount namespace) even after its name is removed.
func ImageAttached(img string) (bool, error) {
	img, err := filepath.Abs(img)
	if err != nil {
		return false, err
	}
	files, err := filepath.Glob("/sys/block/loop*/loop/backing_file")
	if err != nil {
		return false, err
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // detached meanwhile
		}
		// A backing file unlinked while attached reads "PATH (deleted)".
		name := strings.TrimSuffix(strings.TrimSpace(string(b)), " (deleted)")
		if name == img {
			return true, nil
		}
	}
	return false, nil
}

// mountPoints reads the mount points of the process's mount namespace,
// with the source (the device) mounted at each; of several mounts at one
// point, the last (the one on top).
func mountPoints() (map[string]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT POINT OPTIONS [OPTIONAL...] - TYPE SOURCE SUPEROPTIONS
		f := strings.Fields(sc.Text())
		if len(f) < 5 {
			continue
		}
		source := ""
		for i := 5; i+2 < len(f); i++ {
			if f[i] == "-" {
				source = unescapeMount(f[i+2])
				break
			}
		}
		out[unescapeMount(f[4])] = source
	}
	return out, sc.Err()
}

// unescapeMount undoes the kernel's octal escapes in a mountinfo path
// (space as \040, tab, newline, backslash).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// run runs a host program, with its output in the error when it fails.
func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		var ee *exec.Error
		if errors.As(err, &ee) {
			return fmt.Errorf("%s is not installed (Debian: e2fsprogs, mount): %w", name, err)
		}
		return fmt.Errorf("%s: %w: %s", name, err, strings.TrimSpace(string(out)))
	}
	return nil
}
