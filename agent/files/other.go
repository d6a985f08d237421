//go:build !linux

package files

import (
	"context"
	"errors"
	"log/slog"
	"net"

	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/agentapi"
)

// InstanceRoots: see the Linux build.
type InstanceRoots interface {
	FilesRoot(id string) (dir string, uid, gid int, err error)
}

// Handler refuses files sessions: keeping them inside a tenant's tree
// needs Linux's openat2.
type Handler struct {
	VolumeDir func(id string, shared bool, sizeGiB int64) (string, func(), error)
	Runtime   InstanceRoots
	Dialer    runtime.Dialer
	Log       *slog.Logger
}

// ServeSession refuses the session.
func (h *Handler) ServeSession(context.Context, agentapi.SessionRequest, net.Conn) error {
	return errors.New("files sessions need a Linux host")
}

// errNeedsLinux answers what only the Linux build serves.
var errNeedsLinux = errors.New("direct sessions need a Linux host")

// Direct serves no direct sessions off Linux: see the Linux build.
type Direct struct {
	Reports *Reporter
}

// Serve refuses: direct sessions need a Linux host.
func (d *Direct) Serve(context.Context, net.Listener) error { return errNeedsLinux }

// ServeTunnel closes the tunnel.
func (d *Direct) ServeTunnel(_ context.Context, raw net.Conn) { raw.Close() }

// ListenDirect refuses: direct sessions need a Linux host.
func ListenDirect(listen, advertise, hostID string, caPEM []byte, keyDir string, h *Handler, log *slog.Logger) (*Direct, net.Listener, string, string, error) {
	return nil, nil, "", "", errNeedsLinux
}

// NewDirect is nil off Linux: the agent takes no tunnelled sessions,
// and the CLI falls back to the relay.
func NewDirect(hostID string, caPEM []byte, keyDir string, h *Handler, log *slog.Logger) (*Direct, string, error) {
	return nil, "", nil
}
