package sshd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"regexp"

	"github.com/gpucloud/gpucloud/agentapi"
)

// Handler serves the agent's ssh sessions (agentapi.SessionSSH; an
// agent.SessionHandler): each is one SSH connection to the instance, with
// the instance's host key and the tenant's keys the server sent.
type Handler struct {
	// KeyDir holds the instances' host keys, one file per instance
	// (the agent's data directory's ssh/).
	KeyDir string
	// Exec returns the Execer of an instance; Dial its Dialer (nil: no
	// port forwarding).
	Exec func(instanceID string) Execer
	Dial func(instanceID string) Dialer
	Log  *slog.Logger
}

// instanceID is what an instance ID looks like; anything else never
// names a key file (no path of the server's choosing).
var instanceID = regexp.MustCompile(`^i-[0-9a-z]{1,64}$`)

// ServeSession implements agent.SessionHandler.
func (h *Handler) ServeSession(ctx context.Context, req agentapi.SessionRequest, conn net.Conn) error {
	if !instanceID.MatchString(req.InstanceID) {
		return fmt.Errorf("sshd: instance ID %q", req.InstanceID)
	}
	var args agentapi.SSHSession
	if len(req.SSH) == 0 {
		return errors.New("sshd: the session carries no ssh arguments")
	}
	if err := json.Unmarshal(req.SSH, &args); err != nil {
		return fmt.Errorf("sshd: ssh arguments: %w", err)
	}
	keys, err := ParseAuthorized(args.AuthorizedKeys)
	if err != nil {
		return err
	}
	host, err := HostKey(filepath.Join(h.KeyDir, req.InstanceID+".key"))
	if err != nil {
		return err
	}
	log := h.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg := Config{HostKey: host, Authorized: keys, Exec: h.Exec(req.InstanceID),
		Log: log.With("session", req.ID, "instance", req.InstanceID, "actor", req.Actor)}
	if h.Dial != nil {
		cfg.Dial = h.Dial(req.InstanceID)
	}
	return Serve(ctx, conn, cfg)
}
