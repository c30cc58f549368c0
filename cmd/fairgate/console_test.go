package main

import (
	"bytes"
	"context"
	"encoding/json"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fairgate/fairgate/internal/chromiumtest"
)

// freeAddr returns a loopback address with a port free right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startDemo runs `fairgate demo` on free ports and returns the gateway's
// and the admin listener's base URLs once the admin listener is ready.
func startDemo(t *testing.T) (gw, admin string) {
	t.Helper()
	listen, adminAddr, up := freeAddr(t), freeAddr(t), freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- demo(ctx, []string{"--listen", listen, "--admin-listen", adminAddr, "--upstream-listen", up}, io.Discard, io.Discard)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("demo: %v", err)
		}
	})
	gw, admin = "http://"+listen, "http://"+adminAddr
	deadline := time.Now().Add(10 * time.Second)
	for {
		if resp, err := http.Get(admin + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return gw, admin
			}
		}
		select {
		case err := <-done:
			t.Fatalf("demo ended before it was ready: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("demo's admin listener not ready after 10s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// flood sends n requests to path with key, c at a time, and returns how
// many the rate layer rejected.
func flood(t *testing.T, gw, path, key string, n, c int) int {
	t.Helper()
	var byRate atomic.Int64
	var wg sync.WaitGroup
	next := make(chan struct{})
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range next {
				req, _ := http.NewRequest("GET", gw+path, nil)
				req.Header.Set("Authorization", "Bearer "+key)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					continue
				}
				var body struct{ Layer string }
				json.NewDecoder(resp.Body).Decode(&body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusTooManyRequests && body.Layer == "rate" {
					byRate.Add(1)
				}
			}
		}()
	}
	for range n {
		next <- struct{}{}
	}
	close(next)
	wg.Wait()
	return int(byRate.Load())
}

// TestConsoleInChromium loads the console of `fairgate demo` in headless
// Chromium: no console errors, the three demo tenants, a flood's
// rejections listed though it came before the page opened, the starter's
// rate rejections on the page within 3 s of a flood from its key, the span tree
// of one of them, and a screenshot. FAIRGATE_CONSOLE_SCREENSHOT=path also
// writes the screenshot there (docs/console.png is made this way).
func TestConsoleInChromium(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a browser")
	}
	ctx, consoleErrors := chromiumtest.Start(t, 1280, 1000)
	gw, admin := startDemo(t)

	// A flood before anyone opened the console: its rejections are listed
	// when the page opens (after an alert, that is when it opens).
	if early := flood(t, gw, "/api/v1/search", "demo-starter-key", 40, 4); early == 0 {
		t.Fatal("the starter's first flood got no 429")
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(admin+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#tenants tr[data-tenant="initech"]`))); err != nil {
		t.Fatalf("console did not show initech: %v", err)
	}
	chromiumtest.WaitFor(t, ctx, `document.querySelectorAll('#rejections tbody tr[data-layer="rate"]').length > 0`, 3*time.Second,
		"the rejections of the flood sent before the page opened")
	ids, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](
		`[...document.querySelectorAll("#tenants tbody tr")].map(r => r.dataset.tenant).sort()`))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(ids, ","); got != "acme,globex,initech" {
		t.Fatalf("tenants on the page: %s, want acme,globex,initech", got)
	}
	const rateCount = `Number(document.querySelector('#tenants tr[data-tenant="initech"] [data-layer="rate"]').dataset.count)`
	before, err := chromedp.Run(ctx, chromedp.Evaluate[int](rateCount))
	if err != nil {
		t.Fatal(err)
	}

	// Some traffic from the other tenants, then the starter's flood.
	flood(t, gw, "/api/v1/users/me", "demo-enterprise-key", 20, 4)
	flood(t, gw, "/api/v1/search", "demo-pro-key", 10, 2)
	rejected := flood(t, gw, "/api/v1/search", "demo-starter-key", 60, 6)
	flooded := time.Now()
	if rejected == 0 {
		t.Fatal("the starter's flood got no 429 from the rate layer")
	}
	var shown int
	for {
		if shown, err = chromedp.Run(ctx, chromedp.Evaluate[int](rateCount)); err != nil {
			t.Fatal(err)
		}
		if shown-before >= rejected {
			break
		}
		if time.Since(flooded) > 3*time.Second {
			t.Fatalf("3 s after the flood the page shows %d rate rejections of initech (was %d), want +%d", shown, before, rejected)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("page shows initech's %d rate rejections %v after the flood", shown, time.Since(flooded).Round(time.Millisecond))
	if top, err := chromedp.Run(ctx, chromedp.Evaluate[bool](
		`document.querySelector('#tenants tr[data-tenant="initech"] [data-layer="rate"]').classList.contains("top")`)); err != nil || !top {
		t.Errorf("initech's rate rejections do not stand out (class top): %v, %v", top, err)
	}
	first, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("#tenants tbody tr").dataset.tenant`))
	if err != nil || first != "initech" {
		t.Errorf("first tenant sorted by rejections = %q, %v; want initech", first, err)
	}

	// The latest rejection's span tree, the rate layer's span said no.
	// (Clicked from JavaScript: the row may be below the ten shown.)
	if err := chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](
		`document.querySelector('#rejections tbody tr[data-layer="rate"] button').click()`)); err != nil {
		t.Fatalf("click a rate rejection's request ID: %v", err)
	}
	chromiumtest.WaitFor(t, ctx, `document.querySelector('#trace .span.no[data-span="admission.rate"]') !== null`, 3*time.Second,
		"the span tree with admission.rate marked as the span that said no")

	// The search box filters.
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.ID("search"), "acme")); err != nil {
		t.Fatal(err)
	}
	if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#tenants tbody tr").length`)); err != nil || n != 1 {
		t.Errorf("rows after searching acme: %d, %v; want 1", n, err)
	}
	if err := chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](
		`(s => { s.value = ""; s.dispatchEvent(new Event("input")); })(document.getElementById("search"))`)); err != nil {
		t.Fatal(err)
	}

	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "console.png")
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(shot, []byte("\x89PNG\r\n\x1a\n")) {
		t.Errorf("screenshot is not a PNG: % x", shot[:min(8, len(shot))])
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() < 20_000 {
		t.Errorf("screenshot %s: %v bytes, %v; want a real page (≥ 20 kB)", path, fi.Size(), err)
	}
	if out := os.Getenv("FAIRGATE_CONSOLE_SCREENSHOT"); out != "" {
		if err := os.WriteFile(out, smallPNG(t, shot), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if errs := consoleErrors(); len(errs) > 0 {
		t.Errorf("console errors:\n%s", strings.Join(errs, "\n"))
	}
}

// smallPNG re-encodes a screenshot with a palette of its 256 most common
// colours (a page of flat colours and text needs no more), for a PNG small
// enough to commit.
func smallPNG(t *testing.T, raw []byte) []byte {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	b := img.Bounds()
	counts := map[color.RGBA]int{}
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			counts[color.RGBAModel.Convert(img.At(x, y)).(color.RGBA)]++
		}
	}
	colours := slices.SortedFunc(maps.Keys(counts), func(a, b color.RGBA) int { return counts[b] - counts[a] })
	p := image.NewPaletted(b, color.Palette{})
	for _, c := range colours[:min(256, len(colours))] {
		p.Palette = append(p.Palette, c)
	}
	draw.Draw(p, b, img, b.Min, draw.Src)
	var buf bytes.Buffer
	if err := (&png.Encoder{CompressionLevel: png.BestCompression}).Encode(&buf, p); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
