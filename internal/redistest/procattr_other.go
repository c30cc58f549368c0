//go:build !linux

package redistest

import "os/exec"

// dieWithParent does nothing outside Linux: there the cleanups alone stop
// the servers.
func dieWithParent(*exec.Cmd) {}
