package rls

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestImportsNoPipeline: the service Envoy calls on every request links
// neither the pipeline package (and with it the HTTP edge) nor Echo; what
// it shares with the pipeline lives in admission/ratelimit. (The pipeline
// itself links no Echo either: its adapter is admission/echoadapter.)
func TestImportsNoPipeline(t *testing.T) {
	for pkg, never := range map[string][]string{
		".":  {"github.com/fairgate/fairgate/admission", "github.com/labstack/echo/v4"},
		"..": {"github.com/labstack/echo/v4"},
	} {
		out, err := exec.Command("go", "list", "-deps", pkg).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", pkg, err)
		}
		deps := strings.Fields(string(out))
		for _, n := range never {
			if slices.Contains(deps, n) {
				t.Errorf("%s depends on %s", pkg, n)
			}
		}
	}
}
