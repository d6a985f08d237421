package containerd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/contrib/seccomp"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/opencontainers/image-spec/identity"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/gpucloud/gpucloud/agent/runtime"
)

// mounts is where the instance's host directories appear in the
// container.
type mounts struct {
	// cwd is the working directory in the container, and HOME.
	cwd string
	// binds are host directory → container path, in mount order.
	binds [][2]string
	// volumes are the container paths of Spec.Volumes, in order.
	volumes []string
	// scratch is the container path of Spec.Scratch (ScratchDir), empty
	// without one.
	scratch string
	// mpsPipe is the pipe directory of the MPS daemon of a share's GPU,
	// mounted at the same path; empty without one.
	mpsPipe string
	// mpsShm is that daemon's shm directory, mounted at /dev/shm instead
	// of the container's own tmpfs; empty without one.
	mpsShm string
	// layerResolvConf says that the resolv.conf is written into the
	// container's writable layer once its snapshot exists
	// (writeLayerResolvConf).
	layerResolvConf bool
	// resolvConf is the host file mounted read-only at ResolvConfPath;
	// empty: the image's own.
	resolvConf string
}

// layout places the working directory and volumes: each volume at
// VolumesDir/<its directory's name>, the working directory at WorkDir
// unless it is one of the volumes (the agent runs a workload with volumes
// in its first one), and the instance store at ScratchDir.
func layout(s runtime.Spec) (mounts, error) {
	var m mounts
	seen := map[string]bool{}
	work := filepath.Clean(s.WorkDir)
	for _, v := range s.Volumes {
		v = filepath.Clean(v)
		name := filepath.Base(v)
		if !filepath.IsAbs(v) || name == "/" || name == "." || seen[name] {
			return m, fmt.Errorf("volume %q: want absolute directories with distinct names: %w", v, runtime.ErrInvalid)
		}
		seen[name] = true
		p := path.Join(VolumesDir, name)
		m.binds = append(m.binds, [2]string{v, p})
		m.volumes = append(m.volumes, p)
		if v == work {
			m.cwd = p
		}
	}
	if m.cwd == "" {
		m.cwd = WorkDir
		m.binds = append([][2]string{{work, WorkDir}}, m.binds...)
	}
	if s.Scratch != "" {
		sc := filepath.Clean(s.Scratch)
		if !filepath.IsAbs(sc) || sc == work || slices.Contains(s.Volumes, sc) {
			return m, fmt.Errorf("instance store %q: want an absolute directory of its own: %w", s.Scratch, runtime.ErrInvalid)
		}
		m.binds = append(m.binds, [2]string{sc, ScratchDir})
		m.scratch = ScratchDir
	}
	return m, nil
}

// containerEnv is the workload's environment: runtime.Environ with the
// paths and the metadata URL the workload sees, and the MPS pipe
// directory of a share whose GPU has a daemon.
func containerEnv(s runtime.Spec, m mounts) []string {
	s.Volumes, s.Scratch = m.volumes, m.scratch
	if s.Metadata != nil {
		s.MetadataURL = metadataURL()
	}
	env := runtime.Environ(s, m.cwd)
	if m.mpsPipe != "" {
		env = append(env, runtime.EnvMPSPipe+"="+m.mpsPipe)
		slices.Sort(env)
	}
	return env
}

