package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gpucloud/gpucloud/agent/runtime"
)

// The instance store: local scratch disk that comes with an offering
// (agentapi.Assignment.InstanceStoreGiB), made empty for each run of an
// instance and wiped when the run ends. It lives in DataDir/scratch/<id>,
// apart from every volume and working directory, so that it is never
// under a directory another instance is given. With VolumeImages it is
// an ext4 image of exactly its size (DataDir/scratch/<id>.img),
// loop-mounted there as a volume is: a workload that fills it gets ENOSPC
// and the host's disk is not touched beyond it. Without (the process
// runtime, which may not be root) it is a plain directory, wiped the same
// way but not limited.
//
// A run's store is made by its first start attempt: any store left of an
// earlier run (an agent that crashed before wiping it) is wiped first. At
// the end of every pass the agent wipes the stores of the instances that
// are not running or starting: unmounted, checked to be held by no loop
// device, the image and the directory removed. So a stop, an exit, a
// terminate, a withdrawn assignment, and an agent restart that finds the
// store of an instance it does not run all leave nothing of it.

// scratchDir is the directory of the host's instance stores.
func (a *Agent) scratchDir() string { return filepath.Join(a.cfg.DataDir, "scratch") }

// scratchBytes is the size in bytes of a store of gib GiB; scratchUnit
// is the bytes of one unit of InstanceStoreGiB: a GiB, but a
// test can make it smaller to fill a store quickly.
func (a *Agent) scratchBytes(gib int) int64 {
	unit := a.scratchUnit
	if unit <= 0 {
		unit = 1 << 30
	}
	return int64(gib) * unit
}

// scratch makes s's instance store ready for its run and returns its
// directory, or "" when its offering has none. The first call of a run
// wipes what an earlier run left and makes the store anew; later calls
// (a start retried) find it made.
func (a *Agent) scratch(s *inst) (string, error) {
	gib := s.a.InstanceStoreGiB
	if gib <= 0 {
		return "", nil
	}
	dir, _ := a.imagePaths(kindScratch, s.id)
	if !s.scratchMade {
		if err := a.wipeScratch(s.id); err != nil {
			return "", err
		}
		s.scratchMade = true
	}
	if err := os.MkdirAll(a.scratchDir(), 0o700); err != nil {
		return "", err
	}
	if !a.cfg.VolumeImages {
		return dir, os.MkdirAll(dir, 0o750)
	}
	return a.mountedImage(kindScratch, s.id, a.scratchBytes(gib))
}

// scratchInUse reports whether s's workload may use its instance store:
// it runs, is being stopped, or is being started (its store made).
func scratchInUse(s *inst) bool {
	return s.state == stateRunning || s.state == stateStopping || (s.state == statePending && s.scratchMade)
}

// wipeScratches wipes the instance stores on the host that no instance
// in use holds (all of them with keep nil). It runs at the end of each
// pass, and when the host process exits after stopping its workloads.
func (a *Agent) wipeScratches(keep func(id string) bool) error {
	ids, err := a.heldScratches()
	if err != nil {
		return fmt.Errorf("instance stores: %w", err)
	}
	var errs []error
	for _, id := range ids {
		if keep != nil && keep(id) {
			continue
		}
		errs = append(errs, a.wipeScratch(id))
	}
	return errors.Join(errs...)
}

// wipeUnusedScratches wipes the stores of the instances not in use.
func (a *Agent) wipeUnusedScratches() error {
	return a.wipeScratches(func(id string) bool {
		s := a.insts[id]
		return s != nil && scratchInUse(s)
	})
}

// heldScratches lists the instances with an instance store on the host:
// a directory, an image (or a half-made one) or a mount record.
func (a *Agent) heldScratches() ([]string, error) {
	var ids []string
	for _, d := range []string{a.scratchDir(), filepath.Join(a.cfg.DataDir, "mounts", kindScratch)} {
		entries, err := os.ReadDir(d)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			id := strings.TrimSuffix(strings.TrimSuffix(e.Name(), ".new"), imageSuffix)
			if runtime.ValidateID(id) == nil && !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
	}
	slices.Sort(ids)
	return ids, nil
}

// wipeScratch removes instance id's store: unmounted (whoever mounted it
// on this machine), held by no loop device (a container that still holds
// it keeps its blocks; retried), then its image and directory removed.
func (a *Agent) wipeScratch(id string) error {
	dir, img := a.imagePaths(kindScratch, id)
	if err := runtime.Unmount(dir); err != nil {
		return fmt.Errorf("instance store of %s: %w", id, err)
	}
	if held, err := runtime.ImageAttached(img); err != nil || held {
		if err == nil {
			err = errors.New("its image is still attached to a loop device; retried")
		}
		return fmt.Errorf("instance store of %s: %w", id, err)
	}
	var errs []error
	for _, p := range []string{img, img + ".new", a.mountMarker(kindScratch, id)} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if _, err := os.Lstat(dir); err == nil {
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err)
		}
		a.log.Info("agent: instance store wiped", "instance", id)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("instance store of %s: %w", id, err)
	}
	return nil
}
