// Package bench holds fairgate's overload benchmarks: a synthetic upstream
// whose capacity is really limited (a pool of "database connections" and
// per-route service times), load generation, scenarios and reports.
//
// The demo (`fairgate demo`) runs the same synthetic upstream behind the
// gateway, so an overload in the demo is a real overload.
package bench