// specOpts builds the container's OCI spec.
func (r *Runtime) specOpts(s runtime.Spec, m mounts, cgroup, netns string, uid, gid uint32) ([]oci.SpecOpts, error) {
	args := s.Command
	var ms []specs.Mount
	bindOpts := []string{"rbind", "rw", "nosuid", "nodev"}
	for _, b := range m.binds {
		ms = append(ms, specs.Mount{Destination: b[1], Type: "bind", Source: b[0], Options: bindOpts})
	}
	if m.resolvConf != "" {
		ms = append(ms, resolvConfMount(m.resolvConf))
	}
	if r.init != "" {
		ms = append(ms, specs.Mount{Destination: InitPath, Type: "bind", Source: r.init, Options: []string{"bind", "ro", "nosuid", "nodev"}})
		// -g: signals go to the workload's process group, as the process
		// runtime sends them; -s is not needed as tini is PID 1.
		args = append([]string{InitPath, "-g", "--"}, args...)
	}
	hostname := s.InstanceID
	if len(hostname) > 63 {
		hostname = hostname[:63]
	}
	opts := []oci.SpecOpts{
		oci.WithDefaultSpec(),
		oci.WithDefaultUnixDevices,
		oci.WithProcessArgs(args...),
		oci.WithProcessCwd(m.cwd),
		// WithEnv merges; the spec's defaults are replaced wholesale.
		func(_ context.Context, _ oci.Client, _ *containers.Container, sp *oci.Spec) error {
			sp.Process.Env = containerEnv(s, m)
			return nil
		},
		oci.WithHostname(hostname),
		oci.WithMounts(ms),
		func(_ context.Context, _ oci.Client, _ *containers.Container, sp *oci.Spec) error {
			if m.mpsShm == "" {
				return nil
			}
			// The default spec's /dev/shm tmpfs gives way to the MPS
			// daemon's shm directory (a bind in ms).
			sp.Mounts = slices.DeleteFunc(sp.Mounts, func(mt specs.Mount) bool {
				return mt.Destination == "/dev/shm" && mt.Type != "bind"
			})
			return nil
		},
		oci.WithUIDGID(uid, gid),
		oci.WithNoNewPrivileges,
		oci.WithCgroup(cgroup),
		seccomp.WithDefaultProfile(),
		withNofile(),
	}
	if uid != 0 {
		// No capability at all: a non-root user keeps none across exec
		// anyway; empty sets make it explicit, bounding set included.
		opts = append(opts, func(_ context.Context, _ oci.Client, _ *containers.Container, sp *oci.Spec) error {
			sp.Process.Capabilities = &specs.LinuxCapabilities{}
			return nil
		})
	}
	if netns != "" {
		opts = append(opts, oci.WithLinuxNamespace(specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: netns}))
	}
	pids := s.PidsLimit
	if pids <= 0 {
		pids = r.cfg.PidsLimit
	}
	opts = append(opts, oci.WithPidsLimit(pids))
	if s.MemoryMiB > 0 {
		opts = append(opts, oci.WithMemoryLimit(uint64(s.MemoryMiB)<<20))
	}
	if s.CPUMilli > 0 {
		const period = 100_000 // µs
		opts = append(opts, oci.WithCPUCFS(max(1000, s.CPUMilli*period/1000), period),
			oci.WithCPUShares(uint64(max(2, s.CPUMilli*1024/1000))))
	}
	gpus, err := r.gpuOpts(s)
	if err != nil {
		return nil, err
	}
	opts = append(opts, gpus...)
	extra, err := r.extraDevices(s)
	if err != nil {
		return nil, err
	}
	if len(extra) > 0 {
		opts = append(opts, withDevices(extra))
	}
	return opts, nil
}

// checkExtraDevices refuses, before anything is made, an extra device
// that is not a clean absolute path under /dev: the workload gets the
// node at the same path, and nothing else of the host.
func checkExtraDevices(s runtime.Spec) error {
	for _, p := range s.ExtraDevices {
		if _, ok := devName(p); !ok {
			return fmt.Errorf("instance %s: extra device %q: want a clean absolute path under /dev: %w", s.InstanceID, p, runtime.ErrInvalid)
		}
	}
	return nil
}

// devName is a device path's name under /dev ("infiniband/uverbs0"), and
// false for a path that is not a clean absolute path under /dev.
func devName(p string) (string, bool) {
	name, ok := strings.CutPrefix(p, "/dev/")
	return name, ok && name != "" && path.Clean(p) == p
}

// extraDevices are the nodes of Spec.ExtraDevices (the host's RDMA
// adapters' verbs nodes and rdma_cm): each /dev/NAME is the node
// Config.DevDir/NAME on the host, at /dev/NAME in the container, and must
// be a character device (a block device, a directory or a file is
// refused).
func (r *Runtime) extraDevices(s runtime.Spec) ([]device, error) {
	if err := checkExtraDevices(s); err != nil {
		return nil, err
	}
	out := make([]device, 0, len(s.ExtraDevices))
	for _, p := range s.ExtraDevices {
		name, _ := devName(p)
		host := filepath.Join(r.cfg.DevDir, filepath.FromSlash(name))
		ma, mi, err := charDevice(host)
		if err != nil {
			return nil, fmt.Errorf("extra device %s: %w", p, err)
		}
		out = append(out, device{host: host, path: p, major: ma, minor: mi})
	}
	return out, nil
}

