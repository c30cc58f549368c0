package deploy_test

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"
)

// prometheusTool returns the path of name, a program of Debian's
// `prometheus` package (.ci/deps.sh installs it). Without it the test
// skips, unless FAIRGATE_REQUIRE_PROMETHEUS is set (make test sets it).
func prometheusTool(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("FAIRGATE_REQUIRE_PROMETHEUS") != "" {
			t.Fatalf("%s not found (Debian: apt-get install prometheus)", name)
		}
		t.Skipf("%s not found", name)
	}
	return path
}

// TestAlertRulesUnit runs Prometheus's own checks on the alert rules:
// `promtool check rules` (they load) and `promtool test rules` on
// prometheus/alerts_test.yaml, where every rule has a case that fires it
// and one beside it that must not.
func TestAlertRulesUnit(t *testing.T) {
	promtool := prometheusTool(t, "promtool")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, args := range [][]string{{"check", "rules", "alerts.yaml"}, {"test", "rules", "alerts_test.yaml"}} {
		cmd := exec.CommandContext(ctx, promtool, args...)
		cmd.Dir = "prometheus"
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %v: %v\n%s", args, err, out)
			continue
		}
		t.Logf("promtool %v:\n%s", args, out)
	}
}
