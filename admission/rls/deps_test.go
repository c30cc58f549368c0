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
// admission/echoadapter). The stores and identities link no net/http. The
// fairgate binary links no plotting or progress-bar library: the bench's
// plots are drawn by the bench/plots command. A rule ending in "/..."
// matches every package under that path, as in go list.
func TestImportRules(t *testing.T) {
	for pkg, never := range map[string][]string{
		".":                  {"github.com/fairgate/fairgate/admission", "github.com/labstack/echo/v4"},
		"..":                 {"github.com/labstack/echo/v4"},
		"../ratelimit":       {"net/http"},
		"../redisstore":      {"net/http"},
		"../../tenant":       {"net/http"},
		"../../cmd/fairgate": {"gonum.org/...", "github.com/schollz/progressbar/..."},
	} {
		out, err := exec.Command("go", "list", "-deps", pkg).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", pkg, err)
		}
		deps := strings.Fields(string(out))
		for _, n := range never {
			if i := slices.IndexFunc(deps, func(d string) bool { return matches(n, d) }); i >= 0 {
				t.Errorf("%s depends on %s", pkg, deps[i])
			}
		}
	}
}

// matches says whether package path pkg is rule: the path itself, or,
// for a rule ending in "/...", any package at or under its prefix.
func matches(rule, pkg string) bool {
	prefix, tree := strings.CutSuffix(rule, "/...")
	if !tree {
		return pkg == rule
	}
	return pkg == prefix || strings.HasPrefix(pkg, prefix+"/")
}
