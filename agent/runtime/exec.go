package runtime

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
)

// TermSize is a terminal's size in characters.
type TermSize struct{ Cols, Rows uint16 }

// ExecSpec is a command to run in a running workload's environment
// (Execer): docs/ACCESS.md.
type ExecSpec struct {
	Command []string
	// TTY runs it on a terminal of Size, resized by each value of
	// Resize; its output is all on Stdout (a terminal has one stream).
	TTY    bool
	Size   TermSize
	Resize <-chan TermSize
	// Stdin, when not nil, is the command's input; its end closes the
	// command's input (on a terminal, the bytes go through its line
	// discipline: 0x03 interrupts, 0x04 ends input in canonical mode).
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// Env is set for the command (KEY=VALUE), over the workload's own
	// environment: a name it gives replaces the workload's value.
	Env []string
}

// WithEnv is base with extra's KEY=VALUE entries set: an entry of extra
// replaces base's entry of the same name (in base's place), the others are
// appended in order. Neither slice is changed.
func WithEnv(base, extra []string) []string {
	if len(extra) == 0 {
		return base
	}
	out := make([]string, 0, len(base)+len(extra))
	at := map[string]int{}
	for _, list := range [][]string{base, extra} {
		for _, kv := range list {
			name, _, _ := strings.Cut(kv, "=")
			if i, ok := at[name]; ok {
				out[i] = kv
				continue
			}
			at[name] = len(out)
			out = append(out, kv)
		}
	}
	return out
}

// ErrNotRunning is returned (wrapped) by Exec and Dial for a workload that
// is not running.
var ErrNotRunning = errors.New("workload is not running")

// Execer is implemented by runtimes that run more commands in a running
// workload's environment, as `kubectl exec` does: the container runtime in
// the container's namespaces as its user, the process runtime in its
// working directory with its environment.
type Execer interface {
	// Exec runs p.Command in workload id's environment and returns its
	// exit code (128+n for a signal n) once it exits, with its output
	// copied. When ctx ends first, the command is killed and ctx's error
	// returned. A command that cannot start is an error wrapping
	// ErrInvalid (no such program); an unknown workload ErrNotFound.
	Exec(ctx context.Context, id string, p ExecSpec) (exitCode int, err error)
}

// Dialer is implemented by runtimes that can open a TCP connection to a
// port inside a running workload (a port forward): the container
// runtime from inside the container's network namespace to its address,
// the process runtime to 127.0.0.1.
type Dialer interface {
	Dial(ctx context.Context, id string, port int) (net.Conn, error)
}
