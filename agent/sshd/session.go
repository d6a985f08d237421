package sshd

import (
	"context"
	"errors"
	"io"
	"strings"

	"golang.org/x/crypto/ssh"
)

// The payloads of the session requests served (RFC 4254, section 6).
type (
	ptyReq struct {
		Term                      string
		Cols, Rows, Width, Height uint32
		Modes                     string
	}
	windowChange struct {
		Cols, Rows, Width, Height uint32
	}
	envReq struct {
		Name, Value string
	}
	execReq struct {
		Command string
	}
	subsystemReq struct {
		Name string
	}
	signalReq struct {
		Signal string
	}
	exitStatus struct {
		Status uint32
	}
)

// Limits on what a client may send with a session.
const (
	maxEnv      = 64
	maxEnvValue = 4096
	// maxCommand bounds an exec request's command (ARG_MAX-ish for one
	// argument, far above what scp and rsync send).
	maxCommand = 128 << 10
)

// envAllowed says whether the client may set variable name: the locale
// and the terminal type, as OpenSSH's default AcceptEnv (LANG LC_*) plus
// TERM, which a pty-req sets anyway. Anything else (LD_PRELOAD, PATH)
// stays as the image has it.
func envAllowed(name string) bool {
	return name == "LANG" || name == "TERM" || strings.HasPrefix(name, "LC_")
}

// sftpScript runs the image's sftp-server where it has one (where OpenSSH
// packages put it), so that sftp and OpenSSH 9's scp work; without one it
// says what works instead.
const sftpScript = `for s in /usr/lib/openssh/sftp-server /usr/libexec/openssh/sftp-server /usr/libexec/sftp-server /usr/lib/ssh/sftp-server /usr/lib/sftp-server; do [ -x "$s" ] && exec "$s"; done; ` +
	`echo "gpucloud: this image has no sftp-server; use scp -O (the legacy protocol, needs scp in the image) or rsync" >&2; exit 127`

// session serves one session channel: the requests that set it up, then
// one process, then its exit status.
func (s *server) session(ctx context.Context, nch ssh.NewChannel) {
	ch, reqs, err := nch.Accept()
	if err != nil {
		return
	}
	defer ch.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	resize := make(chan WindowSize, 1)
	signals := make(chan string, 8)
	p := Process{Resize: resize, Signals: signals, Stdin: ch, Stdout: ch, Stderr: ch.Stderr()}
	var done chan int
	for {
		select {
		case req, ok := <-reqs:
			if !ok {
				// The client closed the channel: end the process.
				cancel()
				if done != nil {
					<-done
				}
				return
			}
			argv, ok := s.request(req, &p, resize, signals, done != nil)
			if argv == nil || !ok {
				if req.WantReply {
					_ = req.Reply(ok, nil)
				}
				continue
			}
			p.Argv = argv
			if p.TTY {
				// As OpenSSH's sshd: the client's EOF does not hang up a
				// terminal (ssh -tt < /dev/null sends one at once).
				p.Stdin = &holdEOF{r: ch, done: ctx.Done()}
			}
			if req.WantReply {
				_ = req.Reply(true, nil)
			}
			done = make(chan int, 1)
			go func(p Process) {
				code, err := s.cfg.Exec(ctx, p)
				if err != nil {
					_, _ = p.Stderr.Write([]byte("gpucloud: " + err.Error() + "\r\n"))
					code = 127
				}
				done <- code
			}(p)
			s.cfg.Log.Info("ssh session", "argv", argv, "tty", p.TTY)
		case code := <-done:
			_, _ = ch.SendRequest("exit-status", false, ssh.Marshal(exitStatus{Status: uint32(code)}))
			_ = ch.CloseWrite()
			return
		}
	}
}

// request handles one session request on p: ok is the reply; argv is set
// when the request starts the process (shell, exec, subsystem), which a
// session does once.
func (s *server) request(req *ssh.Request, p *Process, resize chan WindowSize, signals chan string, started bool) (argv []string, ok bool) {
	switch req.Type {
	case "pty-req":
		var r ptyReq
		if started || ssh.Unmarshal(req.Payload, &r) != nil {
			return nil, false
		}
		p.TTY, p.Size = true, size(r.Cols, r.Rows)
		if r.Term != "" && len(r.Term) < 256 {
			p.Env = setEnv(p.Env, "TERM", r.Term)
		}
		return nil, true
	case "window-change":
		var r windowChange
		if ssh.Unmarshal(req.Payload, &r) != nil {
			return nil, false
		}
		sz := size(r.Cols, r.Rows)
		if !started {
			p.Size = sz
			return nil, true
		}
		// Only the latest size matters: replace a pending one.
		select {
		case resize <- sz:
		default:
			select {
			case <-resize:
			default:
			}
			resize <- sz
		}
		return nil, true
	case "env":
		var r envReq
		if started || ssh.Unmarshal(req.Payload, &r) != nil || !envAllowed(r.Name) ||
			len(r.Value) > maxEnvValue || len(p.Env) >= maxEnv || strings.ContainsRune(r.Value, 0) {
			return nil, false
		}
		p.Env = setEnv(p.Env, r.Name, r.Value)
		return nil, true
	case "signal":
		var r signalReq
		if !started || !s.cfg.Signals || ssh.Unmarshal(req.Payload, &r) != nil {
			return nil, false
		}
		select {
		case signals <- r.Signal:
			return nil, true
		default:
			return nil, false
		}
	case "shell":
		if started {
			return nil, false
		}
		return s.cfg.Shell, true
	case "exec":
		var r execReq
		if started || ssh.Unmarshal(req.Payload, &r) != nil || len(r.Command) > maxCommand || strings.ContainsRune(r.Command, 0) {
			return nil, false
		}
		return append(append([]string(nil), s.cfg.ShellC...), r.Command), true
	case "subsystem":
		var r subsystemReq
		if started || ssh.Unmarshal(req.Payload, &r) != nil || r.Name != "sftp" {
			return nil, false
		}
		return append(append([]string(nil), s.cfg.ShellC...), sftpScript), true
	}
	// x11-req, auth-agent-req@openssh.com, break, and the rest.
	return nil, false
}

// size clamps a client's window size to a terminal's.
func size(cols, rows uint32) WindowSize {
	return WindowSize{Cols: uint16(min(cols, 0xffff)), Rows: uint16(min(rows, 0xffff))}
}

// setEnv sets name=value in env, replacing an earlier value.
func setEnv(env []string, name, value string) []string {
	for i, kv := range env {
		if strings.HasPrefix(kv, name+"=") {
			env[i] = name + "=" + value
			return env
		}
	}
	return append(env, name+"="+value)
}

// holdEOF reads r and, at its end, waits for done before it says so.
type holdEOF struct {
	r    io.Reader
	done <-chan struct{}
}

func (h *holdEOF) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	if errors.Is(err, io.EOF) {
		if n > 0 {
			return n, nil
		}
		<-h.done
	}
	return n, err
}
