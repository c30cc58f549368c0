package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fairgate/fairgate/admission"
	"github.com/fairgate/fairgate/admission/gateway"
	"github.com/fairgate/fairgate/bulkhead"
	"github.com/fairgate/fairgate/shed"
	"github.com/fairgate/fairgate/tenant"
)

// checkConfig validates a config file (gateway.Check: every error it can
// find, in one run) and, for a gateway's config, shows what the gateway
// computes from it — each tier's limits as its tenants get them, the
// tenants that override them, how the pools divide the seats — since
// those are the numbers an operator otherwise works out by hand, and
// gets wrong where the code rounds.
func checkConfig(args []string, stdout io.Writer) error {
	parse, rlsOnly := gateway.Parse, len(args) == 2 && args[0] == "--rls"
	if rlsOnly {
		parse, args = gateway.ParseRLS, args[1:]
	}
	if len(args) != 1 {
		return errors.New("usage: fairgate check-config [--rls] FILE")
	}
	cfg, err := gateway.Check(args[0], parse)
	if err != nil {
		return err
	}
	if !rlsOnly {
		fmt.Fprintf(stdout, "%s: ok (%d tiers, %d tenants, %d routes)\n", args[0], len(cfg.Tenants.Tiers), len(cfg.Tenants.Tenants), len(cfg.Admission.Routes))
		if err := describe(stdout, cfg); err != nil {
			return err
		}
	}
	if cfg.RLS != nil {
		rules, err := cfg.RLS.LoadRules() // with its settings (merge_domain_config)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s: rls ok (domains: %s)\n", args[0], strings.Join(rules.Domains(), ", "))
	}
	return nil
}

// describe writes what the gateway makes of a valid config: the tiers,
// the tenants' overrides, the bulkhead's seats and the shared layers.
func describe(w io.Writer, cfg gateway.Config) error {
	reg, err := tenant.NewRegistry(cfg.Tenants)
	if err != nil {
		return err // Check accepted it: not reached
	}
	a := cfg.Admission
	describeTiers(w, cfg, a.Bulkhead != nil)
	describeTenants(w, cfg.Tenants, reg)
	if a.Bulkhead != nil {
		if err := describePools(w, cfg); err != nil {
			return err
		}
	}
	describeShared(w, a)
	return nil
}

// describeTiers writes each tier as its tenants get it (TierConfig.Defaults,
// what the registry starts every tenant from).
func describeTiers(w io.Writer, cfg gateway.Config, pools bool) {
	fmt.Fprintln(w, "\ntiers (rate in tokens a second, burst in tokens; a request takes its route's cost):")
	tw := table(w)
	head := "TIER\tRATE\tBURST\tMAX_CONCURRENT\tRANK\tWEIGHT"
	if pools {
		head += "\tPOOL"
	}
	if cfg.Redis != nil {
		head += "\tMODE"
	}
	fmt.Fprintln(tw, head+"\tALSO")
	for _, name := range slices.Sorted(maps.Keys(cfg.Tenants.Tiers)) {
		tc := cfg.Tenants.Tiers[name]
		t := tc.Defaults(name)
		row := fmt.Sprintf("%s\t%s\t%s\t%s\t%d\t%s", name, num(t.Rate), num(t.Burst), concurrency(t.MaxConcurrent, t.CriticalReserve), t.Rank, num(t.Weight))
		if pools {
			row += "\t" + t.Pool
		}
		if cfg.Redis != nil {
			row += "\t" + mode(t.Mode, cfg)
		}
		var also []string
		for _, l := range tc.Limits {
			also = append(also, limit(l, cfg))
		}
		for _, g := range slices.Sorted(maps.Keys(tc.Groups)) {
			q := tc.Groups[g]
			also = append(also, fmt.Sprintf("group %s: rate %s, burst %s", g, num(q.Rate), num(q.Burst)))
		}
		if t.Shadow {
			also = append(also, "shadow (its quotas count what they would refuse, and admit it)")
		}
		fmt.Fprintln(tw, row+"\t"+strings.Join(also, "; "))
	}
	tw.Flush()
	if cfg.Redis != nil {
		if n := cfg.Redis.Instances; n > 0 {
			fmt.Fprintf(w, "  max_concurrent is kept per instance: with redis.instances %d each gateway allows ceil(max_concurrent ÷ %d)\n", n, n)
		} else {
			fmt.Fprintln(w, "  max_concurrent is kept per instance: with n gateways alive on the Redis each allows ceil(max_concurrent ÷ n)")
		}
	}
}

