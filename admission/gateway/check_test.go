package gateway

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fairgate/fairgate/deploy/examples"
)

// TestFieldNamesFromTags: the names suggested for a misspelt field are the
// yaml tags of the type yaml.v3 names, the inline sections' as the
// document's own; a type that decodes itself from a word has none.
func TestFieldNamesFromTags(t *testing.T) {
	names := fieldNames()
	for typ, want := range map[string][]string{
		"gateway.Config":        {"listen", "tiers", "tenants", "routes", "bulkhead", "redis", "rls"},
		"tenant.TierConfig":     {"max_concurrent", "critical_reserve_percent", "limits"},
		"admission.RouteConfig": {"cost", "criticality", "pool"},
		"bulkhead.PoolConfig":   {"share", "queue_length", "max_wait"},
		"tenant.LimitConfig":    {"per"},
	} {
		for _, w := range want {
			if !slices.Contains(names[typ], w) {
				t.Errorf("fieldNames()[%q] = %q, lacks %q", typ, names[typ], w)
			}
		}
	}
	// Negative controls: the Go names of the inline fields are not the
	// file's, and a word type has no fields.
	if slices.Contains(names["gateway.Config"], "admission") {
		t.Errorf("an inline field's own name is suggested: %q", names["gateway.Config"])
	}
	if _, ok := names["shed.Criticality"]; ok {
		t.Error("shed.Criticality, a word, has field names")
	}
}

// TestCheckStopsWhereTakingOutWouldMislead: a syntax error is all Check
// reports (nothing can be taken out), and a valid file is returned as Load
// returns it.
func TestCheckStopsWhereTakingOutWouldMislead(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte(strings.Replace(string(examples.Demo), "tiers:\n", "tiers:\n  : : [\n", 1)), 0o600)
	_, err := Check(bad, Parse)
	if err == nil || strings.Count(err.Error(), "\n") != 0 || !strings.Contains(err.Error(), "yaml: line") {
		t.Errorf("a syntax error: %v, want it alone", err)
	}
	good := filepath.Join(dir, "good.yaml")
	os.WriteFile(good, examples.Demo, 0o600)
	c, err := Check(good, Parse)
	want, _ := Load(good)
	if err != nil || c.Listen != want.Listen || c.Server.H2C == nil {
		t.Errorf("a valid file: %v, listen %q (want %q), defaults applied: %v", err, c.Listen, want.Listen, c.Server.H2C != nil)
	}
}
