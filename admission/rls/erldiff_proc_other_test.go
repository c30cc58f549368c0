//go:build !linux

package rls_test

import "os/exec"

// erlProcAttr does nothing outside Linux: there the test's cleanups alone
// stop ERL.
func erlProcAttr(*exec.Cmd) {}