// gpuOpts give the workload its GPUs: the CDI devices that name them with
// Config.CDI, else their device nodes from DevDir.
func (r *Runtime) gpuOpts(s runtime.Spec) ([]oci.SpecOpts, error) {
	var opts []oci.SpecOpts
	if r.cdi != nil {
		if len(s.GPUIndexes) == 0 && len(s.MIG) == 0 && len(s.RenderMinors) == 0 {
			return nil, nil
		}
		if err := r.cdi.refresh(); err != nil {
			r.cfg.Log.Warn("containerd runtime: CDI specifications", "err", err)
		}
		names, err := r.cdi.names(s, r.cfg.MIGMinors)
		if err != nil {
			return nil, err
		}
		return append(opts, r.cdi.withDevices(names)), nil
	}
	devs, err := r.devices(s)
	if err != nil {
		return nil, err
	}
	if len(devs) > 0 {
		opts = append(opts, withDevices(devs))
	}
	return opts, nil
}

// withNofile sets RLIMIT_NOFILE to what the agent itself may have, at most
// 65536 (containerd's default of 1024 is too few for data loaders).
func withNofile() oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, sp *oci.Spec) error {
		var rl unix.Rlimit
		if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
			return nil // keep the default
		}
		n := min(rl.Max, 65536)
		for i := range sp.Process.Rlimits {
			if sp.Process.Rlimits[i].Type == "RLIMIT_NOFILE" {
				sp.Process.Rlimits[i].Hard, sp.Process.Rlimits[i].Soft = n, n
			}
		}
		return nil
	}
}

func runcOptions(binary string) *options.Options {
	return &options.Options{BinaryName: binary}
}

// device is one device node a workload may open.
type device struct {
	// host is the node on the host; path is where it appears in the
	// container.
	host, path   string
	major, minor int64
}

// devices are the device nodes of a Spec's GPUs: /dev/nvidiaN for each
// of GPUIndexes, the control nodes (nvidiactl, nvidia-uvm,
// nvidia-uvm-tools; those the host has) when there is a GPU, and the
// nvidia-caps nodes of each MIG slice (its GPU instance's and its compute
// instance's access nodes). Nodes are read from Config.DevDir, their
// numbers from the nodes themselves, the MIG minors from Config.MIGMinors.
func (r *Runtime) devices(s runtime.Spec) ([]device, error) {
	if len(s.GPUIndexes) == 0 && len(s.MIG) == 0 && len(s.RenderMinors) == 0 {
		return nil, nil
	}
	var out []device
	add := func(name string, required bool) error {
		host := filepath.Join(r.cfg.DevDir, name)
		ma, mi, err := charDevice(host)
		if err != nil {
			if !required && errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return fmt.Errorf("GPU device node: %w", err)
		}
		out = append(out, device{host: host, path: path.Join("/dev", name), major: ma, minor: mi})
		return nil
	}
	if len(s.RenderMinors) > 0 {
		// AMD: the compute driver's shared node and exactly the render
		// nodes of the workload's GPUs or partitions.
		if err := add("kfd", true); err != nil {
			return nil, err
		}
		minors := slices.Clone(s.RenderMinors)
		slices.Sort(minors)
		for _, m := range slices.Compact(minors) {
			if err := add("dri/renderD"+strconv.Itoa(m), true); err != nil {
				return nil, err
			}
		}
		if len(s.GPUIndexes) == 0 && len(s.MIG) == 0 {
			return out, nil
		}
	}
	gpus := slices.Clone(s.GPUIndexes)
	for _, m := range s.MIG {
		gpus = append(gpus, m.GPU)
	}
	slices.Sort(gpus)
	for _, g := range slices.Compact(gpus) {
		if err := add("nvidia"+strconv.Itoa(g), true); err != nil {
			return nil, err
		}
	}
	for _, n := range []string{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"} {
		if err := add(n, false); err != nil {
			return nil, err
		}
	}
	if len(s.MIG) == 0 {
		return out, nil
	}
	minors, err := readMIGMinors(r.cfg.MIGMinors)
	if err != nil {
		return nil, err
	}
	for _, m := range s.MIG {
		for _, key := range []string{
			fmt.Sprintf("gpu%d/gi%d/access", m.GPU, m.GI),
			fmt.Sprintf("gpu%d/gi%d/ci%d/access", m.GPU, m.GI, m.CI),
		} {
			minor, ok := minors[key]
			if !ok {
				return nil, fmt.Errorf("MIG device %+v: %s has no %s", m, r.cfg.MIGMinors, key)
			}
			if err := add("nvidia-caps/nvidia-cap"+strconv.Itoa(minor), true); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// readMIGMinors reads the NVIDIA driver's "name minor" table.
func readMIGMinors(file string) (map[string]int, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("MIG capability minors: %w", err)
	}
	defer f.Close()
	out := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), " ")
		if n, err := strconv.Atoi(strings.TrimSpace(v)); ok && err == nil {
			out[k] = n
		}
	}
	return out, sc.Err()
}

