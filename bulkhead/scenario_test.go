package bulkhead

// Fairness simulations in the manner of Kubernetes' queueset tests: each
// scenario plays open-loop traffic against Pools on synctest's fake clock,
// states the share each tenant should get, and checks it within a margin.
// Each claim has a negative control, the same scenario without the
// mechanism (FIFO instead of fair queuing, one shared pool instead of
// bulkheads, no borrowing), which must fail the same check.

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// arrival is one request of a scenario.
type arrival struct {
	at         time.Duration // from the scenario's start
	pool, flow string
	service    time.Duration // how long it holds its seat
}

// openLoop returns arrivals every interval in [from, until), whatever
// happened to the earlier ones, as a flood or a steady client does.
func openLoop(pool, flow string, from, until, every, service time.Duration) []arrival {
	var out []arrival
	for at := from; at < until; at += every {
		out = append(out, arrival{at: at, pool: pool, flow: flow, service: service})
	}
	return out
}

// flowReport sums up one flow's requests.
type flowReport struct {
	sent, served, rejected int
	totalWait, maxWait     time.Duration
}

func (r flowReport) completion() float64 { return float64(r.served) / float64(r.sent) }

func (r flowReport) meanWait() time.Duration {
	if r.served == 0 {
		return 0
	}
	return r.totalWait / time.Duration(r.served)
}

func (r flowReport) String() string {
	return fmt.Sprintf("served %d/%d (%.1f%%), rejected %d, wait mean %v max %v",
		r.served, r.sent, 100*r.completion(), r.rejected, r.meanWait(), r.maxWait)
}

// sample is the pools' gauges at one instant.
type sample struct {
	at    time.Duration
	pools map[string]PoolStats
}

// play runs arrivals against ps and returns a report per flow and the
// gauges sampled every 10ms. It must run in a synctest bubble. It checks
// that every gauge is back to zero at the end.
func play(t *testing.T, ps *Pools, arrivals []arrival) (map[string]flowReport, []sample) {
	t.Helper()
	start := time.Now()
	var (
		mu      sync.Mutex
		reports = map[string]flowReport{}
		wg      sync.WaitGroup
	)
	end := time.Duration(0)
	for _, a := range arrivals {
		end = max(end, a.at)
		wg.Go(func() {
			time.Sleep(a.at)
			seat, err := ps.Acquire(context.Background(), a.pool, Request{Tenant: a.flow, Cost: 1})
			mu.Lock()
			r := reports[a.flow]
			r.sent++
			if err == nil {
				r.served++
				r.totalWait += seat.Waited()
				r.maxWait = max(r.maxWait, seat.Waited())
			} else {
				r.rejected++
			}
			reports[a.flow] = r
			mu.Unlock()
			if err == nil {
				time.Sleep(a.service)
				seat.Release()
			}
		})
	}
	var samples []sample
	wg.Go(func() {
		for time.Since(start) < end {
			time.Sleep(10*time.Millisecond + time.Millisecond/3) // off the arrivals' grid
			s := sample{at: time.Since(start), pools: map[string]PoolStats{}}
			for _, name := range ps.Names() {
				s.pools[name], _ = ps.Stats(name)
			}
			samples = append(samples, s)
		}
	})
	wg.Wait()
	checkDrained(t, ps)
	return reports, samples
}

// meanOf averages f over the samples taken in [from, until).
func meanOf(samples []sample, from, until time.Duration, f func(sample) int) float64 {
	sum, n := 0, 0
	for _, s := range samples {
		if s.at >= from && s.at < until {
			sum += f(s)
			n++
		}
	}
	return float64(sum) / float64(n)
}

// heavyVsLight: one pool of 4 seats (40 requests/s of 100ms). heavy floods
// at 200/s, five times capacity; light sends 5/s, a demand of half a seat,
// below its fair share of 2 seats, so it should get all of it: ≥ 99%.
// heavy should get the seats beyond light's headroom.
func heavyVsLight(t *testing.T, fifo bool) (light, heavy flowReport) {
	ps := onePool(t, 4, PoolConfig{Share: 1, QueueLength: 20, MaxWait: 500 * time.Millisecond}, withoutIf(fifo, ruleFairQueue))
	arrivals := append(
		openLoop("p", "heavy", 0, 10*time.Second, 5*time.Millisecond, 100*time.Millisecond),
		openLoop("p", "light", 2500*time.Microsecond, 10*time.Second, 200*time.Millisecond, 100*time.Millisecond)...)
	reports, _ := play(t, ps, arrivals)
	return reports["light"], reports["heavy"]
}

