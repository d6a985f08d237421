//go:build linux

// Package files is the agent's side of `gpucloud volumes cp` and
// `gpucloud instances cp`: it serves the files protocol
// (internal/filexfer) on a volume's directory or a running instance's
// filesystem.
//
// The agent runs as root and the tenant controls every name in the tree
// it serves: a workload can plant a symbolic link to /etc/shadow, a
// "../.." or a FIFO where a file is expected. So every path is resolved
// by the kernel with openat2 and RESOLVE_IN_ROOT|RESOLVE_NO_MAGICLINKS
// relative to a descriptor of the root (the volume's directory, the
// container's root through its init process's /proc/PID/root, the process
// runtime's working directory): an absolute link or a ".." is resolved as
// if the root were "/", and /proc's magic links are refused. Only regular
// files are read or written (a device or FIFO is opened as O_PATH, looked
// at, and refused), never on procfs or sysfs, and what the agent creates
// belongs to the instance's user or the volume's owner.
package files

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/internal/filexfer"
)

// resolveFlags keep every lookup inside the root.
const resolveFlags = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS

// Root is a directory tree served to a session: a filexfer.FS.
type Root struct {
	dir *os.File // O_PATH descriptor of the root
	// uid and gid own what the session creates; -1: the agent's own.
	uid, gid int
}

var _ filexfer.FS = (*Root)(nil)

// OpenRoot opens dir as a session's root; uid and gid own the files and
// directories the session creates (-1: leave them the agent's).
func OpenRoot(dir string, uid, gid int) (*Root, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open root", Path: dir, Err: err}
	}
	return &Root{dir: os.NewFile(uintptr(fd), dir), uid: uid, gid: gid}, nil
}

// Close closes the root's descriptor.
func (r *Root) Close() error { return r.dir.Close() }

// openat2 opens name (clean, relative to the root) inside the root.
func (r *Root) openat2(name string, flags uint64, mode uint32) (*os.File, error) {
	for {
		fd, err := unix.Openat2(int(r.dir.Fd()), name, &unix.OpenHow{
			Flags: flags | unix.O_CLOEXEC, Mode: uint64(mode), Resolve: resolveFlags})
		if err == unix.EINTR || err == unix.EAGAIN {
			// EAGAIN: a rename raced the lookup (RESOLVE_IN_ROOT retries).
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "open", Path: name, Err: err}
		}
		return os.NewFile(uintptr(fd), name), nil
	}
}

// Filesystems the agent never reads or writes through a session: their
// files are the kernel's, which a container's root can mount.
var kernelFS = map[int64]string{
	unix.PROC_SUPER_MAGIC: "proc", unix.SYSFS_MAGIC: "sysfs", unix.CGROUP_SUPER_MAGIC: "cgroup",
	unix.CGROUP2_SUPER_MAGIC: "cgroup2", unix.DEBUGFS_MAGIC: "debugfs", unix.TRACEFS_MAGIC: "tracefs",
	unix.SECURITYFS_MAGIC: "securityfs", unix.BPF_FS_MAGIC: "bpf",
}

// check refuses a descriptor on a kernel filesystem.
func check(f *os.File, name string) error {
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &st); err != nil {
		return &fs.PathError{Op: "statfs", Path: name, Err: err}
	}
	if k, ok := kernelFS[int64(st.Type)]; ok {
		return &agentapi.FileError{Code: agentapi.FilePermission, Message: name + " is on " + k + ", which copies do not touch"}
	}
	return nil
}

// openRegular opens the existing regular file name with flags (O_RDONLY or
// O_RDWR): looked at through an O_PATH descriptor first, so that a device
// or FIFO is never opened for real, then reopened through it.
func (r *Root) openRegular(name string, flags int, nofollow bool) (*os.File, error) {
	pflags := uint64(unix.O_PATH)
	if nofollow {
		pflags |= unix.O_NOFOLLOW
	}
	p, err := r.openat2(name, pflags, 0)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	fi, err := p.Stat()
	if err != nil {
		return nil, err
	}
	switch {
	case fi.IsDir():
		return nil, &fs.PathError{Op: "open", Path: name, Err: unix.EISDIR}
	case !fi.Mode().IsRegular():
		return nil, &agentapi.FileError{Code: agentapi.FilePermission, Message: name + " is not a regular file (" + fi.Mode().Type().String() + ")"}
	}
	if err := check(p, name); err != nil {
		return nil, err
	}
	// The agent's own /proc reopens the very inode the O_PATH descriptor
	// holds, with no second lookup in the tenant's tree.
	fd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(int(p.Fd())), flags|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "reopen", Path: name, Err: err}
	}
	return os.NewFile(uintptr(fd), name), nil
}

func info(name string, fi fs.FileInfo) agentapi.FileInfo {
	return agentapi.FileInfo{Path: name, Size: fi.Size(), Mode: uint32(fi.Mode().Perm()), IsDir: fi.IsDir()}
}

