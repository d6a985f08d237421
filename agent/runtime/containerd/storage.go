package containerd

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/containerd/containerd/v2/core/mount"

	"github.com/gpucloud/gpucloud/agent/runtime"
)

// The container's writable root filesystem, limited. containerd's
// overlayfs snapshotter keeps a container's writes in the upper directory
// of its active snapshot (<root>/io.containerd.snapshotter.v1.overlayfs/
// snapshots/<n>/fs, with overlayfs's work directory beside it), on the
// host's filesystem and unlimited. The runtime mounts a filesystem image
// of Config.RootSize over that snapshot directory before the task mounts
// the root filesystem, with fs and work made again inside it (overlayfs
// wants them on one filesystem): the workload's writes to its root land in
// the image, and past its size they fail with ENOSPC. The image is
// BaseDir/<id>/rootfs.img; it is unmounted and removed before the
// container and its snapshot are deleted (the snapshotter renames the
// snapshot's directory, which a mount point refuses). XFS project quotas
// would limit the upper directory in place, but only where containerd's
// root is on XFS mounted with prjquota, which the host's root filesystem
// (ext4) is not; an image works on any filesystem.

// Defaults of the storage limits in Config.
const (
	// DefaultRootSize is the most a container writes to its root
	// filesystem.
	DefaultRootSize = 10 << 30
	// DefaultLogSize is the most one file of a workload's log holds, and
	// DefaultLogFiles how many files it is kept in (the current one and
	// the rotated ones): at most DefaultLogSize*DefaultLogFiles on disk.
	DefaultLogSize  = 100 << 20
	DefaultLogFiles = 3
)

// rootImage is the filesystem image of a container's writable root.
func (r *Runtime) rootImage(id string) string {
	return filepath.Join(r.cfg.BaseDir, id, "rootfs.img")
}

// limitRoot puts the writable layer of container id's new snapshot on a
// filesystem image of Config.RootSize. A runtime without the limit
// (RootSize negative) leaves it on the host's filesystem.
func (r *Runtime) limitRoot(ctx context.Context, id string) error {
	if r.cfg.RootSize < 0 {
		return nil
	}
	ms, err := r.client.SnapshotService(r.cfg.Snapshotter).Mounts(ctx, id)
	if err != nil {
		return fmt.Errorf("root filesystem: %w", err)
	}
	dir, err := snapshotDir(ms)
	if err != nil {
		return err
	}
	type saved struct {
		mode     fs.FileMode
		uid, gid int
	}
	dirs := map[string]saved{}
	for _, n := range []string{"fs", "work"} {
		fi, err := os.Lstat(filepath.Join(dir, n))
		if err != nil {
			return fmt.Errorf("root filesystem: %w", err)
		}
		st, _ := fi.Sys().(*syscall.Stat_t)
		if st == nil {
			return fmt.Errorf("root filesystem: no owner of %s", filepath.Join(dir, n))
		}
		dirs[n] = saved{fi.Mode().Perm(), int(st.Uid), int(st.Gid)}
	}
	img := r.rootImage(id)
	if err := os.MkdirAll(filepath.Dir(img), 0o750); err != nil {
		return err
	}
	_ = os.Remove(img) // of a start that failed halfway
	if err := runtime.MakeImage(img, r.cfg.RootSize); err != nil {
		return fmt.Errorf("root filesystem: %w", err)
	}
	if err := runtime.MountImage(img, dir); err != nil {
		_ = os.Remove(img)
		return fmt.Errorf("root filesystem: %w", err)
	}
	for n, s := range dirs {
		p := filepath.Join(dir, n)
		err := errors.Join(os.Mkdir(p, s.mode), os.Chmod(p, s.mode), os.Lchown(p, s.uid, s.gid))
		if err != nil {
			_ = r.releaseRoot(id, dir)
			return fmt.Errorf("root filesystem: %w", err)
		}
	}
	return nil
}

// releaseRoot unmounts container id's root filesystem image from its
// snapshot directory (found from the snapshot when dir is empty) and
// removes the image. A container without one, or whose snapshot is gone,
// is no error.
func (r *Runtime) releaseRoot(id, dir string) error {
	img := r.rootImage(id)
	if dir == "" {
		ms, err := r.client.SnapshotService(r.cfg.Snapshotter).Mounts(r.bg, id)
		if err == nil {
			dir, _ = snapshotDir(ms)
		}
	}
	if dir != "" {
		if err := runtime.Unmount(dir); err != nil {
			return fmt.Errorf("root filesystem of %s: %w", id, err)
		}
	}
	if err := os.Remove(img); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("root filesystem of %s: %w", id, err)
	}
	return nil
}

// snapshotDir is the directory of an overlayfs snapshot, from its mounts:
// the parent of the upper directory (an overlay) or of the bind-mounted
// fs directory (a snapshot without parents).
func snapshotDir(ms []mount.Mount) (string, error) {
	for _, m := range ms {
		for _, o := range m.Options {
			if up, ok := strings.CutPrefix(o, "upperdir="); ok {
				return filepath.Dir(filepath.Clean(up)), nil
			}
		}
		if m.Type == "bind" && filepath.Base(m.Source) == "fs" {
			return filepath.Dir(filepath.Clean(m.Source)), nil
		}
	}
	return "", fmt.Errorf("root filesystem: no writable layer in the snapshot's mounts %v (want containerd's overlayfs snapshotter)", ms)
}
