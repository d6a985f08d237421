//go:build !linux

package sim

import "errors"

func mknod(string, uint32, uint32) error {
	return errors.New("fake device nodes need Linux")
}

func nodeNumbers(string) (uint32, uint32, bool) { return 0, 0, false }
