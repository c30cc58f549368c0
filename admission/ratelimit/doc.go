// Package ratelimit is the arithmetic of fairgate's rate layer and the
// types its stores share: a token bucket's quota (Limit), the name of a
// bucket (BucketKey), the answer to one take (Result), the Store interface
// the rate layer calls, and MemoryStore, the embedded store.
//
// The bucket arithmetic is a pure function of the instant it is given, so
// tests and the fuzzer need no clock. The package imports no HTTP, tracing
// or metrics code: the Redis store (admission/redisstore) and the pipeline
// (admission) both import it, and neither imports the other.
package ratelimit