// lightGetsItsDemand: ≥ 99% served, and promptly (a mean wait of at most
// 50ms; the queue's max_wait is 500ms, which a FIFO queue's wait nears).
func lightGetsItsDemand(light flowReport) bool {
	return light.completion() >= 0.99 && light.meanWait() <= 50*time.Millisecond
}

func TestFairnessHeavyVsLight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		light, heavy := heavyVsLight(t, false)
		t.Logf("light: %v", light)
		t.Logf("heavy: %v", heavy)
		if !lightGetsItsDemand(light) {
			t.Errorf("light: %v; want ≥ 99%% served with a mean wait ≤ 50ms", light)
		}
		// heavy gets the seats beyond light's headroom: light uses half a
		// seat, and 0.5 + 2√0.5 rounds up to 2 seats kept for it, so 2 of
		// 4 seats, 20/s for 10s, plus what its queue holds at the end.
		if want := 200; heavy.served < want*9/10 || heavy.served > want*11/10+20 {
			t.Errorf("heavy served %d; want %d within 10%% (+ its final queue)", heavy.served, want)
		}
	})
}

func TestFairnessHeavyVsLightFailsWithFIFO(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		light, _ := heavyVsLight(t, true)
		t.Logf("light under FIFO: %v", light)
		if lightGetsItsDemand(light) {
			t.Errorf("with FIFO ordering light still got its demand (%v): the fairness check cannot fail", light)
		}
	})
}

// tierTraffic: enterprise sends bursts of 6 requests of 100ms every 500ms;
// starter, when flooding, sends a 2s export every 20ms (100 seats' worth).
func tierTraffic(pools map[string]string, flood bool) []arrival {
	var out []arrival
	for at := time.Duration(0); at < 10*time.Second; at += 500 * time.Millisecond {
		for i := range 6 {
			out = append(out, arrival{at: at + time.Duration(i)*time.Microsecond + 7*time.Millisecond,
				pool: pools["enterprise"], flow: "enterprise", service: 100 * time.Millisecond})
		}
	}
	if flood {
		out = append(out, openLoop(pools["starter"], "starter", 0, 10*time.Second, 20*time.Millisecond, 2*time.Second)...)
	}
	return out
}

// tiered is the bulkhead layout: 4 seats each; enterprise lends nothing, so
// its seats are there when its bursts come.
func tiered(t *testing.T) (*Pools, map[string]string) {
	return newPools(t, 8, map[string]PoolConfig{
		"enterprise": {Share: 1, QueueLength: 20, MaxWait: time.Second},
		"starter":    {Share: 1, LendablePercent: 50, QueueLength: 20, MaxWait: time.Second},
	}), map[string]string{"enterprise": "enterprise", "starter": "starter"}
}

// shared is bulkheads off: both tiers in one pool of the same 8 seats,
// first come first served. (One pool that orders its tenants by use
// isolates them too: TestHeadroomKeepsLightRequestsFromWaiting.)
func shared(t *testing.T) (*Pools, map[string]string) {
	ps := onePool(t, 8, PoolConfig{Share: 1, QueueLength: 40, MaxWait: time.Second}, without(ruleFairQueue))
	return ps, map[string]string{"enterprise": "p", "starter": "p"}
}

// enterpriseBaseline is enterprise's traffic alone in its own pool: 4 of a
// burst's 6 served at once, 2 after 100ms.
func enterpriseBaseline(t *testing.T) flowReport {
	ps, names := tiered(t)
	reports, _ := play(t, ps, tierTraffic(names, false))
	return reports["enterprise"]
}

func enterpriseIsolated(flooded, baseline flowReport) bool {
	return flooded.rejected == 0 && flooded.meanWait() <= 2*baseline.meanWait()
}

