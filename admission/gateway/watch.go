package gateway

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
)

// WatchOptions configures WatchConfig. The zero value is a good default.
type WatchOptions struct {
	// Reload is a channel on which a signal means "reload now" (SIGHUP).
	// Nil means file events only.
	Reload <-chan os.Signal
	// Settle is how long the folder must be quiet after an event before
	// the file is read, so that an editor's several writes are read once.
	// Zero means 100ms.
	Settle time.Duration
	// OnReload, when set, is told the outcome of every reload attempt: nil
	// when the new config is in force, else the error (the old config
	// stays). For metrics.
	OnReload func(err error)
}

// ConfigWatcher reloads a server's config file; see WatchConfig.
type ConfigWatcher struct {
	s    *Server
	path string
	o    WatchOptions
	w    *fsnotify.Watcher
	last [32]byte // hash of the content in force, read when the watch began
}

// WatchConfig starts watching the config file at path for s; Run then
// reloads it when it changes and when o.Reload fires. It watches the file's
// folder rather than the file, so it sees editors that write a new file and
// rename it over the old one, and Kubernetes ConfigMap volumes, which swap a
// "..data" symlink. Whatever the event (swap files, dotfiles, a chmod), the
// file is read again and reloaded only when its bytes changed, so noise in
// the folder costs a read and nothing else. An invalid file keeps the old
// config; the error, naming the file and field, is logged and passed to
// OnReload.
//
// The watch is in place when WatchConfig returns.
func (s *Server) WatchConfig(path string, o WatchOptions) (*ConfigWatcher, error) {
	if o.Settle <= 0 {
		o.Settle = 100 * time.Millisecond
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("gateway: watch %s: %w", path, err)
	}
	if err := w.Add(filepath.Dir(path)); err != nil {
		w.Close()
		return nil, fmt.Errorf("gateway: watch %s: %w", path, err)
	}
	return &ConfigWatcher{s: s, path: path, o: o, w: w, last: fileHash(path)}, nil
}

// Run reloads until ctx is done, then closes the watch.
func (cw *ConfigWatcher) Run(ctx context.Context) error {
	s, path, o := cw.s, cw.path, cw.o
	last := cw.last
	reload := func(force bool) {
		sum := fileHash(path)
		s.log.Debug("config reread", "changed", sum != last)
		if !force && sum == last {
			// Noise in the folder (swap files, dotfiles, chmod) or the
			// same content written again.
			return
		}
		cfg, err := Load(path)
		if err == nil {
			err = s.Reload(ctx, cfg)
		}
		last = sum // a bad file is reported once, not on every later event
		if err != nil {
			s.log.Error("config reload failed; keeping the old config", "path", path, "err", err.Error())
		} else {
			s.log.Info("config reloaded", "path", path)
		}
		if o.OnReload != nil {
			o.OnReload(err)
		}
	}
	return runWatch(ctx, cw.w, o, s.log, reload)
}

// runWatch is the event loop of the config watchers, until ctx is done;
// then it closes w. A signal on o.Reload reloads at once (force true);
// events in the watched folders reload once they have been quiet for
// o.Settle. Reloads never overlap.
func runWatch(ctx context.Context, w *fsnotify.Watcher, o WatchOptions, log *slog.Logger, reload func(force bool)) error {
	defer w.Close()
	var mu sync.Mutex // serializes reloads from the timer and the signal
	do := func(force bool) {
		mu.Lock()
		defer mu.Unlock()
		reload(force)
	}
	settle := time.AfterFunc(time.Hour, func() { do(false) })
	settle.Stop()
	defer settle.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-o.Reload:
			do(true)
		case ev, ok := <-w.Events:
			log.Debug("config folder event", "event", ev.String())
			if !ok {
				return errors.New("gateway: config watcher closed")
			}
			settle.Reset(o.Settle)
		case err, ok := <-w.Errors:
			if !ok {
				return errors.New("gateway: config watcher closed")
			}
			log.Warn("config watcher", "err", err.Error())
		}
	}
}

// fileHash returns the SHA-256 of the file at path (following symlinks),
// or zero when it cannot be read.
func fileHash(path string) [32]byte {
	b, err := os.ReadFile(path)
	if err != nil {
		return [32]byte{}
	}
	return sha256.Sum256(b)
}
