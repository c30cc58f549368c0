package bench

import (
	"fmt"
	"strings"
	"testing"
)

// TestBuiltinTrafficFiles: every built-in scenario is a traffic file that
// parses, and retry-storm's description states the constants its run
// uses.
func TestBuiltinTrafficFiles(t *testing.T) {
	for _, name := range append(ScenarioNames(), "overhead") {
		s, err := Lookup(name, 1)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if s.Name != name || len(s.Tenants) == 0 || s.Description == "" {
			t.Errorf("%s: name %q, %d tenants, description %q", name, s.Name, len(s.Tenants), s.Description)
		}
	}
	s, _ := Lookup(retryStorm, 1)
	for _, want := range []string{fmt.Sprintf("only %d connections", stormDegraded), fmt.Sprintf("beyond %d waiting", stormQueue), fmt.Sprintf("up to %d attempts", stormAttempts)} {
		if !strings.Contains(s.Description, want) {
			t.Errorf("retry-storm's description does not say %q", want)
		}
	}
	m, _ := Lookup("many-tenants", 3)
	if strings.Contains(m.Description, "{noisy}") {
		t.Errorf("many-tenants' description keeps its placeholder: %s", m.Description)
	}
}

// TestTrafficFileErrors: a traffic file's mistakes are refused, each
// naming its field.
func TestTrafficFileErrors(t *testing.T) {
	for _, c := range []struct{ file, want string }{
		{"tenants: []", "tenants: a traffic file needs at least one tenant"},
		{"tenants: [{id: a, rate: 1, timeout: 1s, flows: [{method: GET, path: /, weight: 1}], rte: 2}]", "unknown field rte"},
		{"tenants: [{id: a, rate: 0, timeout: 1s, flows: [{method: GET, path: /, weight: 1}]}]", "tenants[0].rate: requests a second"},
		{"tenants: [{id: a, rate: 1, flows: [{method: GET, path: /, weight: 1}]}]", "tenants[0].timeout: required"},
		{"tenants: [{id: a, rate: 1, timeout: 1s, flows: [{method: GET, path: x, weight: 1}]}]", "tenants[0].flows[0].path: must start with /"},
		{"tenants: [{id: a, rate: 1, timeout: 1s, flows: [{method: GET, path: /, weight: 0}]}]", "tenants[0].flows[0].weight: must be above 0"},
		{"tenants: [{id: a, rate: 1, timeout: 1s, role: loud, flows: [{method: GET, path: /, weight: 1}]}]", `unknown role "loud"`},
		{"tenants: [{id: a, rate: 1, timeout: 1s, flows: [{method: GET, path: /, weight: 1, criticality: urgent}]}]", `unknown criticality "urgent"`},
		{"tenants: [{id: a, count: 3, rate: 1, timeout: 1s, flows: [{method: GET, path: /, weight: 1}]}]", "tenants[0].id: with count, must hold one %d verb"},
		{"tenants: [{id: a, rate: 1, timeout: 1s, flows: [{method: GET, path: /, weight: 1}]}, {id: a, rate: 1, timeout: 1s, flows: [{method: GET, path: /, weight: 1}]}]", `tenants[1].id: tenant "a" already named by tenants[0]`},
		{"tenants: [{id: a, rate: 1, timeout: 1s, ramp: {start: 0.5, peak: 0.2, from: 1, to: 2}, flows: [{method: GET, path: /, weight: 1}]}]", "tenants[0].ramp: needs 0 ≤ start < peak ≤ 1"},
		{"tenants: [{id: a, rate: 1, timeout: 1s, flows: [{method: GET, path: /, weight: 1}]}]\ndraw_noisy: {count: 2}", "draw_noisy.count: must be between 1 and the tenants' number, 1"},
	} {
		_, err := ParseTraffic([]byte(c.file), "t")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s:\n got %v\nwant …%s…", c.file, err, c.want)
		}
	}
}
