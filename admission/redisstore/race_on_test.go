//go:build race

package redisstore

// raceEnabled is true when the race detector is on: timing-based checks
// loosen.
const raceEnabled = true
