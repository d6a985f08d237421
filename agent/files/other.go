//go:build !linux

package files

import (
	"context"
	"errors"
	"log/slog"
	"net"

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
	Log       *slog.Logger
}

// ServeSession refuses the session.
func (h *Handler) ServeSession(context.Context, agentapi.SessionRequest, net.Conn) error {
	return errors.New("files sessions need a Linux host")
}
