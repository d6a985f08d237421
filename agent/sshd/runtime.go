package sshd

import (
	"context"
	"log/slog"
	"net"

	"github.com/gpucloud/gpucloud/agent/runtime"
)

// ForRuntime is the Handler of an agent whose workloads run in rt: shells
// and commands through rt's runtime.Execer, forwards through its
// runtime.Dialer (none where rt has none), host keys under keyDir. It
// answers nil when rt cannot exec: the agent then refuses ssh sessions.
func ForRuntime(keyDir string, rt any, log *slog.Logger) *Handler {
	ex, ok := rt.(runtime.Execer)
	if !ok {
		return nil
	}
	h := &Handler{KeyDir: keyDir, Log: log,
		Exec: func(id string) Execer { return runtimeExecer(ex, id) }}
	if d, ok := rt.(runtime.Dialer); ok {
		h.Dial = func(id string) Dialer {
			return func(ctx context.Context, port uint16) (net.Conn, error) { return d.Dial(ctx, id, int(port)) }
		}
	}
	return h
}

// runtimeExecer runs a session's process through the runtime's exec, in
// instance id, with the session's environment (the names the allow-list
// let through) over the workload's. runtime.ExecSpec takes no signals
// (the session's signal requests are refused: Handler leaves
// Config.Signals off).
func runtimeExecer(ex runtime.Execer, id string) Execer {
	return func(ctx context.Context, p Process) (int, error) {
		resize := make(chan runtime.TermSize, 1)
		go func() {
			for {
				select {
				case sz := <-p.Resize:
					select {
					case <-resize:
					default:
					}
					resize <- runtime.TermSize{Cols: sz.Cols, Rows: sz.Rows}
				case <-ctx.Done():
					return
				}
			}
		}()
		return ex.Exec(ctx, id, runtime.ExecSpec{Command: p.Argv, Env: p.Env, TTY: p.TTY,
			Size: runtime.TermSize{Cols: p.Size.Cols, Rows: p.Size.Rows}, Resize: resize,
			Stdin: p.Stdin, Stdout: p.Stdout, Stderr: p.Stderr})
	}
}
