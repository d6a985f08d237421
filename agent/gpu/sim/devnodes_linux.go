package sim

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// mknod makes a character device node, 0666, keeping one that is already
// there with the same numbers.
func mknod(path string, major, minor uint32) error {
	if ma, mi, ok := nodeNumbers(path); ok && ma == major && mi == minor {
		return nil
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := unix.Mknod(path, unix.S_IFCHR|0o666, int(unix.Mkdev(major, minor))); err != nil {
		return fmt.Errorf("mknod %s c %d %d: %w", path, major, minor, err)
	}
	// The umask may have narrowed the mode.
	return os.Chmod(path, 0o666)
}

// nodeNumbers returns the major and minor of a character device node.
func nodeNumbers(path string) (major, minor uint32, ok bool) {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR {
		return 0, 0, false
	}
	return unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev)), true
}
