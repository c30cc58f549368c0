package gateway

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fairgate/fairgate/admission"
	"github.com/fairgate/fairgate/internal/chromiumtest"
)

// TestConsoleSparklinesInChromium: with no sample yet the history cells
// say so; the traffic of a tenant before the page opened is drawn as its
// sparkline once sampled (admitted as the line, rejections as bars); and a
// full ring of 90 samples still fits the cell. The test stops the server's
// own sampling and steps it, so nothing waits 10 s.
func TestConsoleSparklinesInChromium(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a browser")
	}
	ctx, consoleErrors := chromiumtest.Start(t, 1400, 1000)
	base, _, srv := startGateway(t, nil, Options{})
	srv.history.close()
	admin := httptest.NewServer(srv.AdminHandler())
	defer admin.Close()
	const initech = `#tenants tr[data-tenant="initech"] td.hist`
	open := func() {
		t.Helper()
		if err := chromedp.Do(ctx, chromedp.Navigate(admin.URL+"/"),
			chromedp.WaitVisible(chromedp.CSS(`#tenants tr[data-tenant="initech"]`)),
			chromedp.WaitVisible(chromedp.CSS(`#pools tr[data-pool]`))); err != nil {
			t.Fatalf("console did not show initech and the pools: %v", err)
		}
	}

	open()
	chromiumtest.WaitFor(t, ctx, `document.querySelector('`+initech+` .spark-empty') !== null &&
		document.querySelector('`+initech+`').textContent.includes("collecting")`, 3*time.Second,
		"note that the history is still collecting")

	for range 10 { // the starter's burst is 25 tokens, a search costs 5
		do(t, "GET", base+"/api/v1/search", "demo-starter-key", nil)
	}
	// A sample at the start of the next second, as the ticker would take
	// one: the seconds of the traffic are then whole.
	srv.history.h.Sample(time.Now().Truncate(time.Second).Add(time.Second))

	open()
	chromiumtest.WaitFor(t, ctx, `(s => s !== null && s.dataset.samples === "1" && Number(s.dataset.bars) > 0 && Number(s.dataset.line) > 0)(
		document.querySelector('`+initech+` svg.spark'))`, 3*time.Second,
		"sparkline of initech's admitted and rejected requests")
	bars, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('`+initech+` svg.spark rect.bar').length`))
	if err != nil || bars == 0 {
		t.Errorf("initech's sparkline has %d bars (%v), want its rejections drawn", bars, err)
	}
	if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#pools td.hist svg.spark').length`)); err != nil || n != 3 {
		t.Errorf("%d pool sparklines (%v), want 3", n, err)
	}

	next := time.Now().Add(time.Second)
	for range admission.HistorySamples + 5 {
		next = next.Add(admission.HistoryResolution)
		srv.history.h.Sample(next)
	}
	open()
	chromiumtest.WaitFor(t, ctx, `(s => s !== null && s.dataset.samples === "90")(document.querySelector('`+initech+` svg.spark'))`,
		3*time.Second, "sparkline of a full ring")
	width, err := chromedp.Run(ctx, chromedp.Evaluate[float64](`document.querySelector('`+initech+` svg.spark').getBoundingClientRect().width`))
	if err != nil || width > 200 {
		t.Errorf("a full ring's sparkline is %v px wide (%v), want it to fit its cell", width, err)
	}
	if errs := consoleErrors(); len(errs) > 0 {
		t.Errorf("console errors:\n%s", strings.Join(errs, "\n"))
	}
}
