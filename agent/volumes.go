package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/agentapi"
)

// Volumes on the host. Each volume is a directory, VolumeDir/<id> (or
// DataDir/volumes/<id>), bind-mounted into its instance's container. With
// Config.VolumeImages the directory is the mount point of a filesystem of
// the volume's size, VolumeDir/<id>.img beside it (so that a VolumeDir
// every host mounts still carries the volume to the next host): mounted
// when an instance of the host first needs it, again after a reboot,
// unmounted when none uses it. A marker in DataDir/mounts/volumes/<id>
// records that this agent mounted it, so that an agent unmounts only its
// own mounts (several simulated hosts of `gpucloud up` share one
// machine's mount table), after a restart too. The working directories of
// instances without volumes are kept the same way (workdir.go).

// imageSuffix ends the name of a filesystem image.
const imageSuffix = ".img"

// volumeBase is the directory of the host's volumes.
func (a *Agent) volumeBase() string { return volumeBase(a.cfg) }

// volumeBase is where an agent of cfg keeps its volumes: VolumeDir when
// set, else DataDir/volumes.
func volumeBase(cfg Config) string {
	if cfg.VolumeDir != "" {
		return cfg.VolumeDir
	}
	return filepath.Join(cfg.DataDir, "volumes")
}

// volumePaths returns the directory and filesystem image of volume id.
func (a *Agent) volumePaths(id string) (dir, img string) {
	base := a.volumeBase()
	return filepath.Join(base, id), filepath.Join(base, id+imageSuffix)
}

// The kinds of directories the agent keeps in filesystem images: volumes,
// and the working directories of instances without volumes (workdir.go).
const (
	kindVolume  = "volumes"
	kindWork    = "work"
	kindScratch = "scratch" // instance stores (scratch.go)
)

// imagePaths returns the directory and filesystem image of a volume or
// an instance's working directory.
func (a *Agent) imagePaths(kind, id string) (dir, img string) {
	if kind == kindVolume {
		return a.volumePaths(id)
	}
	base := filepath.Join(a.cfg.DataDir, "instances")
	if kind == kindScratch {
		base = a.scratchDir()
	}
	return filepath.Join(base, id), filepath.Join(base, id+imageSuffix)
}

// mountMarker is the file that records that this agent mounted the
// filesystem of a volume or working directory.
func (a *Agent) mountMarker(kind, id string) string {
	return filepath.Join(a.cfg.DataDir, "mounts", kind, id)
}

// volumeDirs makes the volumes of an assignment ready (volume) and returns
// their directories in order.
func (a *Agent) volumeDirs(as agentapi.Assignment) ([]string, error) {
	var vols []string
	for _, v := range as.Volumes {
		if err := runtime.ValidateID(v); err != nil || strings.HasSuffix(v, imageSuffix) {
			return nil, &startError{fmt.Sprintf("bad volume id %q: want letters, digits, '.', '_' or '-'", v)}
		}
		var dir string
		var err error
		if slices.Contains(as.SharedVolumes, v) {
			dir, err = a.sharedVolume(v, as.VolumeSizes[v])
		} else {
			dir, err = a.volume(v, as.VolumeSizes[v])
		}
		if err != nil {
			return nil, err
		}
		vols = append(vols, dir)
	}
	return vols, nil
}

// volume makes volume id ready for a workload and returns its directory:
// a plain directory, or with VolumeImages its filesystem image of sizeGiB
// (made on first use) mounted there. It is idempotent: a mounted volume
// (an agent restart) is used as it is.
func (a *Agent) volume(id string, sizeGiB int64) (string, error) {
	dir, _ := a.volumePaths(id)
	if !a.cfg.VolumeImages {
		return dir, os.MkdirAll(dir, 0o750)
	}
	if sizeGiB <= 0 {
		return "", &startError{fmt.Sprintf("volume %s: the server sent no size (a server older than this agent?); "+
			"this host keeps each volume in a filesystem of its size", id)}
	}
	return a.mountedImage(kindVolume, id, sizeGiB<<30)
}

