package containerd

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// A host user of each workload's own (issue 21: tenants that shared uid
// 65534 shared its per-user kernel limits, so one could take every inotify
// instance, message queue and pipe buffer of the uid and starve its
// neighbours). Unless Config.User names one user for all, each container
// runs as a uid and gid of its own from a range the runtime owns
// (Config.UIDBase, Config.UIDCount), as subordinate IDs are: no host
// account has them. A uid is claimed machine-wide by creating a file named
// after it in Config.UIDDir (O_EXCL), which says whose it is, so the
// runtimes of several hosts on one machine (gpucloud up, the tests), and
// two clouds, never give one uid to two workloads. A claim lasts as long
// as its container: Remove releases it, an agent that restarts adopts the
// claims of the containers it adopts and drops the rest of its own.
//
// A workload's directories (its working directory and volumes) are owned
// by its uid. One that another uid owns (a volume written by another
// instance, a working directory from an earlier start under another uid)
// is given to the new uid, every entry of it, without following links:
// Kubernetes' fsGroupChangePolicy OnRootMismatch does the same, and only
// the first start under a new uid pays for the walk.

// Defaults of the per-instance users.
const (
	// DefaultUIDBase is the first uid (and gid) of the range: above the
	// subordinate IDs useradd hands out (100000 upwards, 65536 a user)
	// for the first 15,000 users, and below 2^31.
	DefaultUIDBase = 1_000_000_000
	// DefaultUIDCount is the size of the range: far more than the
	// containers of the hosts of one machine.
	DefaultUIDCount = 1 << 20
	// DefaultUIDDir holds the machine's claims: on tmpfs, so that a
	// reboot, which ends every container, ends every claim too.
	DefaultUIDDir = "/run/gpucloud/uids"
)

// errNoUID is the error of a full range.
var errNoUID = errors.New("no free workload uid")

// uidPool claims uids of a range for the instances of one runtime, whose
// claims it marks with owner: its containerd socket, namespace and host
// label, which together name the runtime's containers on the machine (two
// clouds' `up`s each run a containerd of their own).
type uidPool struct {
	dir         string
	base, count uint32
	owner       string
}

func newUIDPool(cfg Config) (*uidPool, error) {
	if cfg.UIDCount == 0 || uint64(cfg.UIDBase)+uint64(cfg.UIDCount) > 1<<31 || cfg.UIDBase < 1000 {
		return nil, fmt.Errorf("containerd runtime: workload uid range %d+%d: want a non-empty range from 1000 to below 2^31", cfg.UIDBase, cfg.UIDCount)
	}
	if err := os.MkdirAll(cfg.UIDDir, 0o700); err != nil {
		return nil, fmt.Errorf("containerd runtime: workload uid claims: %w", err)
	}
	return &uidPool{dir: cfg.UIDDir, base: cfg.UIDBase, count: cfg.UIDCount, owner: cfg.Socket + "\t" + cfg.Namespace + "\t" + cfg.Host + "\t"}, nil
}

// claimText is what the claim file of an instance's uid holds.
func (p *uidPool) claimText(id string) string { return p.owner + id + "\n" }

// acquire claims a uid for instance id: the same one as before if the
// instance still holds one (a restart), otherwise the first free one from
// a start that depends on the instance's ID, so that an instance started
// again after its claim ended likely gets its old uid back.
func (p *uidPool) acquire(id string) (uint32, error) {
	h := fnv.New32a()
	h.Write([]byte(p.owner + id))
	start := h.Sum32() % p.count
	want := p.claimText(id)
	for i := range p.count {
		uid := p.base + (start+i)%p.count
		path := filepath.Join(p.dir, strconv.FormatUint(uint64(uid), 10))
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			if b, rerr := os.ReadFile(path); rerr == nil && string(b) == want {
				return uid, nil
			}
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("claim workload uid %d: %w", uid, err)
		}
		_, werr := f.WriteString(want)
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			_ = os.Remove(path)
			return 0, fmt.Errorf("claim workload uid %d: %w", uid, werr)
		}
		return uid, nil
	}
	return 0, fmt.Errorf("instance %s: %w: all %d of %d+ are taken (%s)", id, errNoUID, p.count, p.base, p.dir)
}

// adopt makes sure instance id's claim of uid exists, as when it was
// made; a claim of uid by another owner is an error (the range is shared
// with a runtime that should not share it).
func (p *uidPool) adopt(uid uint32, id string) error {
	path := filepath.Join(p.dir, strconv.FormatUint(uint64(uid), 10))
	want := p.claimText(id)
	b, err := os.ReadFile(path)
	switch {
	case err == nil && string(b) == want:
		return nil
	case err == nil:
		return fmt.Errorf("instance %s runs as uid %d, which %q claims", id, uid, strings.TrimSpace(string(b)))
	case errors.Is(err, fs.ErrNotExist):
		return os.WriteFile(path, []byte(want), 0o600)
	}
	return err
}

// release ends instance id's claim of uid; another's is left alone.
func (p *uidPool) release(uid uint32, id string) {
	path := filepath.Join(p.dir, strconv.FormatUint(uint64(uid), 10))
	if b, err := os.ReadFile(path); err == nil && string(b) == p.claimText(id) {
		_ = os.Remove(path)
	}
}

// prune ends this runtime's claims of instances it does not hold (those
// whose container went while no runtime ran).
func (p *uidPool) prune(held map[string]bool) error {
	ents, err := os.ReadDir(p.dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		path := filepath.Join(p.dir, e.Name())
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		id, ok := strings.CutPrefix(strings.TrimSuffix(string(b), "\n"), p.owner)
		if ok && !strings.Contains(id, "\t") && !held[id] {
			_ = os.Remove(path)
		}
	}
	return nil
}

// chownTree gives dir, and when dir's owner is not uid:gid everything in
// it, to uid:gid, without following symbolic links.
func chownTree(dir string, uid, gid uint32) error {
	st, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if owner(st) == [2]uint32{uid, gid} {
		return nil
	}
	return filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, int(uid), int(gid))
	})
}

// owner is the uid and gid that own a file.
func owner(fi fs.FileInfo) [2]uint32 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return [2]uint32{st.Uid, st.Gid}
	}
	return [2]uint32{^uint32(0), ^uint32(0)}
}

// adoptUser sets an adopted container's user from its label ("uid:gid";
// none: the runtime's fixed user, as it was made) and renews its claim.
func (r *Runtime) adoptUser(in *inst, label string) {
	in.uid, in.gid = r.uid, r.gid
	if label == "" {
		return
	}
	uid, gid, err := parseUser(label)
	if err != nil {
		r.cfg.Log.Warn("containerd runtime: an adopted container's user", "instance", in.id, "label", label, "err", err)
		return
	}
	in.uid, in.gid = uid, gid
	if r.uids == nil {
		return // a runtime with one user for all adopts it as it runs
	}
	in.ownUID = true
	if err := r.uids.adopt(uid, in.id); err != nil {
		r.cfg.Log.Warn("containerd runtime: an adopted container's uid claim", "instance", in.id, "err", err)
	}
}
