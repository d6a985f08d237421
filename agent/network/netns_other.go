//go:build !linux

package network

import "errors"

// inNS needs Linux's network namespaces.
func inNS(path string, f func() error) error {
	if path == "" {
		return f()
	}
	return errors.New("network namespaces need Linux")
}
