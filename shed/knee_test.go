package shed

import (
	"math"
	"testing"
	"time"
)

// probeSense is a kneeSense probing level 9 (its knee expired), after
// calls started at levels 9, 10 and 11, six at each, that took ratio times
// their typical latency; alone judges the probe by its level's calls
// alone (without ruleProbeJudgesAbove). It returns the knee then and whether it still
// probes.
func probeSense(ratio float64, alone bool) (knee int, probing bool) {
	k, rules := kneeSense{probing: 9}, allRules
	if alone {
		rules &^= ruleProbeJudgesAbove
	}
	now := time.Unix(1000, 0)
	for level := 9; level <= 11; level++ {
		for range 6 {
			k.record(level, math.Log(ratio), now)
		}
	}
	return k.knee(12, now, rules), k.probing > 0
}

// A probe judges its level together with the levels above it. The limit a
// probe raises is rarely reached (the pools keep seats free as headroom):
// by the time enough calls had started at the probed level alone, the
// limit had climbed past it and the floods had the seats it added. Here
// 18 calls started at or above the probed level, no 16 at any one: they
// waited, and the knee is found where it was; they did not, and the
// upstream has recovered. Negative control: judged by its level alone,
// the probe sees neither.
func TestProbeJudgesTheLevelsAbove(t *testing.T) {
	knee, _ := probeSense(2, false)
	_, probing := probeSense(1, false)
	if knee != 9 || probing {
		t.Errorf("calls that waited: knee %d, want 9; calls that did not: still probing %v, want false", knee, probing)
	}
	knee, _ = probeSense(2, true)
	_, probing = probeSense(1, true)
	t.Logf("judged by its level alone: knee %d, still probing %v", knee, probing)
	if knee == 9 || !probing {
		t.Errorf("judged by its level alone the probe saw the calls (knee %d, probing %v): the test cannot fail", knee, probing)
	}
}
