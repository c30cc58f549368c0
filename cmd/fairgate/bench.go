package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/fairgate/fairgate/admission/gateway"
	"github.com/fairgate/fairgate/bench"
)

// benchCmd runs `fairgate bench`: flags only; the logic is in package bench.
func benchCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	scenario := fs.String("scenario", "noisy-neighbour", "scenario: "+strings.Join(bench.ScenarioNames(), ", ")+", all, overhead, or throughput")
	modes := fs.String("modes", "", "comma-separated modes run back to back: none, global, ip, fairgate, fairgate-redis (default: none,global,ip,fairgate, and fairgate-redis when --redis is set); throughput: "+strings.Join(bench.ThroughputModes, ", "))
	duration := fs.Duration("duration", 30*time.Second, "arrival time of each mode's run (the quiet baseline runs as long)")
	out := fs.String("out", "bench-out", "directory for results.json, report.md and plots-SCENARIO.json (go run ./bench/plots DIR draws the PNGs from it)")
	redis := fs.String("redis", "", "Redis address (host:port) for the fairgate-redis mode, which needs it")
	seed := fs.Uint64("seed", 1, "seed of the arrival processes, the route mixes and many-tenants' choice of noisy tenants")
	quiet := fs.Bool("quiet", false, "no progress lines")
	rounds := fs.Int("rounds", 3, "throughput: interleaved rounds of every mode")
	conns := fs.String("conns", "8,64", "throughput: comma-separated closed-loop connection counts")
	floodDur := fs.Duration("flood-duration", 10*time.Second, "throughput: each phase (quiet, flood) of the flood rounds")
	floodRate := fs.Float64("flood-rate", bench.FloodRate, "throughput: the flood's requests per second in the flood rounds")
	generator := fs.String("generator", "client", "throughput: the load generator, the bench's own client, wrk (each server alone on the first core, wrk and the upstream on the second), or h2load (HTTP/2, cores as wrk's; fairgate and nginx)")
	tlsRun := fs.Bool("tls", false, "throughput with --generator h2load: HTTP/2 over TLS (ALPN) instead of h2c")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *scenario == "throughput" && !isSet(fs, "duration") {
		*duration = 5 * time.Second
	}
	if *duration < time.Second || *duration > time.Hour {
		return errors.New("--duration: must be between 1s and 1h")
	}
	if *scenario == "throughput" {
		o := bench.ThroughputOptions{Rounds: *rounds, Duration: *duration, FloodDuration: *floodDur, FloodRate: *floodRate, Progress: stderr}
		switch *generator {
		case "client":
		case "wrk":
			o.Wrk = true
		case "h2load":
			o.H2load, o.TLS = true, *tlsRun
		default:
			return fmt.Errorf("bench: --generator %q: want client, wrk or h2load", *generator)
		}
		if *tlsRun && !o.H2load {
			return errors.New("bench: --tls goes with --generator h2load")
		}
		if *quiet {
			o.Progress = nil
		}
		return throughput(ctx, o, *out, *conns, *modes, stdout)
	}
	// The gateways under test share this process with the upstream and
	// the load, so the process's collector is set as fairgate serve sets
	// it for the default server section (GOGC and GOMEMLIMIT still win).
	gc := gateway.ApplyGC(gateway.ServerConfig{}, os.Getenv)
	o := bench.Options{Duration: *duration, RedisAddr: *redis, Seed: *seed, Progress: stderr, GCPercent: gc.GCPercent}
	if *quiet {
		o.Progress = nil
	}
	if *modes != "" {
		ms, err := bench.ParseModes(*modes)
		if err != nil {
			return fmt.Errorf("--modes: %w", err)
		}
		o.Modes = ms
	}
	names := []string{*scenario}
	if *scenario == "all" {
		names = bench.ScenarioNames()
	}
	for _, name := range names {
		o.Scenario = name
		res, err := bench.Run(ctx, o)
		if err != nil {
			return err
		}
		dir := *out
		if len(names) > 1 {
			dir = filepath.Join(*out, name)
		}
		if err := bench.WriteOutputs(dir, res); err != nil {
			return err
		}
		if err := bench.WriteReport(stdout, res); err != nil {
			return err
		}
		if res.Storm != nil { // retry-storm has no plots
			fmt.Fprintf(stdout, "\nwrote %s/{results.json,report.md}\n\n", dir)
			continue
		}
		fmt.Fprintf(stdout, "\nwrote %s/{results.json,report.md,plots-%[2]s.json}; draw the plots with: go run ./bench/plots %[1]s\n\n", dir, name)
	}
	return nil
}

func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// throughput runs the throughput scenario: each server a child process of
// this binary (bench-server) on one core.
func throughput(ctx context.Context, o bench.ThroughputOptions, out, connList, modes string, stdout io.Writer) error {
	bin, err := os.Executable()
	if err != nil {
		return err
	}
	o.Binary = bin
	for w := range strings.SplitSeq(connList, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(w))
		if err != nil || n < 1 {
			return fmt.Errorf("--conns: %q is not a positive number", w)
		}
		o.Conns = append(o.Conns, n)
	}
	if modes != "" {
		o.Modes = strings.Split(modes, ",")
	}
	res, err := bench.Throughput(ctx, o)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(out, "throughput.md"))
	if err != nil {
		return err
	}
	if err := bench.WriteThroughput(io.MultiWriter(stdout, f), res); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// benchServer runs one server of the throughput scenario (a child process
// that bench starts; not for people).
func benchServer(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) != 2 {
		return errors.New("usage: fairgate bench-server MODE UPSTREAM")
	}
	// FAIRGATE_CPUPROFILE=PREFIX writes each server's CPU profile to
	// PREFIX.MODE (bench/PERF.md).
	if prefix := os.Getenv("FAIRGATE_CPUPROFILE"); prefix != "" {
		f, err := os.Create(prefix + "." + args[0])
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	return bench.ServeThroughputChild(ctx, args[0], args[1], stdout)
}
