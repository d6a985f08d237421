package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/cli/cmdutil"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/internal/filexfer"
	"github.com/gpucloud/gpucloud/internal/progress"
)

// newCopyCommand is `volumes cp` (kind "volumes", IDs with prefix "v-")
// and `instances cp` (kind "instances", "i-"): files and directories
// between this machine and a volume or a running instance, through the
// server's relay to the agent of the host that holds it.
func newCopyCommand(s *session, k resourceKind) *cobra.Command {
	kind, prefix, what := k.plural, k.prefix, k.noun
	var noResume bool
	var checksum string
	var direct bool
	var parallel int
	example := fmt.Sprintf("  gpucloud %[1]s cp ./dataset %[2]s0123456789abcdef:/data/\n"+
		"  gpucloud %[1]s cp %[2]s0123456789abcdef:/checkpoints/step-1000.pt .\n"+
		"  # Start over rather than resume what an interrupted copy left\n"+
		"  gpucloud %[1]s cp --no-resume big.tar %[2]s0123456789abcdef:/big.tar\n"+
		"  # Straight to the host's agent, where the operator allows it\n"+
		"  gpucloud %[1]s cp --direct ./dataset %[2]s0123456789abcdef:/data/", kind, prefix)
	cmd := &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy files and directories to or from a " + what,
		Long: "Copy a file or a directory (recursively) between this machine and a " + what + ".\n" +
			"One side is ID:/path (" + prefix + "...:/path) or NAME:/path, the other a local path\n" +
			"(as with scp, write a local path with a colon before any slash as ./a:b). As with cp -r,\n" +
			"a copy into an existing directory (or a path ending in /) lands inside it.\n\n" +
			"The data streams over TLS 1.3 through the server to the agent of the host that\n" +
			"holds the " + what + "; no port on the host is opened. A copy that is interrupted\n" +
			"resumes when run again (from what the partial file holds; files already there\n" +
			"with the same checksum are skipped); --no-resume starts every file over. Each\n" +
			"file's checksum is compared at the end: a mismatch is an error. The checksum is\n" +
			"CRC-32C, as gcloud storage and S3 check objects (TLS already authenticates every\n" +
			"byte on the way); --checksum sha256 compares SHA-256 instead, which one core\n" +
			"computes at about 1.7 GB/s against CRC-32C's 20.\n\n" +
			"With --direct the data goes straight to the host's agent instead, over one TLS 1.3\n" +
			"connection that a short-lived grant from the server opens, where the operator lets\n" +
			"tenants reach the agents (server --direct-access, agent --direct-listen); where it\n" +
			"cannot, the copy says why and goes through the server.\n\n" +
			"A directory's files go over up to --parallel sessions at once (4 by default),\n" +
			"each file whole on one: a tree of many small files waits on round trips, not bytes.\n\n" +
			"On a terminal a progress line shows bytes, rate and time left; a summary line\n" +
			"follows on stderr in any case.",
		Example: example,
		Args:    exactArgs(2, "a source and a destination"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, remote, local, upload, err := parseCopyArgs(args, prefix, what)
			if err != nil {
				return cmdutil.Usagef(cmd, "%v", err)
			}
			if err := filexfer.CheckChecksum(checksum); err != nil {
				return cmdutil.Usagef(cmd, "--checksum is %s or %s, not %q", agentapi.ChecksumCRC32C, agentapi.ChecksumSHA256, checksum)
			}
			c, err := s.connect(cmd)
			if err != nil {
				return err
			}
			ctx, cancel := interruptible(cmd)
			defer cancel()
			if id, err = c.resolve(ctx, k, id); err != nil {
				return err
			}
			if parallel < 1 || parallel > maxCopyParallel {
				return cmdutil.Usagef(cmd, "--parallel %d: want 1 to %d", parallel, maxCopyParallel)
			}
			stderr := cmd.ErrOrStderr()
			sessions, conn, err := openCopy(ctx, c.Client, kind, id, direct, stderr)
			if err != nil {
				return err
			}
			defer conn.Close()
			p := newByteProgress(stderr)
			opt := filexfer.Options{NoResume: noResume, Checksum: checksum, Total: p.setTotal, Add: p.add,
				Skip:     func(name, why string) { p.note(fmt.Sprintf("skipped %s: %s", name, why)) },
				Parallel: parallel, Open: func() (*filexfer.Client, func(), error) {
					conn, err := sessions.open(ctx)
					if err != nil {
						return nil, nil, err
					}
					return filexfer.NewClient(conn), func() { conn.Close() }, nil
				}}
			fc := filexfer.NewClient(conn)
			var st filexfer.Stats
			if upload {
				st, err = filexfer.Upload(fc, local, remote, opt)
			} else {
				st, err = filexfer.Download(fc, remote, local, opt)
			}
			p.stop()
			if err != nil {
				if ctx.Err() != nil || !errors.Is(err, filexfer.ErrChecksum) && isCut(err) {
					return fmt.Errorf("%w (the copy was interrupted: run the same command again to resume)", err)
				}
				return err
			}
			fmt.Fprintln(stderr, copySummary(st, p.elapsed()))
			return nil
		},
	}
	cmd.Flags().BoolVar(&noResume, "no-resume", false, "start every file over: resume no partial file and skip no file already there")
	cmd.Flags().StringVar(&checksum, "checksum", filexfer.DefaultChecksum, "how files are compared: crc32c or sha256")
	cmd.Flags().BoolVar(&direct, "direct", false, "copy straight to the host's agent with a grant from the server, where the operator allows it (else through the server)")
	cmd.Flags().IntVar(&parallel, "parallel", defaultCopyParallel, fmt.Sprintf("copy a directory's files over up to this many sessions at once, each file whole on one (1 to %d; each is one of your sessions)", maxCopyParallel))
	return cmd
}

