package bulkhead

import (
	"testing"
	"testing/synctest"
	"time"
)

// lateLight plays, in a pool of 4 seats and no queue, a loud tenant's
// 50 ms requests every 5 ms (2.5 times the seats) from 5 ms, and a quiet
// tenant's one every 200 ms from 202 ms (between the loud ones), when the
// loud one already holds every seat. It returns the quiet tenant's refused
// requests.
func lateLight(t *testing.T, opts ...Option) (refused int) {
	synctest.Test(t, func(t *testing.T) {
		ps := newPools(t, 4, map[string]PoolConfig{"p": {Share: 1}}, opts...)
		cs := constantCalls("p", "loud", 5*time.Millisecond, 20*time.Second, 5*time.Millisecond, 0, call{cost: 2, class: 1, service: 50 * time.Millisecond})
		cs = append(cs, constantCalls("p", "quiet", 202*time.Millisecond, 20*time.Second, 200*time.Millisecond, 0, call{cost: 2, class: 1, service: 50 * time.Millisecond})...)
		_, ref := latencies(t, ps, cs)
		refused = ref["quiet"]
	})
	return refused
}

// A light tenant that comes after a flood has taken every seat of a pool
// without a queue (the adaptive limit shared by tenant without pools) is
// refused once, and its refused request is demand: the headroom forms for
// it and none of its later requests is refused (ruleRefusedCount), in each
// of five runs. Negative control: counted as no use until one of its
// requests ends, it is refused until a flood's seat happens to be free as
// it comes (1 to 14 times in a run, once only in about one run in five):
// more than five times in five runs.
func TestRefusedLightTenantGetsHeadroom(t *testing.T) {
	without5 := 0
	for range 5 {
		if n := lateLight(t); n > 1 {
			t.Errorf("quiet tenant refused %d times; want at most its first request", n)
		}
		without5 += lateLight(t, without(ruleRefusedCount))
	}
	if without5 <= 5 {
		t.Errorf("without counting refused requests the quiet tenant was refused %d times in five runs: the check above cannot fail", without5)
	}
}
