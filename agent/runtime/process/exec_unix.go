//go:build unix

package process

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"syscall"
	"time"

	"github.com/creack/pty"
	"github.com/gpucloud/gpucloud/agent/runtime"
)

// outputGrace is how long an exec waits, after its command exited, for
// the output that children still holding its pipes or terminal write.
const outputGrace = 2 * time.Second

// Exec implements runtime.Execer: the command runs in the workload's
// working directory with its environment, in a process group of its own
// (a session with a controlling terminal under TTY), which is killed when
// ctx ends first.
func (r *Runtime) Exec(ctx context.Context, id string, p runtime.ExecSpec) (int, error) {
	env, workDir, err := r.running(id)
	if err != nil {
		return 0, err
	}
	env = runtime.WithEnv(env, p.Env)
	if len(p.Command) == 0 {
		return 0, fmt.Errorf("exec in %s: no command: %w", id, runtime.ErrInvalid)
	}
	path, err := lookPath(p.Command[0], envValue(env, "PATH"), workDir)
	if err != nil {
		return 0, fmt.Errorf("exec in %s: %w", id, err) // err wraps runtime.ErrInvalid
	}
	cmd := &exec.Cmd{Path: path, Args: p.Command, Env: env, Dir: workDir}
	if p.TTY {
		return execTTY(ctx, cmd, p)
	}
	return execPipes(ctx, cmd, p)
}

func execPipes(ctx context.Context, cmd *exec.Cmd, p runtime.ExecSpec) (int, error) {
	cmd.SysProcAttr = groupAttr()
	cmd.Stdout, cmd.Stderr = p.Stdout, p.Stderr
	// Children that keep the output pipes open do not hold the session
	// past outputGrace.
	cmd.WaitDelay = outputGrace
	var stdin io.WriteCloser
	if p.Stdin != nil {
		var err error
		if stdin, err = cmd.StdinPipe(); err != nil {
			return 0, err
		}
	}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("exec: %v: %w", err, runtime.ErrInvalid)
	}
	if stdin != nil {
		// Not waited for: a client that sends nothing more must not hold
		// the exit (exec.Cmd would wait for a copy it starts itself).
		go func() {
			_, _ = io.Copy(stdin, p.Stdin)
			stdin.Close()
		}()
	}
	return wait(ctx, cmd, nil)
}

func execTTY(ctx context.Context, cmd *exec.Cmd, p runtime.ExecSpec) (int, error) {
	size := &pty.Winsize{Cols: p.Size.Cols, Rows: p.Size.Rows}
	if size.Cols == 0 || size.Rows == 0 {
		size.Cols, size.Rows = 80, 24
	}
	ptmx, err := pty.StartWithAttrs(cmd, size, &syscall.SysProcAttr{Setsid: true, Setctty: true})
	if err != nil {
		return 0, fmt.Errorf("exec: %v: %w", err, runtime.ErrInvalid)
	}
	defer ptmx.Close()
	out := make(chan struct{})
	go func() {
		// Ends with EIO once every holder of the terminal is gone.
		_, _ = io.Copy(p.Stdout, ptmx)
		close(out)
	}()
	if p.Stdin != nil {
		go func() { _, _ = io.Copy(ptmx, p.Stdin) }()
	}
	stopResize := make(chan struct{})
	defer close(stopResize)
	go func() {
		for {
			select {
			case sz, ok := <-p.Resize:
				if !ok {
					return
				}
				_ = pty.Setsize(ptmx, &pty.Winsize{Cols: sz.Cols, Rows: sz.Rows})
			case <-stopResize:
				return
			}
		}
	}()
	return wait(ctx, cmd, out)
}

// wait waits for cmd, killing its group when ctx ends first, and then for
// out (the terminal's output copied) at most outputGrace.
func wait(ctx context.Context, cmd *exec.Cmd, out <-chan struct{}) (int, error) {
	pid := cmd.Process.Pid
	stop := context.AfterFunc(ctx, func() { killGroup(pid) })
	defer stop()
	err := cmd.Wait()
	if out != nil {
		select {
		case <-out:
		case <-time.After(outputGrace):
		}
	}
	if ctx.Err() != nil {
		return 0, ctx.Err()
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) && !errors.Is(err, exec.ErrWaitDelay) {
		return 0, err
	}
	code, _ := exitStatus(cmd.ProcessState)
	return code, nil
}
