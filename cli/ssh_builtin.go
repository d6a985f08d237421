package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
	"golang.org/x/crypto/ssh/knownhosts"
	"golang.org/x/term"

	"github.com/gpucloud/gpucloud/client"
)

// builtinSSH is `instances ssh` where OpenSSH's client is not installed:
// the same session through the same path (DialSSH), with an SSH client of
// our own (golang.org/x/crypto/ssh). It logs in with -i's key, else the
// keys of ssh-agent ($SSH_AUTH_SOCK), else ~/.ssh/id_ed25519, id_ecdsa and
// id_rsa where they have no passphrase; it checks the host key against
// the same known_hosts file as ssh-config's stanza, adding it on first use
// (StrictHostKeyChecking accept-new).
func builtinSSH(ctx context.Context, cmd *cobra.Command, c *conn, id, identity string, remote []string) error {
	auth, closeAuth, err := sshAuth(identity)
	if err != nil {
		return err
	}
	defer closeAuth()
	host := id + client.SSHDomain
	nc, err := c.DialSSH(ctx, id)
	if err != nil {
		return c.explain(err)
	}
	defer nc.Close()
	sc, chans, reqs, err := ssh.NewClientConn(nc, host+":22", &ssh.ClientConfig{
		User: sshUser, Auth: []ssh.AuthMethod{auth}, HostKeyCallback: acceptNewHostKey(knownHostsPath()),
	})
	if err != nil {
		return fmt.Errorf("ssh to %s: %w", host, err)
	}
	cl := ssh.NewClient(sc, chans, reqs)
	defer cl.Close()
	s, err := cl.NewSession()
	if err != nil {
		return err
	}
	defer s.Close()
	s.Stdin, s.Stdout, s.Stderr = cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr()
	if f, ok := cmd.InOrStdin().(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		restore, err := sshTerminal(ctx, s, int(f.Fd()))
		if err != nil {
			return err
		}
		defer restore()
	}
	if len(remote) == 0 {
		err = s.Shell()
	} else {
		err = s.Start(strings.Join(remote, " "))
	}
	if err != nil {
		return err
	}
	err = s.Wait()
	var ee *ssh.ExitError
	switch {
	case errors.As(err, &ee):
		return &codeError{code: ee.ExitStatus(), err: errors.New("")}
	case errors.Is(err, io.EOF):
		return nil
	}
	return err
}

// sshTerminal asks for a terminal of the local one's size and TERM, puts
// the local one in raw mode (Ctrl-C goes to the remote process) and
// sends its size changes; restore undoes it.
func sshTerminal(ctx context.Context, s *ssh.Session, fd int) (restore func(), err error) {
	w, h, err := term.GetSize(fd)
	if err != nil {
		w, h = 80, 24
	}
	t := os.Getenv("TERM")
	if t == "" {
		t = "xterm-256color"
	}
	if err := s.RequestPty(t, h, w, ssh.TerminalModes{ssh.ECHO: 1}); err != nil {
		return nil, err
	}
	old, err := term.MakeRaw(fd)
	if err != nil {
		return nil, err
	}
	sizes, stop := watchSize(fd)
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		for {
			select {
			case sz := <-sizes:
				_ = s.WindowChange(int(sz.Rows), int(sz.Cols))
			case <-ctx.Done():
				return
			}
		}
	}()
	return func() {
		cancel()
		stop()
		_ = term.Restore(fd, old)
	}, nil
}

// sshAuth is the public-key authentication builtinSSH offers.
func sshAuth(identity string) (ssh.AuthMethod, func(), error) {
	if identity != "" {
		s, err := loadSigner(identity)
		if err != nil {
			return nil, nil, err
		}
		return ssh.PublicKeys(s), func() {}, nil
	}
	if sock := os.Getenv("SSH_AUTH_SOCK"); sock != "" {
		if ac, err := net.Dial("unix", sock); err == nil {
			return ssh.PublicKeysCallback(agent.NewClient(ac).Signers), func() { ac.Close() }, nil
		}
	}
	home, _ := os.UserHomeDir()
	var signers []ssh.Signer
	for _, name := range []string{"id_ed25519", "id_ecdsa", "id_rsa"} {
		if s, err := loadSigner(filepath.Join(home, ".ssh", name)); err == nil {
			signers = append(signers, s)
		}
	}
	if len(signers) == 0 {
		return nil, nil, errors.New("no SSH key to log in with: give one with -i KEYFILE, run ssh-agent, or make one (ssh-keygen -t ed25519) and import its .pub (gpucloud keys import)")
	}
	return ssh.PublicKeys(signers...), func() {}, nil
}

func loadSigner(path string) (ssh.Signer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s, err := ssh.ParsePrivateKey(b)
	var pe *ssh.PassphraseMissingError
	if errors.As(err, &pe) {
		return nil, fmt.Errorf("%s has a passphrase: add it to ssh-agent (ssh-add %s) and try again", path, path)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// hostAddr stands for the instance's address in known_hosts checks: the
// connection is a WebSocket, and the entries name the instance, not an
// address.
type hostAddr string

func (a hostAddr) Network() string { return "tcp" }
func (a hostAddr) String() string  { return string(a) }

// acceptNewHostKey checks a host key against the known_hosts file path as
// OpenSSH's StrictHostKeyChecking accept-new does: a known host must show
// its known key; an unknown one's key is added.
func acceptNewHostKey(path string) ssh.HostKeyCallback {
	return func(hostname string, _ net.Addr, key ssh.PublicKey) error {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return err
		}
		f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		defer f.Close()
		check, err := knownhosts.New(path)
		if err != nil {
			return err
		}
		err = check(hostname, hostAddr(hostname), key)
		var ke *knownhosts.KeyError
		if errors.As(err, &ke) && len(ke.Want) == 0 {
			_, err = fmt.Fprintln(f, knownhosts.Line([]string{knownhosts.Normalize(hostname)}, key))
			return err
		}
		if errors.As(err, &ke) {
			return fmt.Errorf("the host key of %s is not the one %s holds for it (it changed: the instance moved, or something stands in for it); if you expect the change, remove the old one: ssh-keygen -R %s -f %s",
				knownhosts.Normalize(hostname), path, knownhosts.Normalize(hostname), path)
		}
		return err
	}
}
