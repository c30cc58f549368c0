package shed

import (
	"testing"
	"time"
)

// BenchmarkLimiterAcquireRecord is the adaptive layer's cost per request:
// TryAcquire and Record of one permit.
func BenchmarkLimiterAcquireRecord(b *testing.B) {
	l, err := NewLimiter(AdaptiveConfig{Min: 1, Max: 10000, Initial: 10000, MaxLatency: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			p, ok := l.TryAcquire()
			if !ok {
				continue
			}
			p.Record()
		}
	})
}

// BenchmarkShedderAdmit is the shed check's cost per request, while
// shedding part of the traffic.
func BenchmarkShedderAdmit(b *testing.B) {
	s, err := NewShedder(SheddingConfig{})
	if err != nil {
		b.Fatal(err)
	}
	s.state.Store(&shedState{threshold: PriorityFor(1, Default), reject: fracOne / 2, retryAfter: time.Second})
	prios := []Priority{PriorityFor(0, Sheddable), PriorityFor(1, Default), PriorityFor(2, Critical)}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			s.Admit(prios[i%len(prios)], 0)
			i++
		}
	})
}

// BenchmarkShedderObserve is the cost of reporting pressure on every
// request, calibrations included.
func BenchmarkShedderObserve(b *testing.B) {
	s, err := NewShedder(SheddingConfig{})
	if err != nil {
		b.Fatal(err)
	}
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var n int
		for pb.Next() {
			n++
			s.Observe(start.Add(time.Duration(n)*time.Microsecond), Pressure{Queued: n % 10, QueueCap: 40, Inflight: 20, Limit: 20, Completed: uint64(n)})
		}
	})
}