func TestIsolationTiers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		baseline := enterpriseBaseline(t)
		ps, names := tiered(t)
		reports, _ := play(t, ps, tierTraffic(names, true))
		t.Logf("enterprise alone:   %v", baseline)
		t.Logf("enterprise flooded: %v", reports["enterprise"])
		t.Logf("starter flooding:   %v", reports["starter"])
		if !enterpriseIsolated(reports["enterprise"], baseline) {
			t.Errorf("enterprise under the starter flood: %v; want no rejection and mean wait ≤ 2 × %v",
				reports["enterprise"], baseline.meanWait())
		}
		// starter's fair share: its own 4 seats (it borrows nothing) of
		// 2s each for 10s, about 20, plus what its queue holds at the end.
		if got := reports["starter"].served; got < 20 || got > 26 {
			t.Errorf("starter served %d; want about 20 (4 seats × 10s ÷ 2s) plus its final queue", got)
		}
	})
}

func TestIsolationTiersFailsWithoutBulkheads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		baseline := enterpriseBaseline(t)
		ps, names := shared(t)
		reports, _ := play(t, ps, tierTraffic(names, true))
		t.Logf("enterprise flooded in one shared pool: %v", reports["enterprise"])
		if enterpriseIsolated(reports["enterprise"], baseline) {
			t.Errorf("without bulkheads enterprise still isolated (%v): the isolation check cannot fail", reports["enterprise"])
		}
	})
}

// borrowing: pools a and b, 4 seats each, lending and borrowing all. For
// 2s a asks for 8 seats (80/s of 100ms) while b is idle, so a's fair share
// is all 8; then b asks for its 4 (40/s) and a keeps asking for 8, so each
// should hold its own 4.
func borrowing(t *testing.T, borrowingPercent int) (map[string]flowReport, []sample) {
	ps := newPools(t, 8, map[string]PoolConfig{
		"a": {Share: 1, LendablePercent: 100, BorrowingPercent: borrowingPercent, QueueLength: 50, MaxWait: time.Second},
		"b": {Share: 1, LendablePercent: 100, BorrowingPercent: 100, QueueLength: 50, MaxWait: time.Second},
	})
	arrivals := append(
		openLoop("a", "a", 0, 4*time.Second, 12500*time.Microsecond, 100*time.Millisecond),
		openLoop("b", "b", 2*time.Second+3*time.Millisecond, 4*time.Second, 25*time.Millisecond, 100*time.Millisecond)...)
	return play(t, ps, arrivals)
}

func aInFlight(s sample) int { return s.pools["a"].InFlight }
func aBorrowed(s sample) int { return s.pools["a"].Borrowed }
func idleSeatsUsed(samples []sample) bool {
	return meanOf(samples, 300*time.Millisecond, 2*time.Second, aInFlight) >= 7.5
}

func TestBorrowingUsesIdleSeatsAndReturnsThem(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reports, samples := borrowing(t, 100)
		t.Logf("a: %v", reports["a"])
		t.Logf("b: %v", reports["b"])
		if !idleSeatsUsed(samples) {
			t.Errorf("while b is idle a holds %.2f seats on average; want ≥ 7.5 of 8",
				meanOf(samples, 300*time.Millisecond, 2*time.Second, aInFlight))
		}
		// Once b's traffic arrives, the seats come back within one
		// service time (100ms) and b gets its demand.
		if got := meanOf(samples, 2200*time.Millisecond, 4*time.Second, aBorrowed); got > 0.5 {
			t.Errorf("after b's traffic arrived a still borrows %.2f seats on average; want ≤ 0.5", got)
		}
		if b := reports["b"]; b.completion() < 0.99 || b.maxWait > 100*time.Millisecond {
			t.Errorf("b: %v; want ≥ 99%% served, none waiting over 100ms", b)
		}
	})
}

func TestBorrowingFailsWithoutBorrowing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, samples := borrowing(t, 0)
		if idleSeatsUsed(samples) {
			t.Errorf("with borrowing off a still held %.2f seats: the borrowing check cannot fail",
				meanOf(samples, 300*time.Millisecond, 2*time.Second, aInFlight))
		}
	})
}

// lightReads is flow light's traffic in pool p until until: a read
// holding its seat for read every every from 3 ms, and from burstsFrom,
// twice a second, three more at once.
func lightReads(until, every, read, burstsFrom time.Duration) []arrival {
	out := openLoop("p", "light", 3*time.Millisecond, until, every, read)
	for at := burstsFrom; at < until; at += 500 * time.Millisecond {
		for i := range 3 {
			out = append(out, arrival{at: at + time.Duration(i)*time.Microsecond, pool: "p", flow: "light", service: read})
		}
	}
	return out
}

