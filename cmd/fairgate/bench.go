package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/fairgate/fairgate/bench"
)

// benchCmd runs `fairgate bench`: flags only; the logic is in package bench.
func benchCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	scenario := fs.String("scenario", "noisy-neighbour", "scenario: "+strings.Join(bench.ScenarioNames(), ", ")+", all, or overhead")
	modes := fs.String("modes", "", "comma-separated modes run back to back: none, global, ip, fairgate, fairgate-redis (default: none,global,ip,fairgate, and fairgate-redis when --redis is set)")
	duration := fs.Duration("duration", 30*time.Second, "arrival time of each mode's run (the quiet baseline takes half)")
	out := fs.String("out", "bench-out", "directory for results.json, report.md and the PNG plots")
	redis := fs.String("redis", "", "Redis address (host:port) for the fairgate-redis mode, which needs it")
	seed := fs.Uint64("seed", 1, "seed of the arrival processes, the route mixes and many-tenants' choice of noisy tenants")
	quiet := fs.Bool("quiet", false, "no progress bars")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *duration < time.Second || *duration > time.Hour {
		return errors.New("--duration: must be between 1s and 1h")
	}
	o := bench.Options{Duration: *duration, RedisAddr: *redis, Seed: *seed, Progress: stderr}
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
		fmt.Fprintf(stdout, "\nwrote %s/{results.json,report.md,latency-%[2]s.png,goodput-%[2]s.png}\n\n", dir, name)
	}
	return nil
}
