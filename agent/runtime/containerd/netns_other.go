//go:build !linux

package containerd

import (
	"errors"
	"net"
	"net/netip"
)

// listenInNetns needs Linux's network namespaces.
func listenInNetns(string, netip.AddrPort) (net.Listener, error) {
	return nil, errors.New("network namespaces need Linux")
}

// inNetns needs Linux's network namespaces.
func inNetns(string, netip.Addr, func() error) error {
	return errors.New("network namespaces need Linux")
}
