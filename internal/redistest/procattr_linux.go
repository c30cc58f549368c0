package redistest

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel kill the server when the test process
// dies without running its cleanups (a crash, a SIGPIPE from `| head`), so
// no orphan keeps its port.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