// mountedImage returns the directory of a volume or working directory
// with its filesystem image of size bytes (made on first use) mounted
// there. It is idempotent: a mounted one (an agent restart) is used as it
// is.
func (a *Agent) mountedImage(kind, id string, size int64) (string, error) {
	dir, img := a.imagePaths(kind, id)
	if kind == kindVolume {
		// A files session may be mounting it (volumes_files.go).
		filesMu.Lock()
		defer filesMu.Unlock()
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return "", err
	}
	if err := a.markMounted(kind, id); err != nil {
		return "", err
	}
	mounted, err := runtime.Mounted(dir)
	if err != nil || mounted {
		return dir, err
	}
	if _, err := os.Stat(img); errors.Is(err, fs.ErrNotExist) {
		if err := a.makeImage(kind, id, dir, img, size); err != nil {
			return "", err
		}
	} else if err != nil {
		return "", err
	}
	if mounted, err := runtime.Mounted(dir); err != nil || mounted {
		return dir, err // makeVolumeImage mounted it, to move files in
	}
	// Mounted twice, through two loop devices, the filesystem would be
	// corrupted: a container that still holds the image (its host mount
	// gone) must end first. The start is retried.
	if held, err := runtime.ImageAttached(img); err != nil || held {
		if err == nil {
			err = errors.New("its image is still in use by a container that has ended its instance; retried")
		}
		return "", fmt.Errorf("%s %s: %w", kind, id, err)
	}
	if err := runtime.MountImage(img, dir); err != nil {
		return "", fmt.Errorf("%s %s: %w", kind, id, err)
	}
	return dir, nil
}

// markMounted records that this agent mounts a filesystem, before it
// does: a crash right after the mount leaves the record.
func (a *Agent) markMounted(kind, id string) error {
	m := a.mountMarker(kind, id)
	if err := os.MkdirAll(filepath.Dir(m), 0o700); err != nil {
		return err
	}
	return os.WriteFile(m, nil, 0o600)
}

// makeImage makes the filesystem image of a volume or working directory.
// One that was a plain directory (made before images, or by a host
// without them) keeps its files: they are copied into the image, which is
// left mounted at dir; one holding more than its size cannot start.
func (a *Agent) makeImage(kind, id, dir, img string, size int64) error {
	mk := runtime.MakeImage
	if kind == kindScratch {
		mk = runtime.MakeScratchImage
	}
	if err := mk(img, size); err != nil {
		return fmt.Errorf("%s %s: %w", kind, id, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) == 0 {
		return err
	}
	old := filepath.Join(filepath.Dir(dir), "."+id+".migrating")
	if err := os.Rename(dir, old); err != nil {
		return err
	}
	undo := func(err error) error {
		_ = runtime.Unmount(dir)
		_ = os.Remove(dir)
		_ = os.Rename(old, dir)
		_ = os.Remove(img)
		return fmt.Errorf("%s %s: move its files into a filesystem of its size: %w", kind, id, err)
	}
	if err := os.Mkdir(dir, 0o750); err != nil {
		return undo(err)
	}
	if err := runtime.MountImage(img, dir); err != nil {
		return undo(err)
	}
	if out, err := exec.Command("cp", "-a", "--", old+"/.", dir+"/").CombinedOutput(); err != nil {
		return undo(fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out))))
	}
	a.log.Info("agent: files moved into a filesystem image of their size", kind, id, "image", img)
	return os.RemoveAll(old)
}

// mountsInUse are the volumes and working directories (by kind, then ID)
// of the instances whose workload the runtime knows: their containers may
// hold the mounts.
func (a *Agent) mountsInUse() map[string]map[string]bool {
	use := map[string]map[string]bool{kindVolume: {}, kindWork: {}}
	for _, s := range a.insts {
		if s.started || s.state == stateRunning || s.state == stateStopping {
			use[kindWork][s.id] = true
			for _, v := range s.a.Volumes {
				use[kindVolume][v] = true
			}
		}
	}
	return use
}

// ReleaseVolumes unmounts every volume and working directory this agent
// mounted, and wipes the instance stores, for a host
// process that stopped its workloads (StopAll) and is about to exit
// (gpucloud agent, gpucloud up): their files then sit in their images
// only, and a next agent mounts them again on first use. It must not run
// with Run or Step.
func (a *Agent) ReleaseVolumes() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	// Their workloads stopped, the instance stores are wiped.
	return errors.Join(a.unmountImages(nil), a.wipeScratches(nil))
}

// releaseVolumes unmounts the volumes and working directories this agent
// mounted that no instance uses any more. It runs at the end of each
// pass.
func (a *Agent) releaseVolumes() error {
	return a.unmountImages(a.mountsInUse())
}

// unmountImages unmounts the filesystems this agent mounted but those in
// use.
func (a *Agent) unmountImages(use map[string]map[string]bool) error {
	var errs []error
	for _, kind := range []string{kindVolume, kindWork} {
		entries, err := os.ReadDir(filepath.Join(a.cfg.DataDir, "mounts", kind))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, e := range entries {
			id := e.Name()
			if use[kind][id] || runtime.ValidateID(id) != nil {
				continue
			}
			errs = append(errs, a.unmountImage(kind, id))
		}
	}
	return errors.Join(errs...)
}

