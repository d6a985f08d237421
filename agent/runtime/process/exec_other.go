//go:build !unix

package process

import (
	"context"
	"errors"

	"github.com/gpucloud/gpucloud/agent/runtime"
)

// Exec implements runtime.Execer where it cannot: the process runtime
// needs a Unix host.
func (r *Runtime) Exec(ctx context.Context, id string, p runtime.ExecSpec) (int, error) {
	return 0, errors.ErrUnsupported
}
