package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/agentapi"
)

// Deleting is deleting: the files of what is gone leave the host. Every
// StorageSweep the agent names to the server (POST /v1/agent/gone) the
// volumes and instances it holds files of and no assignment uses; it
// removes at once the files of the volumes the server says are deleted,
// and those of the instances it says are terminated (or failed, or
// unknown) once RetainTerminated has passed since it first learnt so,
// which a tombstone in DataDir/retired/<id> records across restarts.

// Defaults of Config's storage fields.
const (
	DefaultRetainTerminated = time.Hour
	DefaultStorageSweep     = time.Minute
)

// GoneChecker is a control plane that says which volumes and instances
// are gone (agentapi.Client.Gone). Without it the agent deletes nothing.
type GoneChecker interface {
	Gone(ctx context.Context, req agentapi.GoneRequest) (*agentapi.GoneResponse, error)
}

// sweepStorage deletes the files of what is gone, at most once per
// StorageSweep. It runs at the end of a pass, under a.mu.
func (a *Agent) sweepStorage(ctx context.Context) error {
	every := a.cfg.StorageSweep
	if every == 0 {
		every = DefaultStorageSweep
	}
	gc, ok := a.srv.(GoneChecker)
	now := a.cfg.Now()
	if every < 0 || !ok || (!a.lastSweep.IsZero() && now.Sub(a.lastSweep) < every) {
		return nil
	}
	a.lastSweep = now
	vols, insts, err := a.unusedFiles()
	if err != nil {
		return fmt.Errorf("storage sweep: %w", err)
	}
	shared, err := a.heldShared()
	if err != nil {
		return fmt.Errorf("storage sweep: %w", err)
	}
	for _, id := range shared {
		if !a.volumeUsed(id) && !slices.Contains(vols, id) {
			vols = append(vols, id)
		}
	}
	var errs []error
	for len(vols) > 0 || len(insts) > 0 {
		req := agentapi.GoneRequest{Volumes: vols[:min(len(vols), agentapi.MaxGoneIDs)], Instances: insts[:min(len(insts), agentapi.MaxGoneIDs)]}
		vols, insts = vols[len(req.Volumes):], insts[len(req.Instances):]
		gone, err := gc.Gone(ctx, req)
		if err != nil {
			return errors.Join(append(errs, fmt.Errorf("storage sweep: ask which volumes and instances are gone: %w", err))...)
		}
		for _, id := range gone.Volumes {
			switch {
			case !slices.Contains(req.Volumes, id):
			case slices.Contains(shared, id):
				errs = append(errs, a.deleteShared(id))
			default:
				errs = append(errs, a.deleteVolume(id))
			}
		}
		for _, id := range gone.Instances {
			if slices.Contains(req.Instances, id) {
				errs = append(errs, a.retireFiles(id, now))
			}
		}
	}
	return errors.Join(errs...)
}

// volumeUsed reports whether an instance the agent knows names volume id.
func (a *Agent) volumeUsed(id string) bool {
	for _, s := range a.insts {
		if slices.Contains(s.a.Volumes, id) {
			return true
		}
	}
	return false
}

// unusedFiles lists the volumes and instances the host holds files of
// that no instance the agent knows uses.
func (a *Agent) unusedFiles() (vols, insts []string, err error) {
	held, err := a.heldVolumes()
	if err != nil {
		return nil, nil, err
	}
	used := map[string]bool{}
	for _, s := range a.insts {
		for _, v := range s.a.Volumes {
			used[v] = true
		}
	}
	for _, v := range held {
		if !used[v] {
			vols = append(vols, v)
		}
	}
	ids, err := a.instanceFiles()
	for _, id := range ids {
		if a.insts[id] == nil {
			if _, err := a.cfg.Runtime.Status(id); errors.Is(err, runtime.ErrNotFound) {
				insts = append(insts, id)
			}
		}
	}
	return vols, insts, err
}

// instanceFiles lists the instances that have a working directory, a log
// or a tombstone on the host.
func (a *Agent) instanceFiles() ([]string, error) {
	seen := map[string]bool{}
	var errs []error
	for _, d := range []string{"instances", "logs", "retired"} {
		entries, err := os.ReadDir(filepath.Join(a.cfg.DataDir, d))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
		for _, e := range entries {
			id := e.Name()
			switch d {
			case "logs":
				id, _, _ = strings.Cut(id, ".log")
			case "instances":
				id = strings.TrimSuffix(id, imageSuffix)
			}
			if runtime.ValidateID(id) == nil {
				seen[id] = true
			}
		}
	}
	ids := make([]string, 0, len(seen))
	for id := range seen {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids, errors.Join(errs...)
}

// retireFiles removes a terminated instance's working directory, logs and
// the runtime's directory of it once RetainTerminated has passed since the
// agent first learnt it was gone (its tombstone's time).
func (a *Agent) retireFiles(id string, now time.Time) error {
	keep := a.cfg.RetainTerminated
	if keep == 0 {
		keep = DefaultRetainTerminated
	}
	tomb := filepath.Join(a.cfg.DataDir, "retired", id)
	if keep > 0 {
		fi, err := os.Stat(tomb)
		if errors.Is(err, fs.ErrNotExist) {
			if err := os.MkdirAll(filepath.Dir(tomb), 0o700); err != nil {
				return err
			}
			if err := os.WriteFile(tomb, nil, 0o600); err != nil {
				return err
			}
			if err := os.Chtimes(tomb, now, now); err != nil {
				return err
			}
			return nil
		}
		if err != nil {
			return err
		}
		if now.Sub(fi.ModTime()) < keep {
			return nil
		}
	}
	// The working directory's filesystem, unmounted and free of any loop
	// device before its image goes.
	if err := a.unmountImage(kindWork, id); err != nil {
		return fmt.Errorf("terminated instance %s: %w", id, err)
	}
	workDir, workImg := a.imagePaths(kindWork, id)
	if held, err := runtime.ImageAttached(workImg); err != nil || held {
		if err == nil {
			err = errors.New("its working directory's image is still attached to a loop device; retried at the next sweep")
		}
		return fmt.Errorf("terminated instance %s: %w", id, err)
	}
	paths := []string{
		workDir, workImg,
		// The runtime's own directory of the instance (gpucloud agent's
		// runtimes keep theirs in DataDir/runtime).
		filepath.Join(a.cfg.DataDir, "runtime", id),
	}
	logs, err := os.ReadDir(filepath.Join(a.cfg.DataDir, "logs"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for _, e := range logs {
		if n := e.Name(); n == id+".log" || strings.HasPrefix(n, id+".log.") {
			paths = append(paths, filepath.Join(a.cfg.DataDir, "logs", n))
		}
	}
	var errs []error
	for _, p := range append(paths, tomb) {
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("terminated instance %s: %w", id, err)
	}
	delete(a.logOff, id)
	a.log.Info("agent: terminated instance's files removed", "instance", id)
	return nil
}