// charDevice returns the numbers of a character device node.
func charDevice(p string) (major, minor int64, err error) {
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		return 0, 0, &fs.PathError{Op: "stat", Path: p, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR {
		return 0, 0, fmt.Errorf("%s is not a character device", p)
	}
	return int64(unix.Major(uint64(st.Rdev))), int64(unix.Minor(uint64(st.Rdev))), nil
}

// withDevices creates the nodes in the container (0666, so the
// workload's user opens them) and allows exactly them in the device
// cgroup, after the default spec's deny-all.
func withDevices(devs []device) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, sp *oci.Spec) error {
		mode := os.FileMode(0o666)
		zero := uint32(0)
		for _, d := range devs {
			sp.Linux.Devices = append(sp.Linux.Devices, specs.LinuxDevice{
				Path: d.path, Type: "c", Major: d.major, Minor: d.minor, FileMode: &mode, UID: &zero, GID: &zero,
			})
			sp.Linux.Resources.Devices = append(sp.Linux.Resources.Devices, specs.LinuxDeviceCgroup{
				Allow: true, Type: "c", Major: &d.major, Minor: &d.minor, Access: "rw",
			})
		}
		return nil
	}
}

// lookPath checks, as the process runtime does before it forks, that the
// program exists in the container: in the instance's mounts when its path
// leads there, else in the image, searched along the workload's PATH. The
// image is looked at through a read-only view of its root filesystem.
//
// Nothing is looked up among the host's own files. A path under a mount is
// resolved within that mount's directory (os.Root); a symlink that leads
// out of it, or an absolute one, is not followed on the host, where it
// would point at the host's files rather than the container's. Such a
// program is left to the container: its init resolves it in the
// container's view, and one that is missing there is the workload's own
// failure, the same whatever the host holds at that path.
func (r *Runtime) lookPath(ctx context.Context, img client.Image, s runtime.Spec, m mounts) error {
	env := containerEnv(s, m)
	pathEnv := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathEnv = v
		}
	}
	name := s.Command[0]
	var candidates []string
	if strings.Contains(name, "/") {
		p := name
		if !path.IsAbs(p) {
			p = path.Join(m.cwd, p)
		}
		candidates = []string{path.Clean(p)}
	} else {
		for _, dir := range strings.Split(pathEnv, ":") {
			if path.IsAbs(dir) {
				candidates = append(candidates, path.Join(dir, name))
			}
		}
	}
	var inImage []string
	unresolved := false
	for _, c := range candidates {
		if dir, rel, ok := underMount(c, m); ok {
			switch inMount(dir, rel) {
			case programFound:
				return nil
			case programUnresolved:
				unresolved = true
			}
			continue
		}
		inImage = append(inImage, c)
	}
	if len(inImage) > 0 {
		found, err := r.inImage(ctx, img, s.InstanceID, inImage)
		if err != nil {
			// The check is a courtesy: if the image cannot be looked
			// at, the start goes on and a missing program shows in the
			// workload's exit status.
			r.cfg.Log.Warn("containerd runtime: cannot look the program up in the image", "instance", s.InstanceID, "err", err)
			return nil
		}
		if found {
			return nil
		}
	}
	if unresolved {
		return nil
	}
	if strings.Contains(name, "/") {
		return fmt.Errorf("program %q is not an executable file in the container: %w", name, runtime.ErrInvalid)
	}
	return fmt.Errorf("program %q not found in the container's PATH %q: %w", name, pathEnv, runtime.ErrInvalid)
}