// How many sessions a copy of a tree uses at most: many small files go
// about twice as fast over four (docs/BENCHMARKS.md, "Many small files"),
// and each relayed one counts against the user's session limit.
const (
	defaultCopyParallel = 4
	maxCopyParallel     = 16
)

// copySessions opens more files sessions of one copy, the way its first
// was opened: with its direct grant, or through the relay.
type copySessions struct {
	c        *client.Client
	kind, id string
	grant    *client.DirectGrant
}

func (s *copySessions) open(ctx context.Context) (net.Conn, error) {
	if s.grant != nil {
		return s.c.OpenDirect(ctx, s.grant)
	}
	return s.c.OpenFiles(ctx, s.kind, s.id)
}

// openCopy opens the copy's files session: with direct, straight to the
// agent with a grant, falling back to the server's relay (saying why on
// stderr) when there is none to be had or the agent cannot be reached;
// else through the relay.
func openCopy(ctx context.Context, c *client.Client, kind, id string, direct bool, stderr io.Writer) (*copySessions, net.Conn, error) {
	s := &copySessions{c: c, kind: kind, id: id}
	if direct {
		g, err := c.FilesGrant(ctx, kind, id)
		if err == nil {
			var conn net.Conn
			if conn, err = c.OpenDirect(ctx, g); err == nil {
				s.grant = g
				return s, conn, nil
			}
		}
		if cloud.IsNotFound(err) || ctx.Err() != nil {
			return nil, nil, err
		}
		fmt.Fprintf(stderr, "no direct copy (%v); copying through the server\n", err)
	}
	conn, err := s.open(ctx)
	return s, conn, err
}

// isCut reports whether err is the session's connection failing (rather
// than a file's error, which the agent answered).
func isCut(err error) bool {
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, filexfer.ErrFrame) ||
		strings.Contains(err.Error(), "closed") || strings.Contains(err.Error(), "reset")
}