// describeTenants writes the tenants per tier, and what each that sets
// its own values gets instead of its tier's.
func describeTenants(w io.Writer, c tenant.Config, reg *tenant.Registry) {
	perTier := map[string]int{}
	var own []string
	for _, tc := range c.Tenants {
		perTier[tc.Tier]++
		t, _ := reg.ByID(tc.ID)
		if d := overrides(t, c.Tiers[tc.Tier].Defaults(tc.Tier)); d != "" {
			own = append(own, fmt.Sprintf("  %s (%s): %s", t.ID, t.Tier, d))
		}
	}
	var counts []string
	for _, name := range slices.Sorted(maps.Keys(perTier)) {
		counts = append(counts, fmt.Sprintf("%s %d", name, perTier[name]))
	}
	fmt.Fprintf(w, "\ntenants: %d (%s)", len(c.Tenants), strings.Join(counts, ", "))
	if len(own) == 0 {
		fmt.Fprintln(w, "; none sets its own limits")
		return
	}
	fmt.Fprintln(w, "; these set their own:")
	slices.Sort(own)
	fmt.Fprintln(w, strings.Join(own, "\n"))
}

// overrides describes where t differs from its tier's defaults d.
func overrides(t *tenant.Tenant, d tenant.Tenant) string {
	var out []string
	if t.Rate != d.Rate {
		out = append(out, "rate "+num(t.Rate))
	}
	if t.Burst != d.Burst {
		out = append(out, "burst "+num(t.Burst))
	}
	if t.MaxConcurrent != d.MaxConcurrent {
		out = append(out, "max_concurrent "+concurrency(t.MaxConcurrent, t.CriticalReserve))
	}
	if t.Weight != d.Weight {
		out = append(out, "weight "+num(t.Weight))
	}
	if !slices.Equal(t.Limits, d.Limits) {
		var ls []string
		for _, l := range t.Limits {
			ls = append(ls, fmt.Sprintf("%s (rate %s, burst %s)", l.Name, num(l.Rate), num(l.Burst)))
		}
		out = append(out, "limits ["+strings.Join(ls, ", ")+"]")
	}
	if t.Shadow != d.Shadow {
		out = append(out, "shadow "+strconv.FormatBool(t.Shadow))
	}
	if t.Exempt {
		out = append(out, "exempt (passes every shared layer)")
	}
	return strings.Join(out, ", ")
}