// exportsVsReads: one pool of 4 seats; light sends a 5 ms read every 20 ms
// and, twice a second, three more at once; heavy sends a 300 ms export
// every 150 ms from 1 s (two seats' worth), then every 50 ms from 2 s (six
// seats' worth). noReserve switches ruleHeadroom off.
func exportsVsReads(t *testing.T, noReserve bool) (light, heavy flowReport) {
	ps := onePool(t, 4, PoolConfig{Share: 1, QueueLength: 20, MaxWait: time.Second}, withoutIf(noReserve, ruleHeadroom))
	arrivals := append(openLoop("p", "heavy", time.Second, 2*time.Second, 150*time.Millisecond, 300*time.Millisecond),
		openLoop("p", "heavy", 2*time.Second, 10*time.Second, 50*time.Millisecond, 300*time.Millisecond)...)
	arrivals = append(arrivals, lightReads(10*time.Second, 20*time.Millisecond, 5*time.Millisecond, 250*time.Millisecond)...)
	reports, _ := play(t, ps, arrivals)
	return reports["light"], reports["heavy"]
}

// borrowerAndLender returns pools p and l of 2 seats each; p may borrow 2
// more, all of l's.
func borrowerAndLender(t *testing.T, opts ...Option) *Pools {
	return newPools(t, 4, map[string]PoolConfig{
		"p": {Share: 1, BorrowingPercent: 100, QueueLength: 50, MaxWait: time.Second},
		"l": {Share: 1, LendablePercent: 100, QueueLength: 50, MaxWait: time.Second},
	}, opts...)
}

// borrowedHeadroom: pool p of 2 seats may borrow 2 more from pool l, which
// is idle. In p, light sends a 10 ms read every 25 ms and, twice a second,
// three more at once; heavy sends a 300 ms export every 50 ms from 1 s
// (six seats' worth). noReserve switches ruleHeadroom off.
func borrowedHeadroom(t *testing.T, noReserve bool) (light, heavy flowReport) {
	ps := borrowerAndLender(t, withoutIf(noReserve, ruleHeadroom))
	arrivals := openLoop("p", "heavy", time.Second, 6*time.Second, 50*time.Millisecond, 300*time.Millisecond)
	arrivals = append(arrivals, lightReads(6*time.Second, 25*time.Millisecond, 10*time.Millisecond, 1250*time.Millisecond)...)
	reports, _ := play(t, ps, arrivals)
	return reports["light"], reports["heavy"]
}

// borrowPastHeadroom: pool p of 2 seats may borrow 2 more from pool l,
// which is idle. In p, heavy floods 20 ms searches (400/s, eight seats'
// worth), middle sends a 10 ms read every 25 ms and, twice a second, three
// more at once (half a seat), and light a 10 ms read every 100 ms. p's
// free seat is then headroom for light, which middle may not take; middle
// borrows l's instead of waiting for a search to end. ownFirst makes it
// wait for p's own seats, and a free seat be taken at once only beside an
// empty queue (without ruleFreeSeatBesideFullQueue: otherwise middle, finding p's queue full of
// requests waiting for p's own seats, takes l's at once, the mechanism by
// another way; and without ruleModestBorrows, by which middle, using half
// a seat, borrows past p's limit at once, another way again).
func borrowPastHeadroom(t *testing.T, ownFirst bool) (middle, heavy flowReport) {
	ps := borrowerAndLender(t, withoutIf(ownFirst, ruleBorrowPastHeadroom|ruleFreeSeatBesideFullQueue|ruleModestBorrows))
	arrivals := openLoop("p", "heavy", time.Second, 6*time.Second, 2500*time.Microsecond, 20*time.Millisecond)
	for _, a := range lightReads(6*time.Second, 25*time.Millisecond, 10*time.Millisecond, 1250*time.Millisecond) {
		a.flow = "middle"
		arrivals = append(arrivals, a)
	}
	arrivals = append(arrivals, openLoop("p", "light", 7*time.Millisecond, 6*time.Second, 100*time.Millisecond, 10*time.Millisecond)...)
	reports, _ := play(t, ps, arrivals)
	return reports["middle"], reports["heavy"]
}

