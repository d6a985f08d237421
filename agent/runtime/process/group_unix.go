//go:build unix

package process

import (
	"os"
	"strconv"
	"syscall"
)

const supported = true

// groupAttr puts the workload in a new process group led by itself, so that
// one signal to the group reaches every process it starts.
func groupAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// termGroup and killGroup signal the whole group. ESRCH (the group is gone)
// is the outcome they want, so errors are ignored.
func termGroup(pgid int) { _ = syscall.Kill(-pgid, syscall.SIGTERM) }
func killGroup(pgid int) { _ = syscall.Kill(-pgid, syscall.SIGKILL) }

// exitStatus turns a wait status into an exit code and a signal name; a
// signalled process reports 128 plus the signal number, as shells do.
func exitStatus(ps *os.ProcessState) (int, string) {
	ws, ok := ps.Sys().(syscall.WaitStatus)
	if !ok {
		return ps.ExitCode(), ""
	}
	if ws.Signaled() {
		return 128 + int(ws.Signal()), signalName(ws.Signal())
	}
	return ws.ExitStatus(), ""
}

var signalNames = map[syscall.Signal]string{
	syscall.SIGHUP: "SIGHUP", syscall.SIGINT: "SIGINT", syscall.SIGQUIT: "SIGQUIT",
	syscall.SIGILL: "SIGILL", syscall.SIGTRAP: "SIGTRAP", syscall.SIGABRT: "SIGABRT",
	syscall.SIGBUS: "SIGBUS", syscall.SIGFPE: "SIGFPE", syscall.SIGKILL: "SIGKILL",
	syscall.SIGUSR1: "SIGUSR1", syscall.SIGSEGV: "SIGSEGV", syscall.SIGUSR2: "SIGUSR2",
	syscall.SIGPIPE: "SIGPIPE", syscall.SIGALRM: "SIGALRM", syscall.SIGTERM: "SIGTERM",
	syscall.SIGXCPU: "SIGXCPU", syscall.SIGXFSZ: "SIGXFSZ",
}

// signalName gives the conventional name ("SIGKILL"); syscall's String
// gives a description ("killed"), which is not what operators search for.
func signalName(s syscall.Signal) string {
	if n, ok := signalNames[s]; ok {
		return n
	}
	return "SIG" + strconv.Itoa(int(s))
}
