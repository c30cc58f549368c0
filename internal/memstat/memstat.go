// Package memstat reads the process's memory for the bounded-resource
// tests: the live heap after a full collection, and the resident set size.
package memstat

import (
	"fmt"
	"os"
	"runtime"
)

// HeapAlloc returns the bytes of live heap objects after two full
// collections (the second picks up what the first's finalizers freed).
func HeapAlloc() int64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// RSS returns the process's resident set size in bytes, from
// /proc/self/statm; 0 where there is no /proc.
func RSS() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	var size, resident int64
	if _, err := fmt.Sscan(string(b), &size, &resident); err != nil {
		return 0
	}
	return resident * int64(os.Getpagesize())
}
