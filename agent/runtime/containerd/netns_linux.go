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
// address to it unless it is a loopback address. A socket belongs to
// the namespace it was made in, so the listener stays there while the
// agent serves it from its own threads. The work is done on a locked OS
// thread that enters the namespace and returns to the agent's; a thread
// that cannot return is not reused (it stays locked and exits with its
// goroutine).
func listenInNetns(nsPath string, addr netip.AddrPort) (net.Listener, error) {
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
func inNetns(nsPath string, addr netip.AddrPort) (ln net.Listener, err error, back bool) {
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
	if !addr.Addr().IsLoopback() {
		if err := addLoopbackAddr(addr.Addr()); err != nil {
			return nil, fmt.Errorf("add %s to the container's loopback: %w", addr.Addr(), err), false
		}
	}
	ln, err = net.Listen("tcp", addr.String())
	return ln, err, false
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
