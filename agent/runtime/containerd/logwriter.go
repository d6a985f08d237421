package containerd

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/containerd/v2/pkg/cio"

	"github.com/gpucloud/gpucloud/agent/runtime"
)

// The workload's log, capped. The shim copies the container's stdout and
// stderr; given a file it appends to it without end. Given a binary
// (containerd's binary log driver: cio.BinaryIO), it starts that program
// with the two streams as file descriptors 3 and 4 and waits for it to
// say it is ready on descriptor 5. The runtime names its own executable,
// with the argument logWriterArg: any binary that links this package
// (gpucloud, and the tests' binaries) runs as the log writer then, from
// init, before its main, writing the streams to a runtime.RotatingLog
// (Config.LogSize × Config.LogFiles at most on disk). The writer is the
// shim's child, not the agent's: a restarted agent loses no output, as
// with the file.

// logWriterArg is the first argument of the log writer's command line;
// the second is its configuration, "SIZE:FILES:PATH".
const logWriterArg = "gpucloud-log-writer"

func init() {
	if len(os.Args) == 3 && os.Args[1] == logWriterArg {
		os.Exit(runLogWriter(os.Args[2]))
	}
}

// logIO is how a new task's output reaches its log: the log writer, or
// the file itself when the log is not capped (LogSize negative).
func (r *Runtime) logIO(path string) (cio.Creator, error) {
	if r.cfg.LogSize < 0 {
		return cio.LogFile(path), nil
	}
	exe := r.cfg.LogWriter
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("the log writer: %w", err)
		}
	}
	conf := strconv.FormatInt(r.cfg.LogSize, 10) + ":" + strconv.Itoa(r.cfg.LogFiles) + ":" + path
	// cio.BinaryIO cleans the path; the query keeps the argument whole.
	u := &url.URL{Scheme: "binary", Path: filepath.Clean(exe), RawQuery: url.Values{logWriterArg: {conf}}.Encode()}
	return cio.LogURI(u), nil
}

// runLogWriter is the log writer's main: it copies descriptors 3 and 4
// into the rotating log conf names until both end, and returns the exit
// code. Output it cannot write (the host's disk full) is dropped, so that
// the workload never blocks on its stdout.
func runLogWriter(conf string) int {
	size, files, path, err := parseLogConf(conf)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpucloud log writer:", err)
		return 2
	}
	ready := os.NewFile(5, "ready")
	l, err := runtime.OpenRotatingLog(path, size, files)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpucloud log writer:", err)
		return 1
	}
	defer l.Close()
	// The shim stops a writer with SIGTERM only when it gives up on the
	// task; the streams' ends are what ends it otherwise.
	signal.Ignore(syscall.SIGTERM, syscall.SIGPIPE, syscall.SIGHUP)
	// One byte, then close: the shim reads the byte as "ready".
	if ready != nil {
		_, _ = ready.Write([]byte{0})
		_ = ready.Close()
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, fd := range []uintptr{3, 4} {
		f := os.NewFile(fd, "stream")
		if f == nil {
			continue
		}
		wg.Go(func() { copyLog(f, l, &mu) })
	}
	wg.Wait()
	return 0
}

// copyLog copies one stream into the log, whole reads at a time under mu.
func copyLog(f *os.File, l *runtime.RotatingLog, mu *sync.Mutex) {
	defer f.Close()
	buf := make([]byte, 32<<10)
	failing := time.Time{}
	for {
		n, err := f.Read(buf)
		if n > 0 {
			mu.Lock()
			_, werr := l.Write(buf[:n])
			mu.Unlock()
			if werr != nil && time.Since(failing) > time.Minute {
				failing = time.Now()
				fmt.Fprintln(os.Stderr, "gpucloud log writer: output dropped:", werr)
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrClosed) {
				fmt.Fprintln(os.Stderr, "gpucloud log writer:", err)
			}
			return
		}
	}
}

// parseLogConf reads "SIZE:FILES:PATH".
func parseLogConf(conf string) (size int64, files int, path string, err error) {
	parts := strings.SplitN(conf, ":", 3)
	if len(parts) == 3 {
		size, err = strconv.ParseInt(parts[0], 10, 64)
		if err == nil {
			files, err = strconv.Atoi(parts[1])
		}
		path = parts[2]
	}
	if len(parts) != 3 || err != nil || !filepath.IsAbs(path) {
		return 0, 0, "", fmt.Errorf("configuration %q: want SIZE:FILES:/PATH", conf)
	}
	return size, files, path, nil
}
