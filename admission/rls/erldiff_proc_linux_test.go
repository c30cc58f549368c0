package rls_test

import (
	"os/exec"
	"syscall"
)

// erlProcAttr makes the kernel kill ERL when the test process dies
// without running its cleanups, so that no orphan keeps its ports.
func erlProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