// underMount maps a container path under one of the instance's bind
// mounts to the mount's host directory and the path's slash-separated
// rest below it ("." for the mount point itself).
func underMount(p string, m mounts) (dir, rel string, ok bool) {
	for _, b := range m.binds {
		if rest, ok := strings.CutPrefix(p, b[1]); ok && (rest == "" || rest[0] == '/') {
			rel = strings.TrimPrefix(rest, "/")
			if rel == "" {
				rel = "."
			}
			return b[0], rel, true
		}
	}
	return "", "", false
}

// programLookup is what inMount finds.
type programLookup int

const (
	// programMissing: no executable file at the path, within the mount.
	programMissing programLookup = iota
	// programFound: an executable regular file, within the mount.
	programFound
	// programUnresolved: the path leads out of the mount (a symlink),
	// so only the container can tell.
	programUnresolved
)

// inMount looks rel up within the host directory dir of a mount, never
// outside it: os.Root follows symlinks only while they stay inside, and
// refuses one that leaves or is absolute without looking at its target.
// Only a path that is not there (or runs into a non-directory) is missing;
// any other failure, a symlink out included, leaves it unresolved.
func inMount(dir, rel string) programLookup {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return programUnresolved
	}
	defer root.Close()
	fi, err := root.Stat(filepath.FromSlash(rel))
	switch {
	case err == nil:
		if fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return programFound
		}
		return programMissing
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR):
		return programMissing
	default:
		return programUnresolved
	}
}

// inImage reports whether one of the paths is an executable file in the
// image's root filesystem.
func (r *Runtime) inImage(ctx context.Context, img client.Image, id string, paths []string) (bool, error) {
	diffIDs, err := img.RootFS(ctx)
	if err != nil {
		return false, err
	}
	sn := r.client.SnapshotService(r.cfg.Snapshotter)
	key := "gpucloud-lookpath-" + id
	_ = sn.Remove(ctx, key) // a leftover of a crash
	ms, err := sn.View(ctx, key, identity.ChainID(diffIDs).String())
	if err != nil {
		return false, err
	}
	defer func() { _ = sn.Remove(context.WithoutCancel(ctx), key) }()
	found := false
	err = mount.WithReadonlyTempMount(ctx, ms, func(root string) error {
		for _, p := range paths {
			if resolved, ok := resolveIn(root, p); ok && executableIn(root, resolved) {
				found = true
				return nil
			}
		}
		return nil
	})
	return found, err
}

// resolveIn resolves p inside root as the container would see it:
// symlinks, absolute ones included, stay within root. It returns the
// resolved path relative to root.
func resolveIn(root, p string) (string, bool) {
	parts := strings.Split(strings.Trim(path.Clean(p), "/"), "/")
	var cur []string
	for hops := 0; len(parts) > 0; {
		part := parts[0]
		parts = parts[1:]
		switch part {
		case "", ".":
			continue
		case "..":
			if len(cur) > 0 {
				cur = cur[:len(cur)-1]
			}
			continue
		}
		next := append(slices.Clone(cur), part)
		host := filepath.Join(root, filepath.FromSlash(strings.Join(next, "/")))
		fi, err := os.Lstat(host)
		if err != nil {
			return "", false
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		if hops++; hops > 40 {
			return "", false
		}
		target, err := os.Readlink(host)
		if err != nil {
			return "", false
		}
		if path.IsAbs(target) {
			cur = nil
		}
		parts = append(strings.Split(strings.Trim(target, "/"), "/"), parts...)
	}
	return strings.Join(cur, "/"), true
}

// executableIn reports whether rel, inside dir, is a regular file with an
// execute bit.
func executableIn(dir, rel string) bool {
	fi, err := os.Stat(filepath.Join(dir, filepath.FromSlash(rel)))
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}
