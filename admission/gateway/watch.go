package gateway

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
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
	path string // as given: what Load reads and the logs name
	o    WatchOptions
	file *watchedFile
	last [32]byte // hash of the content in force, read when the watch began
}

// WatchConfig starts watching the config file at path for s; Run then
// reloads it when it changes and when o.Reload fires. It watches the file's
// folder rather than the file (and its symlink target's folder, when that
// is elsewhere), so it sees editors that write a new file and rename it
// over the old one, and Kubernetes ConfigMap volumes, which swap a
// "..data" symlink. Of the folders' events it heeds only those that can
// change what path reads (see watchedFile.relevant): a log or a database
// beside the config, written more often than o.Settle, would otherwise keep
// the reload from ever settling, and a debug log there would log its own
// writes without end. A heeded event rereads the file, and it is reloaded
// only when its bytes changed. An invalid file keeps the old config; the
// error, naming the file and field, is logged and passed to OnReload.
//
// The watch is in place when WatchConfig returns.
func (s *Server) WatchConfig(path string, o WatchOptions) (*ConfigWatcher, error) {
	if o.Settle <= 0 {
		o.Settle = 100 * time.Millisecond
	}
	f, err := watchFile(path)
	if err != nil {
		return nil, fmt.Errorf("gateway: watch %s: %w", path, err)
	}
	return &ConfigWatcher{s: s, path: path, o: o, file: f, last: fileHash(path)}, nil
}

// Run reloads until ctx is done, then closes the watch.
func (cw *ConfigWatcher) Run(ctx context.Context) error {
	s, path, o := cw.s, cw.path, cw.o
	last := cw.last
	reload := func(force bool) {
		// A ConfigMap swap or a repointed symlink moves the target: follow
		// it before reading, so the next edit of the new target is heeded.
		if err := cw.file.resolve(); err != nil {
			s.log.Warn("config watcher: the symlink target's folder is not watched; SIGHUP still reloads", "path", path, "err", err.Error())
		}
		sum := fileHash(path)
		s.log.Debug("config reread", "changed", sum != last)
		if !force && sum == last {
			// A chmod, a touch, or the same content written again.
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
	return runWatch(ctx, cw.file.w, o, s.log, cw.file.relevant, reload)
}

// configMapSwap is the base name of the symlink a Kubernetes ConfigMap (or
// Secret, or projected) volume replaces to publish a new version of all
// its files at once: ..data -> ..<timestamp>, each file -> ..data/<file>.
// An update is seen as events on ..data in the volume's folder; nothing in
// a ..<timestamp> folder is written after it is published.
const configMapSwap = "..data"

// watchedFile is the fsnotify watch of one config file: the file's folder,
// and the folder of its symlink target when that is elsewhere. It decides
// which of their events concern the file.
type watchedFile struct {
	w       *fsnotify.Watcher
	abs     string // the file's absolute, clean path (event names are built on it)
	realDir string // its folder with symlinks resolved, to compare targets' folders with

	mu     sync.Mutex // guards the target, moved by resolve while relevant reads it
	target string     // the final target of abs's symlink chain; "" until it first resolves
	extra  string     // the target's folder, watched besides abs's; "" when that is abs's folder
}

// watchFile watches path's folder and resolves its target (see resolve).
func watchFile(path string) (*watchedFile, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	dir := filepath.Dir(abs)
	if err := w.Add(dir); err != nil {
		w.Close()
		return nil, err
	}
	f := &watchedFile{w: w, abs: abs, realDir: dir}
	if r, err := filepath.EvalSymlinks(dir); err == nil {
		f.realDir = r
	}
	if err := f.resolve(); err != nil {
		w.Close()
		return nil, err
	}
	return f, nil
}

// relevant reports whether the event on name can change what the file
// reads: the file itself (written in place, or a file renamed over it), the
// final target of its symlinks, or a ConfigMap swap. Anything else in the
// watched folders (swap files, dotfiles, a log, a database) is not.
func (f *watchedFile) relevant(name string) bool {
	name = filepath.Clean(name)
	if name == f.abs || filepath.Base(name) == configMapSwap {
		return true
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return name == f.target
}

// resolve finds the file's symlink target again, and watches the target's
// folder when it is not the file's: config.yaml -> /srv/conf/fairgate.yaml,
// edited there, is heard. A ConfigMap's target, ..data/config.yaml, is in a
// ..<timestamp> folder that is never written again; what changes is the
// ..data symlink beside it, so its folder is the one above (usually the
// file's own, already watched). When the file does not resolve (missing,
// or a link whose target an editor is replacing), what was watched stays
// watched: the event that ends the gap is then heard.
func (f *watchedFile) resolve() error {
	target, err := filepath.EvalSymlinks(f.abs)
	if err != nil {
		return nil
	}
	extra := filepath.Dir(target)
	if strings.HasPrefix(filepath.Base(extra), "..") {
		extra = filepath.Dir(extra) // a ConfigMap's ..<timestamp> folder
	}
	if extra == f.realDir {
		extra = ""
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.target = target
	if extra == f.extra {
		return nil
	}
	// Both are symlink-free paths, so distinct ones are distinct folders
	// (two paths to one folder would share one inotify watch, and removing
	// one would remove both).
	if extra != "" {
		if err := f.w.Add(extra); err != nil {
			return err
		}
	}
	if f.extra != "" {
		f.w.Remove(f.extra) // fails when the folder is gone, and its watch with it
	}
	f.extra = extra
	return nil
}

// runWatch is the event loop of the config watchers, until ctx is done;
// then it closes w. A signal on o.Reload reloads at once (force true);
// relevant events in the watched folders reload once they have been quiet
// for o.Settle. Reloads never overlap. Events relevant rejects are dropped
// before anything else: they are not logged (a debug log written into a
// watched folder would log its own writes) and do not hold the reload back.
func runWatch(ctx context.Context, w *fsnotify.Watcher, o WatchOptions, log *slog.Logger, relevant func(name string) bool, reload func(force bool)) error {
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
			if !ok {
				return errors.New("gateway: config watcher closed")
			}
			if !relevant(ev.Name) {
				continue
			}
			log.Debug("config folder event", "event", ev.String())
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
