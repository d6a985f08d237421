package containerd

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/identifiers"
	"github.com/containerd/errdefs"

	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/internal/imageref"
)

// Starting a workload: the container, its task and what it holds of
// the host (an MPS daemon, an instance network, a metadata endpoint).

// Start implements runtime.Runtime. The container is started with the
// image of the Spec (Config.DefaultImage when empty), which the runtime
// pulls if it does not have it and may. A program that is in neither the
// image nor the instance's mounts is ErrInvalid, and leaves nothing
// behind. The container is not tied to ctx: ctx only bounds the start.
//
// The runtime serves Spec.Metadata inside the container's network
// namespace (MetadataURL); a Spec with a MetadataURL of its own is
// ErrInvalid, since no address of the host is reachable from the
// container. Spec.DNS is served there too (dns.go), and the container's
// resolv.conf names it. Starting a running instance again serves its
// metadata and DNS if nothing does (a new agent's runtime, which adopted
// the container).
func (r *Runtime) Start(ctx context.Context, s runtime.Spec) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.Validate(); err != nil {
		return err
	}
	if err := checkExtraDevices(s); err != nil {
		return err
	}
	if err := identifiers.Validate(s.InstanceID); err != nil {
		return fmt.Errorf("instance id %q: containerd takes letters and digits separated by single '.', '_' or '-', at most 76: %w", s.InstanceID, runtime.ErrInvalid)
	}
	if s.MetadataURL != "" && s.Metadata == nil {
		return fmt.Errorf("instance %s: the containerd runtime serves the metadata endpoint itself (Spec.Metadata), at %s; "+
			"the host's %s is out of the container's reach: %w", s.InstanceID, r.MetadataURL(), s.MetadataURL, runtime.ErrInvalid)
	}
	release, known, err := r.claim(ctx, s.InstanceID)
	if err != nil {
		return err
	}
	if known {
		if s.Metadata != nil {
			if in, err := r.lookup(s.InstanceID); err == nil {
				// The workload runs either way: an endpoint that cannot be
				// served (the workload exiting meanwhile) fails no start.
				if err := r.serveMetadata(in, s.Metadata); err != nil {
					r.cfg.Log.Warn("containerd runtime: metadata endpoint of an adopted container", "instance", in.id, "err", err)
				}
			}
		}
		if s.DNS != nil {
			if in, err := r.lookup(s.InstanceID); err == nil {
				if err := r.serveDNS(in, s.DNS); err != nil {
					r.cfg.Log.Warn("containerd runtime: DNS server of an adopted container", "instance", in.id, "err", err)
				}
			}
		}
		return nil
	}
	defer release()
	in, err := r.create(r.nsCtx(ctx), s)
	if err != nil {
		return fmt.Errorf("start %s: %w", s.InstanceID, err)
	}
	r.mu.Lock()
	r.insts[s.InstanceID] = in
	r.mu.Unlock()
	return nil
}

// claim makes concurrent Starts of one instance start it once: the first
// gets release, the others wait for it and then find the instance known.
func (r *Runtime) claim(ctx context.Context, id string) (release func(), known bool, err error) {
	for {
		r.mu.Lock()
		if r.insts[id] != nil {
			r.mu.Unlock()
			return nil, true, nil
		}
		ch := r.starting[id]
		if ch == nil {
			ch = make(chan struct{})
			r.starting[id] = ch
			r.mu.Unlock()
			return func() {
				r.mu.Lock()
				delete(r.starting, id)
				r.mu.Unlock()
				close(ch)
			}, false, nil
		}
		r.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
	}
}