// shrinkingPool: one pool whose seats an adaptive limit moves between 6
// and 3 every 400 ms from 1.2 s. light sends a 10 ms read every 25 ms and,
// twice a second, three more at once; heavy sends a 300 ms export every
// 50 ms from 1 s (six seats' worth). When the pool shrinks, heavy's
// exports hold the seats they took while it was large; light takes the
// seats it is owed at once instead of waiting for them to end.
// noGuarantee makes it wait.
func shrinkingPool(t *testing.T, noGuarantee bool) (light, heavy flowReport) {
	ps := onePool(t, 6, PoolConfig{Share: 1, QueueLength: 50, MaxWait: time.Second}, withoutIf(noGuarantee, ruleGuarantee))
	arrivals := openLoop("p", "heavy", time.Second, 6*time.Second, 50*time.Millisecond, 300*time.Millisecond)
	arrivals = append(arrivals, lightReads(6*time.Second, 25*time.Millisecond, 10*time.Millisecond, 1250*time.Millisecond)...)
	stop := make(chan struct{})
	go func() {
		time.Sleep(1200 * time.Millisecond)
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			case <-time.After(400 * time.Millisecond):
				ps.SetTotal(3 + 3*(n%2))
			}
		}
	}()
	reports, _ := play(t, ps, arrivals)
	close(stop)
	return reports["light"], reports["heavy"]
}

// headroomCases: in each, a tenant whose long requests would fill every
// seat its pool can reach leaves the seats a lighter tenant needs free, and
// keeps the rest busy.
//   - one pool: the light tenant's reads, bursts included, seldom wait for
//     a 300 ms export to end (only while the flood's first exports hold
//     seats its use does not show yet);
//   - borrowed: the heavy tenant does not spend its pool's borrowing on
//     the seats its lighter neighbour needs, so the light tenant's bursts
//     find seats its pool can reach instead of waiting behind the reads
//     before them on the one seat the flood left it;
//   - borrowing past headroom: a tenant held back from its pool's last
//     seat (headroom for a lighter one) borrows an idle pool's seat
//     rather than wait for the flood's requests to end;
//   - the pool shrinking under the flood: the light tenant takes the
//     seats it is owed beyond the pool's new seats.
//
// A case's play takes its negative control: true turns the mechanism off.
var headroomCases = []struct {
	name     string
	play     func(t *testing.T, control bool) (light, heavy flowReport)
	lightOK  func(flowReport) bool
	want     string
	heavyMin int
}{
	{"one pool", exportsVsReads, func(r flowReport) bool { return r.completion() == 1 && r.meanWait() <= 5*time.Millisecond },
		"every read served, a mean wait under 5ms", 60},
	{"borrowed", borrowedHeadroom, func(r flowReport) bool { return r.completion() == 1 && r.maxWait <= 10*time.Millisecond },
		"every read served, none waiting over 10ms", 15},
	{"borrowing past headroom", borrowPastHeadroom, func(r flowReport) bool {
		return r.completion() == 1 && r.meanWait() <= 5*time.Millisecond && r.maxWait <= 30*time.Millisecond
	}, "every read served, a mean wait under 5ms, none over 30ms", 300},
	{"pool shrinking under the flood", shrinkingPool, func(r flowReport) bool {
		return r.completion() == 1 && r.meanWait() <= 5*time.Millisecond && r.maxWait <= 25*time.Millisecond
	}, "every read served, a mean wait under 5ms, none over 25ms", 40},
}

func TestHeadroomKeepsLightRequestsFromWaiting(t *testing.T) {
	for _, c := range headroomCases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				light, heavy := c.play(t, false)
				t.Logf("light: %v", light)
				t.Logf("heavy: %v", heavy)
				if !c.lightOK(light) {
					t.Errorf("light: %v; want %s", light, c.want)
				}
				if heavy.served < c.heavyMin {
					t.Errorf("heavy served %d; want the seats light leaves (≥ %d)", heavy.served, c.heavyMin)
				}
			})
		})
	}
}

// Negative control: without the mechanism (the headroom, or borrowing
// past it) the light tenant's reads wait for the heavy tenant's requests.
func TestNoHeadroomLightRequestsWait(t *testing.T) {
	for _, c := range headroomCases {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				light, _ := c.play(t, true)
				t.Logf("light without headroom: %v", light)
				if c.lightOK(light) {
					t.Errorf("light without headroom: %v; the test above cannot fail", light)
				}
			})
		})
	}
}
