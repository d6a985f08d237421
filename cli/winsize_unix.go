//go:build unix

package cli

import (
	"os"
	"os/signal"
	"syscall"

	"github.com/gpucloud/gpucloud/internal/stream"
	"golang.org/x/term"
)

// watchSize sends the terminal fd's size after each SIGWINCH, until stop.
func watchSize(fd int) (<-chan stream.Size, func()) {
	out := make(chan stream.Size, 1)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGWINCH)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-sig:
				if w, h, err := term.GetSize(fd); err == nil {
					select {
					case <-out:
					default:
					}
					out <- stream.Size{Cols: uint16(w), Rows: uint16(h)}
				}
			case <-done:
				return
			}
		}
	}()
	return out, func() { signal.Stop(sig); close(done) }
}
