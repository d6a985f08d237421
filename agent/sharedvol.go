package agent

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gpucloud/gpucloud/agent/runtime"
)

// Shared volumes. Each is a directory, SharedVolumeDir/<id>, on a
// filesystem the operator mounts at the same path on every host, bind-
// mounted read-write into every instance that names it, on any host at
// once. A filesystem image per volume would not do: ext4 is not a
// cluster filesystem, and two hosts mounting one image corrupt it. The
// size is kept instead by the filesystem itself:
//   - on XFS mounted with prjquota, the directory is an XFS project
//     (its ID derived from the volume's ID) with a hard block limit of
//     the volume's size: a write past it fails with EDQUOT (or ENOSPC),
//     on whichever host writes;
//   - on anything else (NFS, CephFS, Lustre) gpucloud enforces nothing:
//     the filer's own quotas must (docs/RUNTIME.md).
//
// A deleted volume's directory is removed by the first host's storage
// sweep that finds it (storage.go).

// LabelSharedVolumes is the host label of an agent with a
// SharedVolumeDir (service.LabelSharedVolumes: the scheduler places
// instances with a shared volume by it).
const LabelSharedVolumes = "shared-volumes"

// xfsMagic is XFS's statfs f_type.
const xfsMagic = 0x58465342

// sharedVolume makes shared volume id ready and returns its directory.
func (a *Agent) sharedVolume(id string, sizeGiB int64) (string, error) {
	if a.cfg.SharedVolumeDir == "" {
		return "", &startError{fmt.Sprintf("volume %s is shared, and this host has no shared volume directory (--shared-volume-dir)", id)}
	}
	// A missing directory is a shared filesystem that is not mounted:
	// making it would keep the volume on this host's disk, shared with
	// no one.
	if st, err := os.Stat(a.cfg.SharedVolumeDir); err != nil || !st.IsDir() {
		return "", fmt.Errorf("shared volume %s: the shared volume directory %s is missing or not a directory (is the shared filesystem mounted?)", id, a.cfg.SharedVolumeDir)
	}
	dir := filepath.Join(a.cfg.SharedVolumeDir, id)
	// Mkdir is atomic on the shared filesystem: when two hosts start
	// instances with a new volume at once, one makes it, both use it.
	if err := os.Mkdir(dir, 0o777); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("shared volume %s: %w", id, err)
	}
	// Containers run as users the host does not know: the directory is
	// everyone's, as a fresh volume's filesystem root is.
	if err := os.Chmod(dir, 0o777); err != nil {
		return "", fmt.Errorf("shared volume %s: %w", id, err)
	}
	if sizeGiB <= 0 {
		return "", &startError{fmt.Sprintf("volume %s: the server sent no size; a shared volume's size is enforced", id)}
	}
	if err := limitShared(a.cfg.SharedVolumeDir, dir, id, sizeGiB<<30); err != nil {
		return "", fmt.Errorf("shared volume %s: %w", id, err)
	}
	return dir, nil
}

// projectID is the XFS project of a shared volume: a hash of its ID, so
// that every host derives the same one with no registry. 0 is the
// default project of every file, so it is never one.
func projectID(id string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(id))
	if p := h.Sum32() &^ (1 << 31); p != 0 {
		return p
	}
	return 1
}

// onXFS reports whether path is on an XFS filesystem.
func onXFS(path string) (bool, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return false, err
	}
	return uint32(st.Type) == xfsMagic, nil
}

// limitShared keeps the volume's directory dir under size bytes, where
// base is on XFS: it makes dir an XFS project (recursively, once: a
// directory already in its project is left alone, as a large volume's
// tree takes long to walk) and sets the project's hard block limit, every
// time (cheap, and a resize takes effect). On other filesystems it does
// nothing.
func limitShared(base, dir, id string, size int64) error {
	xfs, err := onXFS(base)
	if err != nil || !xfs {
		return err
	}
	mnt, err := mountPoint(base)
	if err != nil {
		return err
	}
	p := strconv.FormatUint(uint64(projectID(id)), 10)
	cur, err := dirProject(dir)
	if err != nil {
		return err
	}
	if cur != p {
		if err := xfsQuota(mnt, "project -s -p "+dir+" "+p); err != nil {
			return err
		}
	}
	return xfsQuota(mnt, "limit -p bhard="+strconv.FormatInt(size>>10, 10)+"k "+p)
}

// unlimitShared drops a deleted shared volume's limit, so that the
// project's ID, should another volume's hash it too, starts clean.
func unlimitShared(base, id string) error {
	xfs, err := onXFS(base)
	if err != nil || !xfs {
		return err
	}
	mnt, err := mountPoint(base)
	if err != nil {
		return err
	}
	return xfsQuota(mnt, "limit -p bhard=0 "+strconv.FormatUint(uint64(projectID(id)), 10))
}

// dirProject reads dir's XFS project ID (xfs_io's lsproj).
func dirProject(dir string) (string, error) {
	out, err := exec.Command("xfs_io", "-r", "-c", "lsproj", dir).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("xfs_io lsproj %s: %w: %s", dir, err, strings.TrimSpace(string(out)))
	}
	_, v, ok := strings.Cut(strings.TrimSpace(string(out)), "=")
	if !ok {
		return "", fmt.Errorf("xfs_io lsproj %s: unexpected %q", dir, out)
	}
	return strings.TrimSpace(v), nil
}

// xfsQuota runs one expert xfs_quota command on the filesystem at mnt.
func xfsQuota(mnt, cmd string) error {
	out, err := exec.Command("xfs_quota", "-x", "-c", cmd, mnt).CombinedOutput()
	if err != nil {
		return fmt.Errorf("xfs_quota %q %s: %w: %s (is it mounted with prjquota?)", cmd, mnt, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// mountPoint is the mount point of the filesystem path is on.
func mountPoint(path string) (string, error) {
	out, err := exec.Command("findmnt", "-n", "-o", "TARGET", "--target", path).Output()
	if err != nil {
		return "", fmt.Errorf("findmnt %s: %w", path, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// heldShared lists the shared volumes that have a directory under
// SharedVolumeDir.
func (a *Agent) heldShared() ([]string, error) {
	if a.cfg.SharedVolumeDir == "" {
		return nil, nil
	}
	entries, err := os.ReadDir(a.cfg.SharedVolumeDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") && runtime.ValidateID(e.Name()) == nil && strings.HasPrefix(e.Name(), "v-") {
			ids = append(ids, e.Name())
		}
	}
	return ids, nil
}

// deleteShared removes a deleted shared volume's directory and its limit.
// Several hosts may sweep it at once: what one removed the others skip.
func (a *Agent) deleteShared(id string) error {
	dir := filepath.Join(a.cfg.SharedVolumeDir, id)
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("deleted shared volume %s: %w", id, err)
	}
	if err := unlimitShared(a.cfg.SharedVolumeDir, id); err != nil {
		return fmt.Errorf("deleted shared volume %s: %w", id, err)
	}
	a.log.Info("agent: deleted shared volume's directory removed", "volume", id)
	return nil
}
