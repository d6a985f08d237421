//go:build !linux

package containerd

import (
	"errors"
	"net"
)

// listenInNetns needs Linux's network namespaces.
func listenInNetns(string, string) (net.Listener, error) {
	return nil, errors.New("network namespaces need Linux")
}