// create makes and starts the container, or leaves nothing behind.
func (r *Runtime) create(ctx context.Context, s runtime.Spec) (_ *inst, err error) {
	imageStart := time.Now()
	img, err := r.specImage(ctx, s)
	if err != nil {
		return nil, err
	}
	imageTook := max(time.Since(imageStart), time.Microsecond)
	if len(s.Command) == 0 {
		if s.Command, err = imageCommand(ctx, img, s.InstanceID); err != nil {
			return nil, err
		}
	}
	uid, gid, own, err := r.workloadUser(s)
	if err != nil {
		return nil, err
	}
	if own {
		defer func() {
			if err != nil {
				r.uids.release(uid, s.InstanceID)
			}
		}()
	}
	if err := r.prepareDirs(&s, uid, gid); err != nil {
		return nil, err
	}
	lay, err := layout(s)
	if err != nil {
		return nil, err
	}
	if err := r.lookPath(ctx, img, s, lay); err != nil {
		return nil, err
	}
	if err := r.prepareDNS(s, &lay); err != nil {
		return nil, err
	}
	grace := s.Grace
	if grace <= 0 {
		grace = runtime.DefaultGrace
	}
	in := &inst{
		id: s.InstanceID, logPath: s.LogPath, grace: grace,
		cgroup: "/" + r.cfg.Namespace + "/" + s.InstanceID,
		done:   make(chan struct{}),
		uid:    uid, gid: gid, ownUID: own,
		imageTook: imageTook,
	}
	if err := r.joinMPS(ctx, s, in, &lay); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			r.releaseMPS(in)
		}
	}()
	// An earlier container of the same ID that this runtime does not know
	// (a crash between create and record) is in the way: remove it.
	if old, err := r.client.LoadContainer(ctx, s.InstanceID); err == nil {
		r.discard(old)
	}
	netns := ""
	if r.cfg.Network != nil {
		if netns, err = r.cfg.Network.Setup(ctx, s.InstanceID, s.TenantID, s.Network); err != nil {
			return nil, fmt.Errorf("instance network: %w", err)
		}
		in.netns = true
		defer func() {
			if err != nil {
				r.teardownNetwork(in)
			}
		}()
	}
	now := time.Now()
	if in.ctr, err = r.newContainer(ctx, s, img, lay, in, netns, now); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			r.discard(in.ctr)
		}
	}()
	if err := r.limitRoot(ctx, s.InstanceID); err != nil {
		return nil, err
	}
	if lay.layerResolvConf {
		if err := r.writeLayerResolvConf(ctx, s); err != nil {
			return nil, err
		}
	}
	exitC, err := r.startTask(ctx, s, in)
	if err != nil {
		return nil, err
	}
	in.status = runtime.Status{State: runtime.StateRunning, StartedAt: now}
	go r.reap(in, exitC)
	return in, nil
}

// specImage is the image a spec's workload runs in (Config.DefaultImage
// when it names none), pulled if the runtime does not have it and may.
func (r *Runtime) specImage(ctx context.Context, s runtime.Spec) (client.Image, error) {
	imgName := s.Image
	if imgName == "" {
		imgName = r.cfg.DefaultImage
	}
	// A short name is the image of its canonical one ("python:3.12" is
	// docker.io/library/python:3.12), as the server stores it.
	imgName, err := imageref.Normalize(imgName)
	if err != nil {
		return nil, fmt.Errorf("image %q %v: %w", s.Image, err, runtime.ErrInvalid)
	}
	return r.image(ctx, imgName)
}

// workloadUser is the uid and gid s's workload runs as: a claimed pair of
// its own (own set; uids.go), unless Config.User names one user for all or
// the workload shares a GPU through MPS, whose daemon serves one user (the
// runtime's fixed one).
func (r *Runtime) workloadUser(s runtime.Spec) (uid, gid uint32, own bool, err error) {
	if r.uids == nil {
		return r.uid, r.gid, false, nil
	}
	if _, mps, err := r.mpsGPU(s); err != nil || mps {
		return r.uid, r.gid, false, err
	}
	if uid, err = r.uids.acquire(s.InstanceID); err != nil {
		return 0, 0, false, err
	}
	return uid, uid, true, nil
}

// prepareDirs fills the working directory and log path the runtime picks
// for a spec that leaves them empty, and makes the directories: the
// working directory, volumes and instance store owned by the workload's
// user, uid:gid.
func (r *Runtime) prepareDirs(s *runtime.Spec, uid, gid uint32) error {
	dir := filepath.Join(r.cfg.BaseDir, s.InstanceID)
	if s.WorkDir == "" {
		s.WorkDir = filepath.Join(dir, "work")
	}
	if s.LogPath == "" {
		s.LogPath = filepath.Join(dir, "output.log")
	}
	var err error
	if s.LogPath, err = filepath.Abs(s.LogPath); err != nil {
		return err
	}
	for _, d := range []string{s.WorkDir, filepath.Dir(s.LogPath)} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return err
		}
	}
	// The workload's user owns its directories: all of what is in one
	// another user owns (another instance's volume, or this one's from a
	// start under another uid; uids.go).
	dirs := append([]string{s.WorkDir}, s.Volumes...)
	if s.Scratch != "" {
		dirs = append(dirs, s.Scratch)
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return err
		}
		if err := chownTree(d, uid, gid); err != nil {
			return fmt.Errorf("give %s to the workload's user: %w", d, err)
		}
	}
	return nil
}

