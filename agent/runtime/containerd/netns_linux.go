package containerd

import (
	"errors"
	"fmt"
	"net"
	"os"
	goruntime "runtime"

	"golang.org/x/sys/unix"
)

// listenInNetns opens a TCP listener inside the network namespace at
// nsPath, bringing its loopback interface up first. A socket belongs to
// the namespace it was made in, so the listener stays there while the
// agent serves it from its own threads. The work is done on a locked OS
// thread that enters the namespace and returns to the agent's; a thread
// that cannot return is not reused (it stays locked and exits with its
// goroutine).
func listenInNetns(nsPath, addr string) (net.Listener, error) {
	type result struct {
		ln  net.Listener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		goruntime.LockOSThread()
		ln, err, back := inNetns(nsPath, addr)
		if back {
			goruntime.UnlockOSThread()
		}
		ch <- result{ln, err}
	}()
	res := <-ch
	return res.ln, res.err
}

// inNetns runs on a locked thread; back reports whether the thread is in
// its original namespace again.
func inNetns(nsPath, addr string) (ln net.Listener, err error, back bool) {
	self, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return nil, err, true
	}
	defer self.Close()
	target, err := os.Open(nsPath)
	if err != nil {
		return nil, err, true
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		return nil, fmt.Errorf("enter the container's network namespace: %w", err), true
	}
	defer func() {
		back = unix.Setns(int(self.Fd()), unix.CLONE_NEWNET) == nil
	}()
	if err := loopbackUp(); err != nil {
		return nil, fmt.Errorf("bring the container's loopback up: %w", err), false
	}
	ln, err = net.Listen("tcp", addr)
	return ln, err, false
}

// loopbackUp sets the IFF_UP flag of lo in the current thread's network
// namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	flags := ifr.Uint16()
	if flags&unix.IFF_UP != 0 {
		return nil
	}
	ifr.SetUint16(flags | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return errors.Join(errors.New("SIOCSIFFLAGS"), err)
	}
	return nil
}
