package admission

import (
	"testing"
	"time"

	"github.com/fairgate/fairgate/internal/fakeclock"
)

// TestReloadDoesNotRefill (issue 12): a reload that lowered a rate brought a
// just-emptied bucket back full, because the embedded store forgot it at
// the instant it would have been full under the old rate.
func TestReloadDoesNotRefill(t *testing.T) {
	clk := fakeclock.New()
	g, err := New(testConfig(), testRegistry(t), Options{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	for range 25 { // initech's whole burst of 25 at 5 tokens/s
		mustCheck(t, g, req("start-key", "GET", "/api/v1/users/me"))
	}
	slower := testRegistryStarterRate(t, 0.5)
	if err := g.Reload(testConfig(), slower); err != nil {
		t.Fatal(err)
	}
	clk.Advance(6 * time.Second) // past the old full instant (5 s), a sweep due
	d := mustCheck(t, g, req("start-key", "GET", "/api/v1/users/me"))
	if got, want := d.Quotas[0].Remaining, 2.0; !d.Allowed || got != want {
		t.Fatalf("after the reload: allowed %v, %v tokens left; want true, %v (3 refilled at 0.5/s, 1 taken)", d.Allowed, got, want)
	}
}
