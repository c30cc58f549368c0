package bulkhead

import (
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// manyLightTenants is the bench's many-tenants in small: pools a (4
// seats), b and c (2 each) of a total of 8, each lending and borrowing
// half its seats. In each, a heavy tenant floods 300 ms exports from 1 s
// (a: five seats' worth, b and c: three each) beside light tenants, each
// sending a 5 ms read (a: ten, every 250 ms; b and c: twenty each, every
// 100 ms), and, twice a second, four of them in one pool at once. A pool of two seats keeps at most one as
// headroom for its own light tenants; their bursts need the seats of the
// other pools, which the heavy tenants of all pools must leave free
// between them. control turns off light borrowing ("borrow") or the
// headroom over all pools ("global"); "" is neither.
func manyLightTenants(t *testing.T, control string) (light, heavy flowReport) {
	ps := newPools(t, 8, map[string]PoolConfig{
		"a": {Share: 2, LendablePercent: 50, BorrowingPercent: 50, QueueLength: 50, MaxWait: time.Second},
		"b": {Share: 1, LendablePercent: 50, BorrowingPercent: 50, QueueLength: 50, MaxWait: time.Second},
		"c": {Share: 1, LendablePercent: 50, BorrowingPercent: 50, QueueLength: 50, MaxWait: time.Second},
	}, withoutIf(control == "borrow", ruleLightBorrows), withoutIf(control == "global", ruleGlobalHeadroom))
	const until = 6 * time.Second
	lights := []int{10, 20, 20}
	readsEvery := []time.Duration{250 * time.Millisecond, 100 * time.Millisecond, 100 * time.Millisecond}
	var arrivals []arrival
	for i, p := range []string{"a", "b", "c"} {
		every := []time.Duration{60, 100, 100}[i] * time.Millisecond
		arrivals = append(arrivals, openLoop(p, "heavy-"+p, time.Second, until, every, 300*time.Millisecond)...)
		for k := range lights[i] {
			flow := fmt.Sprintf("light-%s%d", p, k)
			from := time.Duration(7*i+23*k) * time.Millisecond % readsEvery[i]
			arrivals = append(arrivals, openLoop(p, flow, from, until, readsEvery[i], 5*time.Millisecond)...)
		}
		for at := time.Duration(1300+150*i) * time.Millisecond; at < until; at += 500 * time.Millisecond {
			for k := range 4 {
				arrivals = append(arrivals, arrival{at: at, pool: p, flow: fmt.Sprintf("light-%s%d", p, k), service: 5 * time.Millisecond})
			}
		}
	}
	reports, _ := play(t, ps, arrivals)
	for flow, r := range reports {
		sum := &heavy
		if strings.HasPrefix(flow, "light-") {
			sum = &light
		}
		sum.sent += r.sent
		sum.served += r.served
		sum.rejected += r.rejected
		sum.totalWait += r.totalWait
		sum.maxWait = max(sum.maxWait, r.maxWait)
	}
	return light, heavy
}

// The light tenants of small pools find seats at once, in other pools
// too; and the heavy tenants keep the rest busy.
func TestManyLightTenantsFindSeats(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		light, heavy := manyLightTenants(t, "")
		t.Logf("light: %v", light)
		t.Logf("heavy: %v", heavy)
		if !manyLightOK(light) {
			t.Errorf("light: %v; want every read served, none waiting over 5ms", light)
		}
		// The light tenants use 2.2 seats: U + 3√U leaves the heavy
		// ones about one seat of 300 ms requests for 5 s, beside what
		// the light ones do not hold of their headroom.
		if heavy.served < 25 {
			t.Errorf("heavy served %d; want the seats the light tenants leave (≥ 25)", heavy.served)
		}
	})
}

func manyLightOK(r flowReport) bool { return r.completion() == 1 && r.maxWait <= 5*time.Millisecond }

// Negative controls: held to their pools' borrowing limits and to idle
// lenders, or with each pool's headroom alone, the light tenants' bursts
// wait for seats.
func TestManyLightTenantsWaitWithoutEither(t *testing.T) {
	for _, control := range []string{"borrow", "global"} {
		t.Run(control, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				light, _ := manyLightTenants(t, control)
				t.Logf("light without %s: %v", control, light)
				if manyLightOK(light) {
					t.Errorf("light without %s: %v; the test above cannot fail", control, light)
				}
			})
		})
	}
}

// secondReadBorrows is pool a (2 seats, may borrow 1) beside an idle pool
// b (4 seats, lends 2). heavy holds one of a's seats all the time (a 90 ms
// request every 100 ms); ten light tenants read 5 ms every 500 ms. Ten
// times a second from 1 s, light-k reads, light-k+1 reads a microsecond
// later and light-k once more: the first read takes a's free seat, the
// second borrows b's, and light-k's second read — its tenant now has two
// in the pool — must borrow past a's limit as a light tenant's does.
// oneAtOnce is the control: a tenant with another request in the pool is
// not light (and ruleModestBorrows is off, by which a short request of a
// tenant under half a seat borrows past the limit anyway). It returns the
// light tenants' report.
func secondReadBorrows(t *testing.T, oneAtOnce bool) flowReport {
	ps := newPools(t, 6, map[string]PoolConfig{
		"a": {Share: 1, LendablePercent: 50, BorrowingPercent: 50, QueueLength: 20, MaxWait: time.Second},
		"b": {Share: 2, LendablePercent: 50, BorrowingPercent: 50, QueueLength: 20, MaxWait: time.Second},
	}, withoutIf(oneAtOnce, ruleLightInPairs|ruleModestBorrows))
	const until = 3 * time.Second
	arrivals := openLoop("a", "heavy", 0, until, 100*time.Millisecond, 90*time.Millisecond)
	for k := range 10 {
		from := time.Duration(40+47*k) * time.Millisecond // clear of the pairs below
		arrivals = append(arrivals, openLoop("a", fmt.Sprintf("light-%d", k), from, until, 500*time.Millisecond, 5*time.Millisecond)...)
	}
	for i, at := 0, time.Second+5*time.Millisecond; at < until; i, at = i+1, at+100*time.Millisecond {
		x, y := fmt.Sprintf("light-%d", i%10), fmt.Sprintf("light-%d", (i+1)%10)
		arrivals = append(arrivals,
			arrival{at: at, pool: "a", flow: x, service: 5 * time.Millisecond},
			arrival{at: at + time.Microsecond, pool: "a", flow: y, service: 5 * time.Millisecond},
			arrival{at: at + 2*time.Microsecond, pool: "a", flow: x, service: 5 * time.Millisecond})
	}
	reports, _ := play(t, ps, arrivals)
	var light flowReport
	for flow, r := range reports {
		if strings.HasPrefix(flow, "light-") {
			light.sent += r.sent
			light.served += r.served
			light.totalWait += r.totalWait
			light.maxWait = max(light.maxWait, r.maxWait)
		}
	}
	return light
}

// A light tenant's second request at once is still a light tenant's: it
// borrows rather than wait for its first to end.
func TestLightTenantsSecondRequestBorrows(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		light := secondReadBorrows(t, false)
		t.Logf("light: %v", light)
		if light.completion() != 1 || light.maxWait > 0 {
			t.Errorf("light: %v; want every read served at once", light)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		light := secondReadBorrows(t, true)
		t.Logf("light, one at once: %v", light)
		if light.maxWait == 0 {
			t.Errorf("light, one at once: %v; the test above cannot fail", light)
		}
	})
}