// joinMPS makes a share's workload a client of its GPU's MPS daemon,
// started if need be: in.mpsGPU names the GPU, and lay mounts the
// daemon's pipe directory and /dev/shm. A workload without a share, or a
// runtime that runs no daemons, joins none.
func (r *Runtime) joinMPS(ctx context.Context, s runtime.Spec, in *inst, lay *mounts) error {
	gpu, ok, err := r.mpsGPU(s)
	if err != nil || !ok {
		return err
	}
	pipe, shm, err := r.mps.acquire(ctx, gpu, s.InstanceID)
	if err != nil {
		return err
	}
	in.mpsGPU = gpu
	// The pipe directory at the same path: the sockets the daemon and the
	// server made there, and CUDA_MPS_PIPE_DIRECTORY.
	lay.binds = append(lay.binds, [2]string{pipe, pipe})
	lay.mpsPipe = pipe
	if shm != "" {
		// The daemon's /dev/shm, in place of the container's own.
		lay.binds = append(lay.binds, [2]string{shm, "/dev/shm"})
		lay.mpsShm = shm
	}
	return nil
}

// newContainer creates the container of s, labelled with what a later
// runtime needs to adopt it (started at now).
func (r *Runtime) newContainer(ctx context.Context, s runtime.Spec, img client.Image, lay mounts, in *inst, netns string, now time.Time) (client.Container, error) {
	specOpts, err := r.specOpts(s, lay, in.cgroup, netns, in.uid, in.gid)
	if err != nil {
		return nil, err
	}
	var runcOpts any
	if r.cfg.Runc != "" {
		runcOpts = runcOptions(r.cfg.Runc)
	}
	labels := map[string]string{
		labelInstance: s.InstanceID, labelLog: s.LogPath,
		labelGrace: in.grace.String(), labelStarted: now.UTC().Format(time.RFC3339Nano),
	}
	if in.mpsGPU != "" {
		labels[labelMPS] = in.mpsGPU
	}
	if in.ownUID {
		labels[labelUID] = fmt.Sprintf("%d:%d", in.uid, in.gid)
	}
	ctr, err := r.client.NewContainer(ctx, s.InstanceID,
		client.WithImage(img),
		client.WithSnapshotter(r.cfg.Snapshotter),
		client.WithNewSnapshot(s.InstanceID, img),
		client.WithRuntime(runcRuntime, runcOpts),
		client.WithNewSpec(specOpts...),
		client.WithContainerLabels(labels),
		r.hostLabel(),
	)
	if err != nil {
		return nil, fmt.Errorf("create container: %w", err)
	}
	return ctr, nil
}

// startTask creates the container's task with its output appended to
// the log, serves the instance's metadata and DNS in its network
// namespace, and starts it; it returns the channel of the task's exit.
func (r *Runtime) startTask(ctx context.Context, s runtime.Spec, in *inst) (<-chan client.ExitStatus, error) {
	logIO, err := r.logIO(s.LogPath)
	if err != nil {
		return nil, err
	}
	task, err := in.ctr.NewTask(ctx, logIO)
	if err != nil {
		return nil, fmt.Errorf("create task: %w", err)
	}
	in.task = task
	exitC, err := task.Wait(r.bg)
	if err != nil {
		return nil, fmt.Errorf("wait for task: %w", err)
	}
	if s.Metadata != nil {
		if in.meta, err = metadataServer(s.Metadata, task.Pid()); err != nil {
			return nil, fmt.Errorf("metadata endpoint: %w", err)
		}
	}
	if s.DNS != nil {
		if in.dns, err = r.dnsServer(in.id, s.DNS, task.Pid()); err != nil {
			if in.meta != nil {
				in.meta.Close()
			}
			return nil, fmt.Errorf("DNS server: %w", err)
		}
	}
	if err := task.Start(ctx); err != nil {
		if in.meta != nil {
			in.meta.Close()
		}
		if in.dns != nil {
			in.dns.Close()
		}
		return nil, fmt.Errorf("start task: %w", err)
	}
	return exitC, nil
}

