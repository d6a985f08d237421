package containerd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	goruntime "runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// listenInNetns opens a TCP listener inside the network namespace at
// nsPath, bringing its loopback interface up first and adding addr's
// address to it unless it is a loopback address (see inNetns).
func listenInNetns(nsPath string, addr netip.AddrPort) (net.Listener, error) {
	var ln net.Listener
	err := inNetns(nsPath, addr.Addr(), func() error {
		var err error
		ln, err = net.Listen("tcp", addr.String())
		return err
	})
	return ln, err
}

// inNetns runs f inside the network namespace at nsPath, after bringing
// its loopback interface up and adding addr to it unless it is a
// loopback address. The sockets f makes belong to that namespace, and
// stay there while the agent serves them from its own threads. The work
// is done on a locked OS thread that enters the namespace and returns to
// the agent's; a thread that cannot return is not reused (it stays locked
// and exits with its goroutine).
func inNetns(nsPath string, addr netip.Addr, f func() error) error {
	ch := make(chan error, 1)
	go func() {
		goruntime.LockOSThread()
		err, back := enterNetns(nsPath, addr, f)
		if back {
			goruntime.UnlockOSThread()
		}
		ch <- err
	}()
	return <-ch
}

// enterNetns runs on a locked thread; back reports whether the thread is
// in its original namespace again.
func enterNetns(nsPath string, addr netip.Addr, f func() error) (err error, back bool) {
	self, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return err, true
	}
	defer self.Close()
	target, err := os.Open(nsPath)
	if err != nil {
		return err, true
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("enter the container's network namespace: %w", err), true
	}
	defer func() {
		back = unix.Setns(int(self.Fd()), unix.CLONE_NEWNET) == nil
	}()
	if err := loopbackUp(); err != nil {
		return fmt.Errorf("bring the container's loopback up: %w", err), false
	}
	if !addr.IsLoopback() {
		if err := addLoopbackAddr(addr); err != nil {
			return fmt.Errorf("add %s to the container's loopback: %w", addr, err), false
		}
	}
	return f(), false
}

// addLoopbackAddr adds an IPv4 address (/32, host scope) to lo in the
// current thread's network namespace, through rtnetlink; an address that
// is there already is fine.
func addLoopbackAddr(a netip.Addr) error {
	if !a.Is4() {
		return fmt.Errorf("%s is not IPv4", a)
	}
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		return err
	}
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	ip := a.As4()
	attr := func(typ uint16, data []byte) []byte {
		b := make([]byte, unix.SizeofRtAttr, unix.SizeofRtAttr+4)
		binary.NativeEndian.PutUint16(b[0:], uint16(unix.SizeofRtAttr+len(data)))
		binary.NativeEndian.PutUint16(b[2:], typ)
		return append(b, data...) // 4-byte payloads need no padding
	}
	ifa := make([]byte, unix.SizeofIfAddrmsg)
	ifa[0], ifa[1], ifa[3] = unix.AF_INET, 32, unix.RT_SCOPE_HOST // family, prefix length, scope
	binary.NativeEndian.PutUint32(ifa[4:], uint32(lo.Index))
	body := append(append(ifa, attr(unix.IFA_LOCAL, ip[:])...), attr(unix.IFA_ADDRESS, ip[:])...)
	msg := make([]byte, unix.SizeofNlMsghdr, unix.SizeofNlMsghdr+len(body))
	binary.NativeEndian.PutUint32(msg[0:], uint32(unix.SizeofNlMsghdr+len(body)))
	binary.NativeEndian.PutUint16(msg[4:], unix.RTM_NEWADDR)
	binary.NativeEndian.PutUint16(msg[6:], unix.NLM_F_REQUEST|unix.NLM_F_ACK|unix.NLM_F_CREATE|unix.NLM_F_EXCL)
	binary.NativeEndian.PutUint32(msg[8:], 1) // sequence
	msg = append(msg, body...)
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	buf := make([]byte, 4096)
	for range 16 { // the acknowledgement; bounded
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return err
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return err
		}
		for _, m := range msgs {
			if m.Header.Type != unix.NLMSG_ERROR || m.Header.Seq != 1 || len(m.Data) < 4 {
				continue
			}
			errno := -int32(binary.NativeEndian.Uint32(m.Data[:4]))
			if errno == 0 || syscall.Errno(errno) == unix.EEXIST {
				return nil
			}
			return syscall.Errno(errno)
		}
	}
	return errors.New("no answer from rtnetlink")
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
