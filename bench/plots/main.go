// Command plots draws the PNG plots of fairgate bench from the plots files
// it writes:
//
//	go run ./bench/plots DIR...
//
// DIR is a fairgate bench --out directory. For each plots-SCENARIO.json in
// DIR, or in a directory inside it (--scenario all writes one directory per
// scenario), it writes beside the file, where report.md links them:
// latency-SCENARIO.png, per run the admitted latency and the share of
// requests rejected over time for each tenant drawn, the noisy ramp
// marked; and goodput-SCENARIO.png, each tenant's goodput in each mode.
//
// It is a command of its own, apart from fairgate bench, so that the
// fairgate binary links no plotting library.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/fairgate/fairgate/bench/plotdata"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "plots:", err)
		os.Exit(1)
	}
}

// run draws the plots of every plots file in the directories of args and
// names each PNG it wrote on stdout.
func run(args []string, stdout io.Writer) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return errors.New("usage: go run ./bench/plots DIR... (a fairgate bench --out directory)")
	}
	for _, dir := range args {
		files, err := plotFiles(dir)
		if err != nil {
			return err
		}
		for _, f := range files {
			p, err := plotdata.Read(f)
			if err != nil {
				return err
			}
			out := filepath.Dir(f)
			lat, gp := filepath.Join(out, plotdata.LatencyPNG(p.Scenario)), filepath.Join(out, plotdata.GoodputPNG(p.Scenario))
			if err := latencyPlot(lat, p); err != nil {
				return fmt.Errorf("%s: latency plot: %w", f, err)
			}
			if err := goodputPlot(gp, p); err != nil {
				return fmt.Errorf("%s: goodput plot: %w", f, err)
			}
			fmt.Fprintf(stdout, "wrote %s\nwrote %s\n", lat, gp)
		}
	}
	return nil
}

// plotFiles returns the plots files in dir and in the directories directly
// inside it, and an error when there are none: a directory without is a
// mistyped argument, or one written before the bench wrote plots files.
func plotFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		path := filepath.Join(dir, e.Name())
		if !e.IsDir() {
			if isPlotsFile(e.Name()) {
				out = append(out, path)
			}
			continue
		}
		sub, err := os.ReadDir(path)
		if err != nil {
			return nil, err
		}
		for _, s := range sub {
			if !s.IsDir() && isPlotsFile(s.Name()) {
				out = append(out, filepath.Join(path, s.Name()))
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no %s in it or in a directory inside it (fairgate bench --out writes them)", dir, plotdata.FileName("SCENARIO"))
	}
	return out, nil
}

func isPlotsFile(name string) bool {
	return strings.HasPrefix(name, "plots-") && strings.HasSuffix(name, ".json")
}