// describePools writes how the pools divide the seats, as bulkhead.Pools
// divides them (built here, and read by Stats: the division is the
// package's, not restated), at the total the gateway starts with and, with
// an adaptive limit, at its bounds.
func describePools(w io.Writer, cfg gateway.Config) error {
	a := cfg.Admission
	ps, err := bulkhead.NewPools(*a.Bulkhead)
	if err != nil {
		return err
	}
	start, from := a.Bulkhead.Total, "bulkhead.total"
	var bounds []int
	if a.Adaptive != nil {
		l, err := shed.NewLimiter(*a.Adaptive)
		if err != nil {
			return err
		}
		ad := a.Adaptive.WithDefaults()
		start, from = l.Limit(), "adaptive.initial; bulkhead.total is not used while adaptive is set"
		bounds = []int{ad.Min, ad.Max}
	}
	names := ps.Names()
	sum := 0
	for _, n := range names {
		sum += a.Bulkhead.Pools[n].Share
	}
	ps.SetTotal(start)
	fmt.Fprintf(w, "\nbulkhead: %d seats to start (%s).\n"+
		"  Each pool gets the floor of total × share ÷ %d (the sum of the shares); the seats left over go\n"+
		"  one each to the largest remainders (ties by name); a pool left with none takes one from the richest.\n", ps.Total(), from, sum)
	at := map[string][]int{}
	var totals []int
	for _, b := range bounds {
		ps.SetTotal(b)
		totals = append(totals, ps.Total())
		for _, n := range names {
			st, _ := ps.Stats(n)
			at[n] = append(at[n], st.Seats)
		}
	}
	ps.SetTotal(start)
	tw := table(w)
	head := "POOL\tSHARE\tSEATS"
	if len(totals) == 2 {
		head += fmt.Sprintf("\tAT %d\tAT %d", totals[0], totals[1])
	}
	fmt.Fprintln(tw, head+"\tLENDS\tBORROWS\tQUEUE\tMAX_WAIT\tUSED BY")
	seats := 0
	for _, n := range names {
		pc, st := a.Bulkhead.Pools[n], must(ps.Stats(n))
		seats += st.Seats
		row := fmt.Sprintf("%s\t%d\t%d", n, pc.Share, st.Seats)
		for _, s := range at[n] {
			row += fmt.Sprintf("\t%d", s)
		}
		wait := "-"
		if pc.QueueLength > 0 {
			wait = pc.MaxWait.String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", row, upTo(st.Lendable), upTo(st.BorrowLimit), pc.QueueLength, wait, usedBy(n, cfg))
	}
	row := fmt.Sprintf("(all)\t%d\t%d", sum, seats)
	for _, t := range totals {
		row += fmt.Sprintf("\t%d", t)
	}
	fmt.Fprintln(tw, row+"\t\t\t\t\t")
	tw.Flush()
	if len(totals) == 2 && totals[0] != bounds[0] {
		fmt.Fprintf(w, "  every pool keeps a seat: the pools hold %d whatever the limit below that (adaptive.min %d)\n", totals[0], bounds[0])
	}
	return nil
}

// upTo describes a bound on seats lent or borrowed.
func upTo(n int) string {
	if n == 0 {
		return "none"
	}
	return fmt.Sprintf("up to %d", n)
}

// must returns a pool's stats, which Pools has for each of its Names.
func must(st bulkhead.PoolStats, _ bool) bulkhead.PoolStats { return st }

// usedBy names the tiers and routes whose requests take seats in pool.
func usedBy(pool string, cfg gateway.Config) string {
	var by []string
	for _, name := range slices.Sorted(maps.Keys(cfg.Tenants.Tiers)) {
		if cfg.Tenants.Tiers[name].Defaults(name).Pool == pool {
			by = append(by, "tier "+name)
		}
	}
	for i, r := range cfg.Admission.Routes {
		if r.Pool == pool {
			by = append(by, fmt.Sprintf("routes[%d] %s %s", i, r.Method, r.Path))
		}
	}
	if len(by) == 0 {
		return "nothing: no tier or route names it"
	}
	return strings.Join(by, ", ")
}

// describeShared writes the layers every tenant shares that the config
// sets: the global backstop, the per-IP buckets, the adaptive limit and
// shedding.
func describeShared(w io.Writer, a admission.Config) {
	var lines []string
	if g := a.Global; g != nil {
		win := g.Window
		if win == 0 {
			win = admission.DefaultGlobalWindow
		}
		lines = append(lines, fmt.Sprintf("global backstop: rate %s, burst %s, window %v; shared by weighted fair share, it refuses (503) only tenants above theirs", num(g.Rate), num(g.Burst), win))
	}
	if q := a.Unauthenticated; q != nil {
		lines = append(lines, fmt.Sprintf("unauthenticated: per client IP, rate %s, burst %s (429 beyond)", num(q.Rate), num(q.Burst)))
	}
	if q := a.Anonymous; q != nil {
		lines = append(lines, fmt.Sprintf("anonymous (auth: none routes): per client IP, rate %s, burst %s", num(q.Rate), num(q.Burst)))
	}
	if a.Adaptive != nil {
		ad := a.Adaptive.WithDefaults()
		what := "the pools divide what it learns"
		if a.Bulkhead == nil {
			what = "its permits are shared by tenant"
		}
		lines = append(lines, fmt.Sprintf("adaptive: starts at %d, learns between %d and %d from the upstream's latency (max_latency %v); %s", ad.Initial, ad.Min, ad.Max, ad.MaxLatency, what))
	}
	switch sc := a.Shedding; {
	case a.Bulkhead == nil && a.Adaptive == nil:
		if sc != nil {
			lines = append(lines, "shedding: nothing to shed for without a bulkhead or an adaptive limit")
		}
	case sc != nil && sc.Disabled:
		lines = append(lines, "shedding: off (shedding.disabled)")
	default:
		d := shed.SheddingConfig{}
		if sc != nil {
			d = *sc
		}
		d = d.WithDefaults()
		lines = append(lines, fmt.Sprintf("shedding: on, lowest priorities first (calibration_interval %v, max_retry_after %v)", d.CalibrationInterval, d.MaxRetryAfter))
	}
	if len(lines) > 0 {
		fmt.Fprintln(w, "\n"+strings.Join(lines, "\n"))
	}
}

// table returns a tabwriter indenting its rows under a heading.
func table(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(&indent{w: w}, 0, 0, 2, ' ', 0)
}

// indent puts two spaces before each line written through it, and drops
// the padding tabwriter leaves at the end of a row whose last cell is
// empty.
type indent struct {
	w    io.Writer
	line []byte // the line so far
}

func (i *indent) Write(p []byte) (int, error) {
	for _, c := range p {
		if c != '\n' {
			i.line = append(i.line, c)
			continue
		}
		out := append([]byte("  "), bytes.TrimRight(i.line, " ")...)
		if _, err := i.w.Write(append(out, '\n')); err != nil {
			return 0, err
		}
		i.line = i.line[:0]
	}
	return len(p), nil
}

// concurrency describes a cap and its critical reserve.
func concurrency(cap, reserve int) string {
	switch {
	case cap <= 0:
		return "no cap"
	case reserve > 0:
		return fmt.Sprintf("%d (+%d critical)", cap, reserve)
	}
	return strconv.Itoa(cap)
}

// limit describes one of a tier's limits as the file sets it.
func limit(l tenant.LimitConfig, cfg gateway.Config) string {
	s := fmt.Sprintf("limit %s: rate %s, burst %s", l.Name, num(l.Rate), num(l.Burst))
	switch {
	case l.Window == tenant.WindowFixed:
		s = fmt.Sprintf("limit %s: %s per window, %s", l.Name, num(l.Burst), l.Resolve().Window)
	case l.Per.Unit != 0:
		s = fmt.Sprintf("limit %s: burst %s per %s (%s)", l.Name, num(l.Burst), l.Per, duration(l.Per.Length()))
	case !l.Per.IsZero():
		s = fmt.Sprintf("limit %s: burst %s per %s", l.Name, num(l.Burst), duration(l.Per.D))
	}
	switch {
	case cfg.Redis == nil:
	case l.Window == tenant.WindowFixed:
		s += " (exact: a window always is)"
	default:
		s += " (" + mode(l.Mode, cfg) + ")"
	}
	return s
}

// mode is the mode a bucket of mode m uses on the config's Redis: its own,
// else the store's.
func mode(m tenant.Mode, cfg gateway.Config) string {
	if m != tenant.ModeStore {
		return string(m)
	}
	return cfg.Redis.Mode.String() + " (redis.mode)"
}

// num formats a rate, burst or weight: as set, to three decimals at most.
func num(v float64) string {
	return strconv.FormatFloat(math.Round(v*1000)/1000, 'f', -1, 64)
}

// duration formats d without the zero units time.Duration prints
// ("24h", not "24h0m0s").
func duration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
