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
	})
	ps.lightLimited = control == "borrow"
	ps.noGlobalHeadroom = control == "global"
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
