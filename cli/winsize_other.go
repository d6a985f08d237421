//go:build !unix

package cli

import "github.com/gpucloud/gpucloud/internal/stream"

// watchSize has no SIGWINCH to watch here: the size stays as it started.
func watchSize(fd int) (<-chan stream.Size, func()) { return nil, func() {} }
