// Package ratelimit is the arithmetic of fairgate's rate layer and the
// types its stores share: a token bucket's quota (Limit), the name of a
// bucket (BucketKey), the answer to one take (Result), the Store interface
// the rate layer calls, and MemoryStore, the embedded store; and what a
// client is told of a bucket (QuotaState) and how the RateLimit header
// fields (IETF draft-ietf-httpapi-ratelimit-headers) spell it
// (AppendPolicy, AppendState), which the pipeline's answers and the rate
// limit service's share (fields.go).
//
// The bucket arithmetic is a pure function of the instant it is given, so
// tests and the fuzzer need no clock. The package imports no HTTP, tracing
// or metrics code: the Redis store (admission/redisstore), the pipeline
// (admission) and the rate limit service (admission/rls) import it, and the
// service imports neither of the others (a test holds that).
package ratelimit
