package rls

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestImportRules: the "never" rules of docs/architecture.md. The service
// Envoy calls on every request links neither the pipeline package (and
// with it the HTTP edge) nor Echo: what it shares with the pipeline lives
// in admission/ratelimit. The pipeline links no Echo (its adapter is
// admission/echoadapter). The stores and identities link no net/http.
func TestImportRules(t *testing.T) {
	for pkg, never := range map[string][]string{
		".":             {"github.com/fairgate/fairgate/admission", "github.com/labstack/echo/v4"},
		"..":            {"github.com/labstack/echo/v4"},
		"../ratelimit":  {"net/http"},
		"../redisstore": {"net/http"},
		"../../tenant":  {"net/http"},
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
