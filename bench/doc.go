// Package bench holds fairgate's overload benchmarks: load generation,
// scenarios and reports, run against the synthetic upstream of
// internal/demoapi, whose capacity is really limited (a pool of "database
// connections" and per-route service times).
//
// The plots' series are computed here, from per-request samples only this
// process holds, and written as plots-SCENARIO.json (package
// bench/plotdata); the bench/plots command draws them, so that the fairgate
// binary links no plotting library.
//
// The demo (`fairgate demo`) runs the same synthetic upstream behind the
// gateway, so an overload in the demo is a real overload.
package bench