// Stat describes name (a link inside the root followed).
func (r *Root) Stat(name string) (agentapi.FileInfo, error) {
	f, err := r.openat2(name, unix.O_PATH, 0)
	if err != nil {
		return agentapi.FileInfo{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return agentapi.FileInfo{}, err
	}
	return info(name, fi), nil
}

// Open opens the regular file name to read.
func (r *Root) Open(name string) (*os.File, error) { return r.openRegular(name, unix.O_RDONLY, false) }

// Walk lists the directory name recursively, never following links.
func (r *Root) Walk(name string, fn func(agentapi.FileInfo) error) error {
	return r.walk(name, "", fn)
}

func (r *Root) walk(name, rel string, fn func(agentapi.FileInfo) error) error {
	d, err := r.openat2(name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := check(d, name); err != nil {
		return err
	}
	for {
		ents, err := d.ReadDir(256)
		for _, e := range ents {
			var st unix.Stat_t
			if err := unix.Fstatat(int(d.Fd()), e.Name(), &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				continue // gone meanwhile
			}
			child, crel := path.Join(name, e.Name()), path.Join(rel, e.Name())
			isDir, isReg := st.Mode&unix.S_IFMT == unix.S_IFDIR, st.Mode&unix.S_IFMT == unix.S_IFREG
			if !isDir && !isReg {
				continue
			}
			fi := agentapi.FileInfo{Path: crel, Mode: st.Mode & 0o777, IsDir: isDir}
			if isReg {
				fi.Size = st.Size
			}
			if err := fn(fi); err != nil {
				return err
			}
			if isDir {
				if err := r.walk(child, crel, fn); err != nil {
					return err
				}
			}
		}
		if errors.Is(err, io.EOF) || err == nil && len(ents) == 0 {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// Mkdir makes name and its missing parents, owned by the root's user.
func (r *Root) Mkdir(name string, perm fs.FileMode) error {
	if name == "." {
		return nil
	}
	cur := "."
	for _, part := range strings.Split(name, "/") {
		parent := cur
		cur = path.Join(cur, part)
		if fi, err := r.Stat(cur); err == nil {
			if !fi.IsDir {
				return &fs.PathError{Op: "mkdir", Path: cur, Err: unix.ENOTDIR}
			}
			continue
		}
		if err := r.mkdirIn(parent, part, perm); err != nil {
			return err
		}
	}
	return nil
}

// mkdirIn makes base in the directory parent and gives it to the root's
// user.
func (r *Root) mkdirIn(parent, base string, perm fs.FileMode) error {
	d, err := r.openat2(parent, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := check(d, parent); err != nil {
		return err
	}
	if err := unix.Mkdirat(int(d.Fd()), base, uint32(perm.Perm())); err != nil && err != unix.EEXIST {
		return &fs.PathError{Op: "mkdir", Path: path.Join(parent, base), Err: err}
	}
	return r.chown(d, base)
}

// chown gives base in the directory d to the root's user, not following
// a link.
func (r *Root) chown(d *os.File, base string) error {
	if r.uid < 0 && r.gid < 0 {
		return nil
	}
	if err := unix.Fchownat(int(d.Fd()), base, r.uid, r.gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &fs.PathError{Op: "chown", Path: base, Err: err}
	}
	return nil
}

// OpenPartial opens name's partial file to read and write, creating it
// (and name's missing parents) owned by the root's user.
func (r *Root) OpenPartial(name string) (*os.File, error) {
	if err := r.Mkdir(path.Dir(name), 0o755); err != nil {
		return nil, err
	}
	pname := filexfer.PartialName(name)
	f, err := r.openRegular(pname, unix.O_RDWR, true)
	if err != nil && errors.Is(err, fs.ErrNotExist) {
		f, err = r.createPartial(pname)
	}
	if err != nil {
		return nil, err
	}
	// One writer per partial file: two copies resuming the same file
	// at once would each truncate and append under the other. The lock
	// goes with the descriptor when the put ends.
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if err == unix.EWOULDBLOCK {
			return nil, &agentapi.FileError{Code: agentapi.FileBusy, Message: name + ": another copy is writing it; wait for it to end"}
		}
		return nil, &fs.PathError{Op: "lock", Path: pname, Err: err}
	}
	return f, nil
}

// createPartial creates the partial file pname, owned by the root's user.
func (r *Root) createPartial(pname string) (*os.File, error) {
	f, err := r.openat2(pname, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, err
	}
	if err := check(f, pname); err != nil {
		f.Close()
		return nil, err
	}
	if r.uid >= 0 || r.gid >= 0 {
		if err := f.Chown(r.uid, r.gid); err != nil {
			f.Close()
			return nil, err
		}
	}
	return f, nil
}

// PartialSize is the size of name's partial file (0: none).
func (r *Root) PartialSize(name string) (int64, error) {
	f, err := r.openat2(filexfer.PartialName(name), unix.O_PATH|unix.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return 0, err
	}
	return fi.Size(), nil
}

// Commit gives name's partial file its permissions and renames it to name.
func (r *Root) Commit(name string, perm fs.FileMode) error {
	pname := filexfer.PartialName(name)
	f, err := r.openRegular(pname, unix.O_RDONLY, true)
	if err != nil {
		return err
	}
	err = f.Chmod(perm.Perm())
	f.Close()
	if err != nil {
		return err
	}
	dir, base := path.Split(name)
	d, err := r.openat2(path.Clean("./"+dir), unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := unix.Renameat(int(d.Fd()), filexfer.PartialPrefix+base, int(d.Fd()), base); err != nil {
		return &fs.PathError{Op: "rename", Path: name, Err: err}
	}
	return nil
}

// String names the root for logs.
func (r *Root) String() string { return fmt.Sprintf("root %s (uid %d)", r.dir.Name(), r.uid) }
