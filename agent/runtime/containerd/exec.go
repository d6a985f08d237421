package containerd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/errdefs"
	"github.com/gpucloud/gpucloud/agent/runtime"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

var (
	_ runtime.Execer = (*Runtime)(nil)
	_ runtime.Dialer = (*Runtime)(nil)
)

// execPrefix starts the exec IDs of the processes Exec starts, so that a
// new runtime finds and kills those an earlier agent left (killExecs).
const execPrefix = "gpcexec-"

// runningTask returns workload id's container and task while it runs.
func (r *Runtime) runningTask(id string) (client.Container, client.Task, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	in := r.insts[id]
	if in == nil {
		return nil, nil, fmt.Errorf("instance %s: %w", id, runtime.ErrNotFound)
	}
	if in.task == nil || in.status.State != runtime.StateRunning {
		return nil, nil, fmt.Errorf("instance %s: %w", id, runtime.ErrNotRunning)
	}
	return in.ctr, in.task, nil
}

// Exec implements runtime.Execer: the command runs as a new process of
// the container's task (runc exec), in all of its namespaces and cgroup,
// with the workload's process spec (its user, environment and working
// directory), no capabilities and no new privileges. It is killed when
// ctx ends first.
func (r *Runtime) Exec(ctx context.Context, id string, p runtime.ExecSpec) (int, error) {
	if len(p.Command) == 0 {
		return 0, fmt.Errorf("exec in %s: no command: %w", id, runtime.ErrInvalid)
	}
	ctr, task, err := r.runningTask(id)
	if err != nil {
		return 0, err
	}
	nctx := r.nsCtx(ctx)
	spec, err := ctr.Spec(nctx)
	if err != nil {
		return 0, fmt.Errorf("exec in %s: read the container's spec: %w", id, err)
	}
	ps := *spec.Process
	ps.Args = p.Command
	ps.Env = runtime.WithEnv(ps.Env, p.Env)
	ps.Terminal = p.TTY
	ps.Capabilities = &specs.LinuxCapabilities{}
	ps.NoNewPrivileges = true
	ps.ConsoleSize = nil
	if p.TTY {
		cols, rows := p.Size.Cols, p.Size.Rows
		if cols == 0 || rows == 0 {
			cols, rows = 80, 24
		}
		ps.ConsoleSize = &specs.Box{Width: uint(cols), Height: uint(rows)}
	}
	// The shim holds the input's FIFO open: its end reaches the command
	// only through CloseIO, once the input's reader has ended.
	var stdin io.Reader
	stdinEOF := make(chan struct{})
	if p.Stdin != nil {
		stdin = &eofReader{r: p.Stdin, eof: stdinEOF}
	}
	opts := []cio.Opt{cio.WithStreams(stdin, p.Stdout, p.Stderr)}
	if p.TTY {
		opts = append(opts, cio.WithTerminal)
	}
	execID := execPrefix + randomHex(8)
	proc, err := task.Exec(nctx, execID, &ps, cio.NewCreator(opts...))
	if err != nil {
		return 0, fmt.Errorf("exec in %s: %w", id, err)
	}
	// Deleted (and killed, when still running) with a context of its own:
	// ctx may be over by then.
	defer func() {
		dctx, cancel := context.WithTimeout(r.nsCtx(context.Background()), 10*time.Second)
		defer cancel()
		_, _ = proc.Delete(dctx, client.WithProcessKill)
	}()
	statusC, err := proc.Wait(r.nsCtx(context.Background()))
	if err != nil {
		return 0, fmt.Errorf("exec in %s: %w", id, err)
	}
	if err := proc.Start(nctx); err != nil {
		// runc could not start it: a missing program, most likely.
		return 0, fmt.Errorf("exec in %s: %v: %w", id, err, runtime.ErrInvalid)
	}
	stopResize := make(chan struct{})
	defer close(stopResize)
	if p.Stdin != nil {
		go func() {
			select {
			case <-stdinEOF:
				_ = proc.CloseIO(r.nsCtx(context.Background()), client.WithStdinCloser)
			case <-stopResize:
			}
		}()
	}
	if p.TTY && p.Resize != nil {
		go func() {
			for {
				select {
				case sz := <-p.Resize:
					_ = proc.Resize(r.nsCtx(context.Background()), uint32(sz.Cols), uint32(sz.Rows))
				case <-stopResize:
					return
				}
			}
		}()
	}
	select {
	case st := <-statusC:
		// Every byte of output is copied before the exit is answered.
		proc.IO().Wait()
		code, _, err := st.Result()
		if err != nil {
			return 0, fmt.Errorf("exec in %s: %w", id, err)
		}
		return int(code), nil
	case <-ctx.Done():
		kctx, cancel := context.WithTimeout(r.nsCtx(context.Background()), 10*time.Second)
		_ = proc.Kill(kctx, syscall.SIGKILL)
		cancel()
		select {
		case <-statusC:
		case <-time.After(10 * time.Second):
		}
		proc.IO().Cancel()
		return 0, ctx.Err()
	}
}

// Dial implements runtime.Dialer: the connection is made from inside the
// container's network namespace to its loopback, so that a server bound
// to localhost only (Jupyter's default) is reached as well as one bound
// to every address, as kubectl port-forward reaches a pod's.
func (r *Runtime) Dial(ctx context.Context, id string, port int) (net.Conn, error) {
	_, task, err := r.runningTask(id)
	if err != nil {
		return nil, err
	}
	ns := "/proc/" + strconv.FormatUint(uint64(task.Pid()), 10) + "/ns/net"
	lo := netip.AddrFrom4([4]byte{127, 0, 0, 1})
	var conn net.Conn
	err = inNetns(ns, lo, func() error {
		var d net.Dialer
		var err error
		conn, err = d.DialContext(ctx, "tcp", netip.AddrPortFrom(lo, uint16(port)).String())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("dial port %d in %s: %w", port, id, err)
	}
	return conn, nil
}

// killExecs kills and deletes the processes an earlier agent's Exec left
// in task: their sessions ended with that agent, whose ends of their
// pipes or terminal are gone.
func (r *Runtime) killExecs(ctx context.Context, task client.Task) {
	procs, err := task.Pids(ctx)
	if err != nil {
		return
	}
	for _, pi := range procs {
		if pi.Info == nil {
			continue
		}
		var d options.ProcessDetails
		if pi.Info.UnmarshalTo(&d) != nil || !strings.HasPrefix(d.GetExecID(), execPrefix) {
			continue
		}
		p, err := task.LoadProcess(ctx, d.GetExecID(), nil)
		if err != nil {
			continue
		}
		if err := p.Kill(ctx, syscall.SIGKILL); err != nil && !errdefs.IsNotFound(err) {
			r.cfg.Log.Warn("containerd runtime: kill an earlier agent's exec", "exec", d.GetExecID(), "err", err)
		}
		if _, err := p.Delete(ctx, client.WithProcessKill); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			r.cfg.Log.Debug("containerd runtime: delete an earlier agent's exec", "exec", d.GetExecID(), "err", err)
		}
	}
}

// eofReader closes eof once r has ended.
type eofReader struct {
	r    io.Reader
	eof  chan struct{}
	once sync.Once
}

func (e *eofReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil {
		e.once.Do(func() { close(e.eof) })
	}
	return n, err
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
