// Package sshd is the agent's SSH endpoint for an instance: an SSH server
// (golang.org/x/crypto/ssh) that speaks over one net.Conn the server relays
// to the agent (gpucloud instances ssh, or plain ssh with gpucloud
// ssh-config's ProxyCommand), so that no port is opened on the host or in
// the instance and the image needs no sshd.
//
// It authenticates by public key only, against the tenant's keys the
// server hands over with the session; it serves session channels (a shell
// or a command through an Execer that runs it inside the instance, with a
// pseudo-terminal, window changes, an allow-listed environment, signals
// and the exit status) and direct-tcpip channels to ports inside the
// instance (ssh -L, VS Code Remote) through a Dialer. It refuses everything
// else: remote forwarding, agent and X11 forwarding, other channel types.
package sshd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
)

// WindowSize is a terminal's size in characters.
type WindowSize struct {
	Cols, Rows uint16
}

// Process is what an Execer runs in the instance.
type Process struct {
	// Argv is the command: Config.Shell for a shell, ShellC with the
	// client's command for exec, or the sftp subsystem's.
	Argv []string
	// Env holds the variables the client sent that the allow-list lets
	// through (LANG, LC_*, TERM), as KEY=VALUE.
	Env []string
	// TTY asks for a pseudo-terminal of Size, resized by Resize; its
	// output is all on Stdout.
	TTY    bool
	Size   WindowSize
	Resize <-chan WindowSize
	// Signals carries the client's signals by SSH name, without "SIG"
	// (INT, TERM, KILL, HUP, QUIT, USR1, ...).
	Signals <-chan string
	Stdin   io.Reader
	Stdout  io.Writer
	Stderr  io.Writer
}

// Execer runs p in the instance and returns its exit code once it has
// exited and all of its output has been written; it kills the process when
// ctx ends (the client went away). An error means it could not run.
type Execer func(ctx context.Context, p Process) (exitCode int, err error)

// Dialer connects to a TCP port inside the instance.
type Dialer func(ctx context.Context, port uint16) (net.Conn, error)

// Config is one SSH connection's configuration.
type Config struct {
	// HostKey is the instance's host key (HostKey loads or makes one).
	HostKey ssh.Signer
	// Authorized are the keys that may log in: the tenant's.
	Authorized []ssh.PublicKey
	Exec       Execer
	// Dial serves direct-tcpip; nil refuses port forwarding.
	Dial Dialer
	// Shell is the argv of an interactive shell; DefaultShell when nil.
	Shell []string
	// ShellC is the argv a command string is appended to (exec
	// requests); DefaultShellC when nil.
	ShellC []string
	// Signals says whether Exec delivers Process.Signals; without it the
	// client's signal requests are answered no, so that it knows.
	Signals bool
	// Log records each session's start and end; nil discards.
	Log *slog.Logger
}

// DefaultShell is the shell of images without anything better: every
// image with a shell has /bin/sh, and -l reads the login profile.
var DefaultShell = []string{"/bin/sh", "-l"}

// DefaultShellC runs an exec request's command, as OpenSSH's sshd runs it
// with the user's shell.
var DefaultShellC = []string{"/bin/sh", "-c"}

// maxChannels bounds a connection's open channels (sessions and forwarded
// connections together), so that one client cannot start processes or
// dials without end.
const maxChannels = 32

// handshakeTimeout bounds the key exchange and authentication.
const handshakeTimeout = 30 * time.Second

// ParseAuthorized parses authorized_keys lines, one key a line (blank
// and # lines skipped); a line that does not parse is an error naming its
// number.
func ParseAuthorized(lines []string) ([]ssh.PublicKey, error) {
	var out []ssh.PublicKey
	for i, l := range lines {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		k, _, _, _, err := ssh.ParseAuthorizedKey([]byte(l))
		if err != nil {
			return nil, fmt.Errorf("sshd: authorized key %d: %w", i+1, err)
		}
		out = append(out, k)
	}
	return out, nil
}

// Serve runs the SSH server over nc until the client disconnects or ctx
// ends, and closes nc. It returns nil for a client that authenticated and
// left, and the handshake's error otherwise (a refused key among them).
func Serve(ctx context.Context, nc net.Conn, cfg Config) error {
	defer nc.Close()
	if cfg.HostKey == nil || cfg.Exec == nil {
		return errors.New("sshd: no host key or no execer")
	}
	if cfg.Shell == nil {
		cfg.Shell = DefaultShell
	}
	if cfg.ShellC == nil {
		cfg.ShellC = DefaultShellC
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	sc := &ssh.ServerConfig{
		ServerVersion: "SSH-2.0-gpucloud",
		PublicKeyCallback: func(meta ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			for _, k := range cfg.Authorized {
				if bytes.Equal(k.Marshal(), key.Marshal()) {
					return &ssh.Permissions{Extensions: map[string]string{"fingerprint": ssh.FingerprintSHA256(key)}}, nil
				}
			}
			return nil, errors.New("key not among the tenant's (gpucloud keys list)")
		},
	}
	sc.AddHostKey(cfg.HostKey)
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	defer stop()
	_ = nc.SetDeadline(time.Now().Add(handshakeTimeout))
	conn, chans, reqs, err := ssh.NewServerConn(nc, sc)
	if err != nil {
		return fmt.Errorf("sshd: handshake: %w", err)
	}
	_ = nc.SetDeadline(time.Time{})
	defer conn.Close()
	cfg.Log.Info("ssh connection", "user", conn.User(), "key", conn.Permissions.Extensions["fingerprint"])
	// Global requests (tcpip-forward: remote forwarding; keepalives) are
	// all answered no.
	go ssh.DiscardRequests(reqs)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s := &server{cfg: cfg, slots: make(chan struct{}, maxChannels)}
	for nch := range chans {
		select {
		case s.slots <- struct{}{}:
		default:
			_ = nch.Reject(ssh.ResourceShortage, fmt.Sprintf("at most %d channels per connection", maxChannels))
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() { <-s.slots }()
			s.channel(ctx, nch)
		}()
	}
	cancel()
	s.wg.Wait()
	return nil
}

type server struct {
	cfg   Config
	slots chan struct{}
	wg    sync.WaitGroup
}

func (s *server) channel(ctx context.Context, nch ssh.NewChannel) {
	switch nch.ChannelType() {
	case "session":
		s.session(ctx, nch)
	case "direct-tcpip":
		s.directTCPIP(ctx, nch)
	default:
		_ = nch.Reject(ssh.UnknownChannelType, "gpucloud serves session and direct-tcpip channels only")
	}
}
