//go:build linux

package files

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"syscall"

	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/internal/filexfer"
)

// InstanceRoots is the runtime's part in `instances cp`: the directory
// that is a running instance's filesystem as the agent sees it, and the
// uid and gid that own what a copy creates there (-1: the agent's). The
// containerd and process runtimes implement it (FilesRoot).
type InstanceRoots interface {
	FilesRoot(id string) (dir string, uid, gid int, err error)
}

// Handler serves files sessions (agentapi.SessionFiles): an
// agent.SessionHandler.
type Handler struct {
	// VolumeDir is the directory holding a volume's files now
	// (agent.AcquireVolume), or why there is none, and a release the
	// session calls when it ends.
	VolumeDir func(id string, shared bool, sizeGiB int64) (string, func(), error)
	// Runtime roots instances' files; nil: instances cp is refused.
	Runtime InstanceRoots
	// Dialer connects to a port inside an instance, for direct port
	// forwards (Direct); nil: they are refused.
	Dialer runtime.Dialer
	Log    *slog.Logger
}

// ServeSession serves one files session on conn until the client ends it.
// The target is the request's Files field (agentapi.FilesTarget); an
// instance target without it is the request's InstanceID. A target that
// cannot be opened is still served: every request is answered with why,
// which the client shows.
func (h *Handler) ServeSession(ctx context.Context, req agentapi.SessionRequest, conn net.Conn) error {
	var t agentapi.FilesTarget
	if len(req.Files) > 0 {
		if err := json.Unmarshal(req.Files, &t); err != nil {
			return fmt.Errorf("files session %s: target: %w", req.ID, err)
		}
	}
	if t.VolumeID == "" && t.InstanceID == "" {
		t.InstanceID = req.InstanceID
	}
	return h.serveTarget(ctx, req.ID, req.Actor, t, conn)
}

// serveTarget serves session id of actor on t over conn.
func (h *Handler) serveTarget(ctx context.Context, id, actor string, t agentapi.FilesTarget, conn io.ReadWriteCloser) error {
	root, release, err := h.open(t)
	if release != nil {
		defer release()
	}
	if err != nil {
		h.log().Info("files session refused", "session", id, "volume", t.VolumeID, "instance", t.InstanceID, "err", err)
		return filexfer.Serve(ctx, conn, failFS{err})
	}
	defer root.Close()
	h.log().Info("files session", "session", id, "volume", t.VolumeID, "instance", t.InstanceID, "actor", actor)
	return filexfer.Serve(ctx, conn, root)
}

func (h *Handler) log() *slog.Logger {
	if h.Log == nil {
		return slog.Default()
	}
	return h.Log
}

// open roots the session: a volume's directory, owned by whoever owns it
// (the containerd runtime gives a volume to the uid of the workload that
// uses it), or an instance's filesystem as its runtime says.
func (h *Handler) open(t agentapi.FilesTarget) (*Root, func(), error) {
	if t.VolumeID != "" {
		if err := runtime.ValidateID(t.VolumeID); err != nil || h.VolumeDir == nil {
			return nil, nil, &agentapi.FileError{Code: agentapi.FileInvalid, Message: fmt.Sprintf("bad volume id %q", t.VolumeID)}
		}
		dir, release, err := h.VolumeDir(t.VolumeID, t.Shared, t.SizeGiB)
		if err != nil {
			return nil, nil, &agentapi.FileError{Code: agentapi.FileInvalid, Message: err.Error()}
		}
		fi, err := os.Stat(dir)
		if err != nil {
			return nil, release, err
		}
		uid, gid := -1, -1
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != uint32(os.Geteuid()) {
			uid, gid = int(st.Uid), int(st.Gid)
		}
		root, err := OpenRoot(dir, uid, gid)
		return root, release, err
	}
	if h.Runtime == nil {
		return nil, nil, &agentapi.FileError{Code: agentapi.FileInvalid, Message: "this host's runtime does not copy instances' files"}
	}
	dir, uid, gid, err := h.Runtime.FilesRoot(t.InstanceID)
	if errors.Is(err, runtime.ErrNotFound) {
		return nil, nil, &agentapi.FileError{Code: agentapi.FileNotFound, Message: "instance " + t.InstanceID + " is not running on this host"}
	}
	if err != nil {
		return nil, nil, &agentapi.FileError{Code: agentapi.FileInvalid, Message: err.Error()}
	}
	root, err := OpenRoot(dir, uid, gid)
	return root, nil, err
}

// failFS answers every operation with one error: a session whose target
// could not be opened.
type failFS struct{ err error }

func (f failFS) Stat(string) (agentapi.FileInfo, error)           { return agentapi.FileInfo{}, f.err }
func (f failFS) Walk(string, func(agentapi.FileInfo) error) error { return f.err }
func (f failFS) Mkdir(string, fs.FileMode) error                  { return f.err }
func (f failFS) Open(string) (*os.File, error)                    { return nil, f.err }
func (f failFS) OpenPartial(string) (*os.File, error)             { return nil, f.err }
func (f failFS) PartialSize(string) (int64, error)                { return 0, f.err }
func (f failFS) Commit(string, fs.FileMode) error                 { return f.err }
