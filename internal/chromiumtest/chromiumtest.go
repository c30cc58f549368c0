// Package chromiumtest starts headless Chromium for the console's browser
// tests, with the flags it needs to run as root in a container, and waits
// on the page's state.
package chromiumtest

import (
	"context"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Path returns the path of a Chromium or Chrome binary (FAIRGATE_CHROMIUM,
// else the first on PATH), or skips the test: .ci/deps.sh installs
// Debian's chromium where it can.
func Path(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("FAIRGATE_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no Chromium found (install Debian's chromium package, as .ci/deps.sh does, or set FAIRGATE_CHROMIUM): the console's browser test cannot run")
	return ""
}

// Start starts headless Chromium for the test, its window width × height,
// ended with the test (at the latest after a minute), and collects the
// page's console errors and uncaught exceptions.
func Start(t *testing.T, width, height int) (ctx context.Context, consoleErrors func() []string) {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(Path(t)),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(width, height),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 60*time.Second)
	t.Cleanup(func() { cancelTimeout(); cancelCtx(); cancelAlloc() })
	var mu sync.Mutex
	var errs []string
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				mu.Lock()
				errs = append(errs, m.String()+" ("+m.URL+")")
				mu.Unlock()
			}
		}
	}()
	return ctx, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), errs...)
	}
}

// WaitFor polls the JavaScript condition cond until it is true, or fails
// the test after timeout, naming what it waited for.
func WaitFor(t *testing.T, ctx context.Context, cond string, timeout time.Duration, what string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](cond))
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s after %v", what, timeout)
		}
		time.Sleep(100 * time.Millisecond) // bounded by deadline: the page polls once a second
	}
}
