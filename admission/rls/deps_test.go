package rls

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestImportsNoPipeline: the service Envoy calls on every request links
// neither the pipeline package (and with it the HTTP edge) nor Echo; what
// it shares with the pipeline lives in admission/ratelimit.
func TestImportsNoPipeline(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	for _, never := range []string{"github.com/fairgate/fairgate/admission", "github.com/labstack/echo/v4"} {
		if slices.Contains(deps, never) {
			t.Errorf("admission/rls depends on %s", never)
		}
	}
}