// discard removes a container and its task and snapshot, killing what
// runs in it; best effort, for failed starts and strays.
func (r *Runtime) discard(ctr client.Container) {
	ctx, cancel := context.WithTimeout(r.bg, 30*time.Second)
	defer cancel()
	if t, err := ctr.Task(ctx, nil); err == nil {
		_, _ = t.Delete(ctx, client.WithProcessKill)
	}
	if err := r.releaseRoot(ctr.ID(), ""); err != nil {
		r.cfg.Log.Warn("containerd runtime: remove container", "container", ctr.ID(), "err", err)
	}
	if err := ctr.Delete(ctx, client.WithSnapshotCleanup); err != nil && !errdefs.IsNotFound(err) {
		r.cfg.Log.Warn("containerd runtime: remove container", "container", ctr.ID(), "err", err)
	}
}

// serveMetadata serves an adopted instance's metadata in its network
// namespace, unless something does already or the workload exited.
func (r *Runtime) serveMetadata(in *inst, h http.Handler) error {
	r.mu.Lock()
	if in.meta != nil || in.metaOff || in.task == nil || in.status.State != runtime.StateRunning {
		r.mu.Unlock()
		return nil
	}
	pid := in.task.Pid()
	r.mu.Unlock()
	m, err := metadataServer(h, pid)
	if err != nil {
		return fmt.Errorf("instance %s: metadata endpoint: %w", in.id, err)
	}
	r.mu.Lock()
	keep := in.meta == nil && !in.metaOff
	if keep {
		in.meta = m
	}
	r.mu.Unlock()
	if !keep {
		m.Close()
	}
	return nil
}

// mpsGPU returns the GPU whose MPS daemon a spec's workload is a client
// of: a share's one GPU, when the runtime runs daemons.
func (r *Runtime) mpsGPU(s runtime.Spec) (string, bool, error) {
	if r.mps == nil || s.ShareMilli <= 0 {
		return "", false, nil
	}
	if len(s.Devices) != 1 {
		return "", false, fmt.Errorf("instance %s: a GPU share names exactly one GPU, not %d: %w", s.InstanceID, len(s.Devices), runtime.ErrInvalid)
	}
	if err := checkGPU(s.Devices[0]); err != nil {
		return "", false, fmt.Errorf("instance %s: %w", s.InstanceID, err)
	}
	return s.Devices[0], true, nil
}

// releaseMPS ends the instance's use of its GPU's MPS daemon, which quits
// with its last client.
func (r *Runtime) releaseMPS(in *inst) {
	r.mu.Lock()
	gpu := in.mpsGPU
	in.mpsGPU = ""
	r.mu.Unlock()
	if gpu == "" || r.mps == nil {
		return
	}
	if err := r.mps.release(gpu, in.id); err != nil {
		r.cfg.Log.Warn("containerd runtime: MPS daemon", "instance", in.id, "gpu", gpu, "err", err)
	}
}

func (r *Runtime) teardownNetwork(in *inst) {
	if !in.netns || r.cfg.Network == nil {
		return
	}
	ctx, cancel := context.WithTimeout(r.bg, 30*time.Second)
	defer cancel()
	if err := r.cfg.Network.Teardown(ctx, in.id); err != nil {
		r.cfg.Log.Warn("containerd runtime: instance network teardown", "instance", in.id, "err", err)
	}
	in.netns = false
}

// imageCommand is the command an image runs when the instance gives none:
// its entrypoint followed by its cmd, as docker run runs it. An image that
// names neither is the instance's error.
func imageCommand(ctx context.Context, img client.Image, id string) ([]string, error) {
	spec, err := img.Spec(ctx)
	if err != nil {
		return nil, fmt.Errorf("instance %s: read image %s's configuration: %w", id, img.Name(), err)
	}
	cmd := append(slices.Clone(spec.Config.Entrypoint), spec.Config.Cmd...)
	if len(cmd) == 0 || cmd[0] == "" {
		return nil, fmt.Errorf("instance %s: no command: the instance gives none and image %s names none (no ENTRYPOINT or CMD): %w",
			id, img.Name(), runtime.ErrInvalid)
	}
	return cmd, nil
}
