package network

import (
	"os"
	goruntime "runtime"

	"golang.org/x/sys/unix"
)

// inNS runs f on an OS thread inside the network namespace at path (""
// for the calling thread's own): what f opens under /proc/sys/net is that
// namespace's. A thread that cannot return to its namespace is not
// reused: it stays locked and ends with its goroutine.
func inNS(path string, f func() error) error {
	if path == "" {
		return f()
	}
	ch := make(chan error, 1)
	go func() {
		goruntime.LockOSThread()
		self, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			goruntime.UnlockOSThread()
			ch <- err
			return
		}
		defer self.Close()
		target, err := os.Open(path)
		if err != nil {
			goruntime.UnlockOSThread()
			ch <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			goruntime.UnlockOSThread()
			ch <- err
			return
		}
		err = f()
		if unix.Setns(int(self.Fd()), unix.CLONE_NEWNET) == nil {
			goruntime.UnlockOSThread()
		}
		ch <- err
	}()
	return <-ch
}
