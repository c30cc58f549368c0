// Package tlsreload keeps what is made of some files (a certificate and
// its key, a bundle of CAs) current: the files are looked at at most once
// a second, when the value is asked for (on a TLS handshake), and made
// again when one of them changed, so a renewed certificate is in force
// without a restart and without a dropped connection. A change that does
// not load (a half-written file, a key that does not match) is logged,
// and the old value stays.
package tlsreload

import (
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// Files is the value made of some files. Safe for concurrent use.
type Files[T any] struct {
	paths, fields []string // a path "" is no file; fields name them in errors
	what          string   // what the value is, in the log
	build         func(data [][]byte) (T, error)
	log           *slog.Logger
	now           func() time.Time

	mu      sync.Mutex
	current T         // guarded by mu: what is handed out
	stamps  []stamp   // guarded by mu: the files current was made of
	checked time.Time // guarded by mu: when the files were last looked at
}

// stamp is what says a file changed: its modification time and size.
type stamp struct {
	mod  time.Time
	size int64
}

// Load reads the files at paths (a path "" is none: its data is nil) and
// makes their value with build, now: a file that cannot be read fails,
// its error led by its field, as does build's. what names the value in
// the log ("TLS certificate").
func Load[T any](paths, fields []string, what string, build func(data [][]byte) (T, error), log *slog.Logger, now func() time.Time) (*Files[T], error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	f := &Files[T]{paths: paths, fields: fields, what: what, build: build, log: log, now: now}
	if err := f.load(); err != nil {
		return nil, err
	}
	return f, nil
}

// load reads the files and makes the value of them.
func (f *Files[T]) load() error {
	data := make([][]byte, len(f.paths))
	st := make([]stamp, len(f.paths))
	for i, p := range f.paths {
		if p == "" {
			continue
		}
		fi, err := os.Stat(p)
		if err == nil {
			st[i] = stamp{fi.ModTime(), fi.Size()}
			data[i], err = os.ReadFile(p)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", f.fields[i], err)
		}
	}
	v, err := f.build(data)
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.current, f.stamps, f.checked = v, st, f.now()
	f.mu.Unlock()
	return nil
}

// Get returns the value, made again first when a file changed since it
// was made (looked at at most once a second).
func (f *Files[T]) Get() T {
	f.mu.Lock()
	now := f.now()
	if now.Sub(f.checked) < time.Second {
		v := f.current
		f.mu.Unlock()
		return v
	}
	f.checked = now
	old := f.stamps
	f.mu.Unlock()
	changed := false
	seen := make([]stamp, len(f.paths))
	for i, p := range f.paths {
		if p == "" {
			continue
		}
		if fi, err := os.Stat(p); err == nil {
			seen[i] = stamp{fi.ModTime(), fi.Size()}
			changed = changed || seen[i] != old[i]
		} else {
			seen[i] = old[i]
		}
	}
	if changed {
		if err := f.load(); err != nil {
			// Tried once: the same files again are not (nor logged
			// every second); the next change to them is.
			f.mu.Lock()
			f.stamps = seen
			f.mu.Unlock()
			f.log.Warn(f.what+" changed but did not load; the old one stays", "err", err.Error())
		} else {
			f.log.Info(f.what+" reloaded", "file", f.paths[0])
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.current
}