// unmountImage unmounts a volume's or working directory's filesystem and
// drops the agent's record of it.
func (a *Agent) unmountImage(kind, id string) error {
	dir, _ := a.imagePaths(kind, id)
	if kind == kindVolume {
		filesMu.Lock()
		defer filesMu.Unlock()
		if filesInUse(dir) {
			return nil // a files session copies into it: a later pass unmounts it
		}
	}
	if err := runtime.Unmount(dir); err != nil {
		return fmt.Errorf("%s %s: %w", kind, id, err)
	}
	if err := os.Remove(a.mountMarker(kind, id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// heldVolumes lists the volumes whose files are in the volume directory:
// a directory or an image named after the volume.
func (a *Agent) heldVolumes() ([]string, error) {
	entries, err := os.ReadDir(a.volumeBase())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range entries {
		name := e.Name()
		id := strings.TrimSuffix(name, imageSuffix)
		if strings.HasPrefix(name, ".") || runtime.ValidateID(id) != nil || (id == name) != e.IsDir() {
			continue
		}
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// deleteVolume removes a deleted volume's files: it unmounts the volume
// (whoever mounted it on this machine), makes sure no loop device still
// holds its image (a container would keep its blocks alive after the
// name is gone), and removes the image and the directory.
func (a *Agent) deleteVolume(id string) error {
	dir, img := a.volumePaths(id)
	filesMu.Lock()
	defer filesMu.Unlock()
	if filesInUse(dir) {
		return fmt.Errorf("deleted volume %s: a files session still copies into it; retried at the next sweep", id)
	}
	if err := runtime.Unmount(dir); err != nil {
		return fmt.Errorf("deleted volume %s: %w", id, err)
	}
	if held, err := runtime.ImageAttached(img); err != nil || held {
		if err == nil {
			err = errors.New("its image is still attached to a loop device; retried at the next sweep")
		}
		return fmt.Errorf("deleted volume %s: %w", id, err)
	}
	var errs []error
	for _, p := range []string{img, a.mountMarker(kindVolume, id)} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("deleted volume %s: %w", id, err)
	}
	a.log.Info("agent: deleted volume's files removed", "volume", id)
	return nil
}

// VolumePath is where an agent of cfg keeps volume id: under VolumeDir
// when set, else under DataDir/volumes. The files handler (agent/files)
// serves `volumes cp` there, through VolumeRoot.
func VolumePath(cfg Config, id string) string { return filepath.Join(volumeBase(cfg), id) }

// ErrVolumeNotMounted is VolumeRoot's answer for a volume kept in a
// filesystem image that is not mounted now.
var ErrVolumeNotMounted = errors.New("volume not mounted")

// VolumeRoot is the directory holding volume id's files now, for a
// session that reads or writes them. A plain directory always is (made
// when missing, as an instance's start makes it). With VolumeImages the
// files live in the volume's filesystem image, which is mounted at
// VolumePath only while an instance of this host uses the volume: then
// the directory is the mount, and otherwise VolumeRoot refuses
// (ErrVolumeNotMounted) rather than let a copy land in the empty mount
// point, where the next mount would hide it.
//
// A shared volume's files are in SharedVolumeDir (sharedvol.go), made when
// missing as an instance's start makes it; its size limit, where the
// filesystem keeps one, is set when an instance first uses it.
func VolumeRoot(cfg Config, id string, shared bool) (string, error) {
	if shared {
		if cfg.SharedVolumeDir == "" {
			return "", fmt.Errorf("volume %s is a shared volume, and this host has no shared volume directory (gpucloud agent --shared-volume-dir)", id)
		}
		if _, err := os.Stat(cfg.SharedVolumeDir); err != nil {
			return "", fmt.Errorf("volume %s: the shared volume directory: %w (is its filesystem mounted?)", id, err)
		}
		dir := filepath.Join(cfg.SharedVolumeDir, id)
		return dir, os.MkdirAll(dir, 0o750)
	}
	dir := VolumePath(cfg, id)
	if !cfg.VolumeImages {
		return dir, os.MkdirAll(dir, 0o750)
	}
	mounted, err := runtime.Mounted(dir)
	if err != nil {
		return "", err
	}
	if !mounted {
		return "", fmt.Errorf("%w: volume %s is kept in a filesystem image of its size, mounted only while an instance on this host uses it; "+
			"copy while an instance that has it attached is running", ErrVolumeNotMounted, id)
	}
	return dir, nil
}
