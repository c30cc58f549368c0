// Package errprefix names where an error of many lines comes from (a
// config file, a rule file) on each of its lines, keeping the error
// itself: errors.Is and errors.As still reach it.
package errprefix

import "strings"

// Lines returns err with "prefix: " before each line of its message. It
// unwraps to err. A nil err is nil.
func Lines(prefix string, err error) error {
	if err == nil {
		return nil
	}
	lines := strings.Split(err.Error(), "\n")
	for i, l := range lines {
		lines[i] = prefix + ": " + l
	}
	return &prefixed{msg: strings.Join(lines, "\n"), err: err}
}

type prefixed struct {
	msg string
	err error
}

func (e *prefixed) Error() string { return e.msg }
func (e *prefixed) Unwrap() error { return e.err }