// parseCopyArgs finds the remote side of a copy: the argument of the form
// ID:/path (the ID has prefix) or NAME:/path, a colon before any slash as
// scp has it (a single letter before it is a Windows drive, local); the
// other is local.
func parseCopyArgs(args []string, prefix, what string) (id, remote, local string, upload bool, err error) {
	side := func(a string) (string, string, bool) {
		i := strings.IndexByte(a, ':')
		if i < 2 || strings.HasPrefix(a, prefix) && i <= len(prefix) || strings.ContainsAny(a[:i], "/\\") {
			return "", "", false
		}
		p := a[i+1:]
		if p == "" {
			p = "/"
		}
		return a[:i], p, true
	}
	srcID, srcPath, srcRemote := side(args[0])
	dstID, dstPath, dstRemote := side(args[1])
	switch {
	case srcRemote && dstRemote:
		return "", "", "", false, fmt.Errorf("copy between this machine and a %s: one side must be a local path", what)
	case !srcRemote && !dstRemote:
		return "", "", "", false, fmt.Errorf("one side must be a %s path, %sID:/path or NAME:/path", what, prefix)
	case dstRemote:
		if args[0] == "" {
			return "", "", "", false, errors.New("empty local path")
		}
		return dstID, dstPath, args[0], true, nil
	}
	if args[1] == "" {
		return "", "", "", false, errors.New("empty local path")
	}
	return srcID, srcPath, args[1], false, nil
}

// copySummary is the line a copy ends with.
func copySummary(st filexfer.Stats, d time.Duration) string {
	moved := st.Bytes
	rate := ""
	if d > 0 && moved > 0 {
		rate = ", " + progress.Bytes(int64(float64(moved)/d.Seconds())) + "/s"
	}
	s := fmt.Sprintf("copied %s (%s) in %s%s", plural(st.Files, "file", "files"), progress.Bytes(moved), d.Round(time.Millisecond), rate)
	if st.Resumed > 0 {
		s += fmt.Sprintf("; resumed %s from partial files", progress.Bytes(st.Resumed))
	}
	sum := checksumName(st.Checksum)
	if st.Skipped > 0 {
		s += fmt.Sprintf("; %s already there (same %s) skipped", plural(st.Skipped, "file", "files"), sum)
	}
	if st.Checksum == "" {
		return s
	}
	return s + "; " + sum + " verified"
}

// checksumName is how a copy's summary names its checksum.
func checksumName(algo string) string {
	switch algo {
	case agentapi.ChecksumCRC32C:
		return "CRC-32C"
	case agentapi.ChecksumSHA256:
		return "SHA-256"
	}
	return algo
}

// byteProgress draws a copy's progress line on a terminal: bytes, rate
// and time left, at most every redraw interval; elsewhere it draws
// nothing.
type byteProgress struct {
	w     io.Writer
	width int
	tty   bool
	start time.Time

	mu    sync.Mutex
	total int64
	done  int64
	last  time.Time
	drawn bool
}

func newByteProgress(w io.Writer) *byteProgress {
	width, tty := terminalWidth(w)
	return &byteProgress{w: w, width: width, tty: tty, start: time.Now()}
}

const redrawProgress = 200 * time.Millisecond

func (p *byteProgress) setTotal(n int64) {
	p.mu.Lock()
	p.total = n
	p.mu.Unlock()
}

func (p *byteProgress) add(n int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done += n
	if !p.tty {
		return
	}
	if now := time.Now(); now.Sub(p.last) >= redrawProgress {
		p.last = now
		p.draw(now)
	}
}

// note prints a line above the progress line.
func (p *byteProgress) note(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drawn {
		fmt.Fprint(p.w, "\r\033[K")
		p.drawn = false
	}
	fmt.Fprintln(p.w, s)
}

func (p *byteProgress) draw(now time.Time) {
	el := now.Sub(p.start).Seconds()
	line := fmt.Sprintf("%s / %s", progress.Bytes(p.done), progress.Bytes(p.total))
	if p.total > 0 {
		line += fmt.Sprintf("  %3d%%", p.done*100/p.total)
	}
	if el > 0.5 && p.done > 0 {
		rate := float64(p.done) / el
		line += "  " + progress.Bytes(int64(rate)) + "/s"
		if left := p.total - p.done; left > 0 && rate > 0 {
			line += "  ETA " + time.Duration(float64(left)/rate*float64(time.Second)).Round(time.Second).String()
		}
	}
	if p.width > 0 && len(line) > p.width {
		line = line[:p.width]
	}
	fmt.Fprint(p.w, "\r\033[K"+line)
	p.drawn = true
}

// stop clears the progress line.
func (p *byteProgress) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drawn {
		fmt.Fprint(p.w, "\r\033[K")
		p.drawn = false
	}
}

func (p *byteProgress) elapsed() time.Duration { return time.Since(p.start) }
