package filexfer

import (
	"errors"
	"io/fs"
	"os"
	"path"
	"syscall"

	"github.com/gpucloud/gpucloud/agentapi"
)

// rootFS is an FS over a directory through os.Root, for this package's
// tests (the agent's own, with openat2, is agent/files).
type rootFS struct{ r *os.Root }

func (f rootFS) Stat(name string) (agentapi.FileInfo, error) {
	fi, err := f.r.Stat(name)
	if err != nil {
		return agentapi.FileInfo{}, err
	}
	return agentapi.FileInfo{Path: name, Size: fi.Size(), Mode: uint32(fi.Mode().Perm()), IsDir: fi.IsDir()}, nil
}

func (f rootFS) Walk(name string, fn func(agentapi.FileInfo) error) error {
	return fs.WalkDir(f.r.FS(), name, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == name {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if !fi.IsDir() && !fi.Mode().IsRegular() {
			return nil
		}
		rel := p[len(name)+1:]
		if name == "." {
			rel = p
		}
		return fn(agentapi.FileInfo{Path: rel, Size: fi.Size(), Mode: uint32(fi.Mode().Perm()), IsDir: fi.IsDir()})
	})
}

func (f rootFS) Mkdir(name string, perm fs.FileMode) error { return f.r.MkdirAll(name, perm) }
func (f rootFS) Open(name string) (*os.File, error)        { return f.r.Open(name) }

func (f rootFS) OpenPartial(name string) (*os.File, error) {
	if err := f.r.MkdirAll(path.Dir(name), 0o755); err != nil {
		return nil, err
	}
	p, err := f.r.OpenFile(PartialName(name), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	// One writer per partial file, as the agent's files keep it: a cut
	// put's session may still be writing when its copy is resumed.
	if err := syscall.Flock(int(p.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		p.Close()
		if err == syscall.EWOULDBLOCK {
			return nil, &agentapi.FileError{Code: agentapi.FileBusy, Message: name + ": another copy is writing it"}
		}
		return nil, err
	}
	return p, nil
}

func (f rootFS) PartialSize(name string) (int64, error) {
	fi, err := f.r.Stat(PartialName(name))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

func (f rootFS) Commit(name string, perm fs.FileMode) error {
	if err := f.r.Chmod(PartialName(name), perm); err != nil {
		return err
	}
	return f.r.Rename(PartialName(name), name)
}
