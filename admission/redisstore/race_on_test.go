//go:build race

package redisstore

// raceDetector reports whether the tests run with the race detector, which
// makes this process several times slower than the product it tests.
const raceDetector = true
