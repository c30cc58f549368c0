package shed

import (
	"errors"
	"sort"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

func TestPriorityForOrdering(t *testing.T) {
	const starter, pro, enterprise = 0, 1, 2
	// Highest first: criticality dominates, tier orders within it.
	want := []struct {
		name string
		rank int
		c    Criticality
	}{
		{"enterprise critical", enterprise, Critical},
		{"pro critical", pro, Critical},
		{"starter critical", starter, Critical},
		{"enterprise default", enterprise, Default},
		{"pro default", pro, Default},
		{"starter default", starter, Default},
		{"enterprise sheddable", enterprise, Sheddable},
		{"pro sheddable", pro, Sheddable},
		{"starter sheddable", starter, Sheddable},
	}
	for i := 1; i < len(want); i++ {
		hi := PriorityFor(want[i-1].rank, want[i-1].c)
		lo := PriorityFor(want[i].rank, want[i].c)
		if hi <= lo {
			t.Errorf("PriorityFor(%s) = %d, not above PriorityFor(%s) = %d", want[i-1].name, hi, want[i].name, lo)
		}
	}
	if got, floor := PriorityFor(0, Sheddable), Priority(100); got < floor {
		t.Errorf("lowest route priority = %d, want >= %d (0-99 is left for explicit priorities)", got, floor)
	}
	if got, ceil := PriorityFor(1000, Critical), Priority(399); got != ceil {
		t.Errorf("PriorityFor(1000, Critical) = %d, want %d (rank clamped, 400-499 left free)", got, ceil)
	}
	if got, want := PriorityFor(-5, Default), PriorityFor(0, Default); got != want {
		t.Errorf("PriorityFor(-5, Default) = %d, want %d", got, want)
	}
	if got, want := PriorityFor(3, Criticality(42)), PriorityFor(3, Default); got != want {
		t.Errorf("unknown criticality: got %d, want %d (Default)", got, want)
	}
}

func TestPriorityForStaysInRange(t *testing.T) {
	var all []int
	for _, c := range []Criticality{Sheddable, Default, Critical} {
		for _, rank := range []int{-1, 0, 50, 99, 100, 1 << 30} {
			p := PriorityFor(rank, c)
			if p < MinPriority || p > MaxPriority {
				t.Errorf("PriorityFor(%d, %v) = %d, outside [%d, %d]", rank, c, p, MinPriority, MaxPriority)
			}
			all = append(all, int(p))
		}
	}
	if !sort.IntsAreSorted(all) {
		t.Errorf("priorities not monotonic in (criticality, rank): %v", all)
	}
}

func TestCriticalityUnmarshalText(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Criticality
		wantErr bool
	}{
		{"critical", Critical, false},
		{"default", Default, false},
		{"", Default, false},
		{"sheddable", Sheddable, false},
		{"Critical", 0, true},
		{"high", 0, true},
		{"shed", 0, true},
		{" critical", 0, true},
	} {
		var c Criticality
		err := c.UnmarshalText([]byte(tc.in))
		if tc.wantErr {
			if err == nil {
				t.Errorf("UnmarshalText(%q) = %v, nil; want an error", tc.in, c)
			}
			continue
		}
		if err != nil || c != tc.want {
			t.Errorf("UnmarshalText(%q) = %v, %v; want %v, nil", tc.in, c, err, tc.want)
		}
		if text, _ := c.MarshalText(); tc.in != "" && string(text) != tc.in {
			t.Errorf("MarshalText(%v) = %q, want %q", c, text, tc.in)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		err     error
		wantErr string
	}{
		{"zero adaptive", AdaptiveConfig{}.Validate(), ""},
		{"fixed total", AdaptiveConfig{Min: 50, Max: 50, Initial: 50}.Validate(), ""},
		{"negative min", AdaptiveConfig{Min: -3}.Validate(), "shed: invalid config: adaptive.min: must be >= 1 (got -3)"},
		{"max below min", AdaptiveConfig{Min: 10, Max: 5}.Validate(), "shed: invalid config: adaptive.max: must be >= adaptive.min (10) (got 5)"},
		{"initial outside", AdaptiveConfig{Min: 1, Max: 10, Initial: 11}.Validate(), "shed: invalid config: adaptive.initial: must be in [adaptive.min, adaptive.max] = [1, 10] (got 11)"},
		{"negative latency", AdaptiveConfig{MaxLatency: -1}.Validate(), "shed: invalid config: adaptive.max_latency: must be > 0 (got -1ns)"},
		{"zero shedding", SheddingConfig{}.Validate(), ""},
		{"tiny interval", SheddingConfig{CalibrationInterval: 1}.Validate(), "shed: invalid config: shedding.calibration_interval: must be >= 1ms (got 1ns)"},
		{"retry below interval", SheddingConfig{CalibrationInterval: 2e9, MaxRetryAfter: 1e9}.Validate(), "shed: invalid config: shedding.max_retry_after: must be >= shedding.calibration_interval (2s) (got 1s)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.wantErr == "" {
				if tc.err != nil {
					t.Fatalf("Validate() = %v, want nil", tc.err)
				}
				return
			}
			if tc.err == nil || tc.err.Error() != tc.wantErr {
				t.Fatalf("Validate() = %v, want %q", tc.err, tc.wantErr)
			}
			if !errors.Is(tc.err, ErrInvalidConfig) {
				t.Errorf("Validate() = %v, does not wrap ErrInvalidConfig", tc.err)
			}
		})
	}
	if _, err := NewLimiter(AdaptiveConfig{Min: 0, Max: -1}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("NewLimiter(bad) error = %v, want ErrInvalidConfig", err)
	}
	if _, err := NewShedder(SheddingConfig{CalibrationInterval: -1}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("NewShedder(bad) error = %v, want ErrInvalidConfig", err)
	}
}

func TestConfigYAML(t *testing.T) {
	var got struct {
		Adaptive AdaptiveConfig `yaml:"adaptive"`
		Shedding SheddingConfig `yaml:"shedding"`
	}
	doc := "adaptive: {min: 2, max: 300, initial: 30, max_latency: 750ms}\nshedding: {calibration_interval: 2s, max_retry_after: 1m}\n"
	if err := yaml.Unmarshal([]byte(doc), &got); err != nil {
		t.Fatal(err)
	}
	if want := (AdaptiveConfig{Min: 2, Max: 300, Initial: 30, MaxLatency: 750 * time.Millisecond}); got.Adaptive != want {
		t.Errorf("adaptive = %+v, want %+v", got.Adaptive, want)
	}
	if want := (SheddingConfig{CalibrationInterval: 2 * time.Second, MaxRetryAfter: time.Minute}); got.Shedding != want {
		t.Errorf("shedding = %+v, want %+v", got.Shedding, want)
	}
}

func TestFloorFor(t *testing.T) {
	for _, tc := range []struct{ th, want Priority }{
		{0, 0}, {150, 100}, {204, 200}, {299, 200}, {300, 300}, {450, 300}, {MaxPriority, 300},
	} {
		if got := FloorFor(tc.th); got != tc.want {
			t.Errorf("FloorFor(%d) = %d, want %d", tc.th, got, tc.want)
		}
	}
}
