package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"github.com/gpucloud/gpucloud/agent/runtime"
)

// Files sessions on a volume kept in a filesystem image (VolumeImages).
// The image is mounted at the volume's directory while an instance of
// this host uses the volume (mountedImage). A `volumes cp` of a detached
// volume finds it unmounted: AcquireVolume mounts it for the session's
// length and its release unmounts it again, unless an instance started
// with the volume meanwhile (the agent's mount record then exists, and
// the agent unmounts it after the instance, as usual).
//
// The sessions and the agent's passes run in one process: filesHeld counts
// the sessions on each volume directory, under filesMu, and the agent's
// unmounts (releaseVolumes, deleteVolume) leave a held volume alone until
// a later pass. The image is never mounted twice: a session mounts it only
// when no loop device holds it, and an instance start uses a mount that
// is there.
var (
	filesMu   sync.Mutex
	filesHeld = map[string]*filesHold{}
)

// filesHold is the files sessions on one volume directory.
type filesHold struct {
	n int
	// mounted says a session mounted the image (it was not mounted when
	// the first session came).
	mounted bool
}

// filesInUse reports whether a files session holds the volume directory
// dir. The caller holds filesMu.
func filesInUse(dir string) bool {
	h := filesHeld[filepath.Clean(dir)]
	return h != nil && h.n > 0
}

// AcquireVolume is VolumeRoot for a files session: the directory holding
// volume id's files now, and a release to call when the session ends.
// Where a volume is kept in a filesystem image that no instance of this
// host has mounted, it mounts the image for the session; a volume that
// has none yet (never used) gets its image of sizeGiB, as its first
// instance would make it (without a size it is an error naming what to
// do). Concurrent sessions on one volume share the mount.
func AcquireVolume(cfg Config, id string, shared bool, sizeGiB int64) (string, func(), error) {
	if shared || !cfg.VolumeImages {
		dir, err := VolumeRoot(cfg, id, shared)
		return dir, func() {}, err
	}
	if err := runtime.ValidateID(id); err != nil {
		return "", nil, err
	}
	dir := filepath.Clean(VolumePath(cfg, id))
	img := dir + imageSuffix
	filesMu.Lock()
	defer filesMu.Unlock()
	h := filesHeld[dir]
	if h == nil {
		h = &filesHold{}
		mounted, err := runtime.Mounted(dir)
		if err != nil {
			return "", nil, err
		}
		if !mounted {
			made := false
			if _, err := os.Stat(img); errors.Is(err, fs.ErrNotExist) {
				if sizeGiB <= 0 {
					return "", nil, fmt.Errorf("%w: volume %s has no files on this host: it was never attached to an instance here", ErrVolumeNotMounted, id)
				}
				if err := os.MkdirAll(filepath.Dir(img), 0o750); err != nil {
					return "", nil, err
				}
				if err := runtime.MakeImage(img, sizeGiB<<30); err != nil {
					return "", nil, fmt.Errorf("volume %s: %w", id, err)
				}
				made = true
			} else if err != nil {
				return "", nil, err
			}
			if held, err := runtime.ImageAttached(img); err != nil || held {
				if err == nil {
					err = fmt.Errorf("volume %s: its image is still held by an instance that is ending; retry in a few seconds", id)
				}
				return "", nil, err
			}
			if err := os.MkdirAll(dir, 0o750); err != nil {
				return "", nil, err
			}
			if err := runtime.MountImage(img, dir); err != nil {
				if made {
					_ = os.Remove(img)
				}
				return "", nil, fmt.Errorf("volume %s: %w", id, err)
			}
			h.mounted = true
		}
		filesHeld[dir] = h
	}
	h.n++
	var once sync.Once
	release := func() { once.Do(func() { releaseFiles(cfg, id, dir) }) }
	return dir, release, nil
}

// releaseFiles ends one files session on volume id at dir: the last one
// unmounts the image it mounted, unless an instance uses the volume now.
func releaseFiles(cfg Config, id, dir string) {
	filesMu.Lock()
	defer filesMu.Unlock()
	h := filesHeld[dir]
	if h == nil {
		return
	}
	if h.n--; h.n > 0 {
		return
	}
	delete(filesHeld, dir)
	if !h.mounted {
		return
	}
	marker := filepath.Join(cfg.DataDir, "mounts", kindVolume, id)
	if _, err := os.Stat(marker); err == nil {
		return // an instance started with it: the agent unmounts it after
	}
	if err := runtime.Unmount(dir); err != nil {
		log := cfg.Log
		if log == nil {
			log = slog.Default()
		}
		log.Warn("agent: a files session's volume mount was not released", "volume", id, "err", err)
	}
}
