//go:build !unix

package process

import (
	"os"
	"syscall"
)

// The process runtime needs process groups and signals. On other systems it
// compiles, so that the one gpucloud binary builds everywhere, and refuses
// to start workloads.
const supported = false

func groupAttr() *syscall.SysProcAttr { return nil }
func termGroup(int)                   {}
func killGroup(int)                   {}

func exitStatus(ps *os.ProcessState) (int, string) { return ps.ExitCode(), "" }
