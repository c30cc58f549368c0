package shed

// rule is one rule by which the adaptive limit reads its calls' latencies,
// beyond the gradient and the slow-call cut, or by which the Shedder
// plans (ruleWorkWeighted). Limiter and Shedder apply every rule;
// each is a bit so that the negative control of its test can switch it off
// through a test-only constructor, and the hot path tests it with one AND.
// The comments below are the specification of the rules.
type rule uint16

const (
	// ruleQueueSense: windows of calls are judged against each latency
	// class's typical latency, and a window that says the upstream queues
	// cuts the ceiling (queueSense). Off, the gradient and the slow calls
	// alone govern the limit.
	ruleQueueSense rule = 1 << iota

	// ruleLateCalls: a window is queueing when enough of its calls are
	// late (past the class's 90th percentile by lateFactor), not only
	// when its mean is high, and a healthy window raises the ceiling by
	// one per max(ceiling, senseWindow) calls, not per ceiling's worth.
	ruleLateCalls

	// ruleKnee: the level of calls in flight above which the calls wait
	// is remembered as the knee, and the ceiling stays below it
	// (kneeSense).
	ruleKnee

	// ruleKneeExpires: a knee holds for kneeHold (doubled by each probe
	// that finds it again) and is then probed afresh, so that an upstream
	// that recovered gets its limit back.
	ruleKneeExpires

	// ruleProbeJudgesAbove: a probe of an expired knee judges its level
	// together with the levels above it, not its level alone.
	ruleProbeJudgesAbove

	// ruleFullSpeedBelowProbe: the limit climbs slowly only near the
	// level it probes, at full speed below it.
	ruleFullSpeedBelowProbe

	// rulePress: the ceiling rises only after a window in which calls
	// wanted more than the limit (Limiter.Press); a limit nobody reaches
	// does not climb.
	rulePress

	// ruleWorkWeighted: the Shedder counts each call's demand, and the
	// upstream's throughput, by the call's work (its expected hold of a
	// seat), not one a call, and sheds the lowest priorities' work first:
	// under a mix of 5 ms reads and 300 ms exports, shedding exports frees
	// sixty reads' worth of seat time each. Off, every call counts as
	// UnitWork.
	ruleWorkWeighted

	// allRules is the rule set as Limiter and Shedder apply it.
	allRules = ruleWorkWeighted<<1 - 1
)

// on reports whether rules holds r.
func (rules rule) on(r rule) bool { return rules&r != 0 }
