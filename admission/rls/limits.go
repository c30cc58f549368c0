package rls

import (
	"cmp"
	"fmt"
	"math"

	"google.golang.org/grpc"
)

// The defaults of Limits, and of Config.NearLimitRatio.
//
// Envoy sends one descriptor per rate_limits entry of the route and its
// virtual host that produced one, and one entry per action of that entry:
// configurations have a handful of each, rarely more than ten. The
// defaults are several times that, so no real configuration meets them,
// while a request cannot make the service match, key and charge thousands
// of descriptors, nor hold megabytes per call.
const (
	DefaultMaxDescriptors       = 64
	DefaultMaxEntries           = 32
	DefaultMaxRequestBytes      = 64 << 10
	DefaultMaxConcurrentStreams = 1024
	DefaultNearLimitRatio       = 0.8
)

// Limits bounds one call to the service and the gRPC server that serves
// it; the zero value of each field means its default. A call beyond
// MaxDescriptors or MaxEntries is InvalidArgument, one beyond
// MaxRequestBytes is refused by gRPC with ResourceExhausted: the message
// names the bound, and Envoy applies its failure_mode_deny.
type Limits struct {
	// MaxDescriptors bounds the descriptors of one request. Zero means
	// DefaultMaxDescriptors.
	MaxDescriptors int `yaml:"max_descriptors"`
	// MaxEntries bounds the entries of one descriptor. Zero means
	// DefaultMaxEntries.
	MaxEntries int `yaml:"max_entries"`
	// MaxRequestBytes bounds one request message, in bytes
	// (grpc.MaxRecvMsgSize). Zero means DefaultMaxRequestBytes. Raise it
	// when descriptors carry long values (whole URLs, tokens).
	MaxRequestBytes int `yaml:"max_request_bytes"`
	// MaxConcurrentStreams bounds the calls in flight on one HTTP/2
	// connection (grpc.MaxConcurrentStreams); Envoy opens another
	// connection or queues beyond it. Zero means
	// DefaultMaxConcurrentStreams.
	MaxConcurrentStreams uint32 `yaml:"max_concurrent_streams"`
}

// validate checks l; errors name the field under "rls.".
func (l Limits) validate() []error {
	var errs []error
	for _, f := range []struct {
		name string
		v    int
		def  int
	}{
		{"max_descriptors", l.MaxDescriptors, DefaultMaxDescriptors},
		{"max_entries", l.MaxEntries, DefaultMaxEntries},
		{"max_request_bytes", l.MaxRequestBytes, DefaultMaxRequestBytes},
	} {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("rls.%s: must be >= 0 (0 means %d)", f.name, f.def))
		}
	}
	if l.MaxRequestBytes > math.MaxInt32 {
		errs = append(errs, fmt.Errorf("rls.max_request_bytes: %d is more than gRPC takes (%d)", l.MaxRequestBytes, math.MaxInt32))
	}
	return errs
}

// withDefaults returns l with zero fields set to their defaults.
func (l Limits) withDefaults() Limits {
	l.MaxDescriptors = cmp.Or(l.MaxDescriptors, DefaultMaxDescriptors)
	l.MaxEntries = cmp.Or(l.MaxEntries, DefaultMaxEntries)
	l.MaxRequestBytes = cmp.Or(l.MaxRequestBytes, DefaultMaxRequestBytes)
	l.MaxConcurrentStreams = cmp.Or(l.MaxConcurrentStreams, DefaultMaxConcurrentStreams)
	return l
}

// serverOptions are the gRPC server's bounds of l (with its defaults),
// and its stream workers.
func (l Limits) serverOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.MaxRecvMsgSize(l.MaxRequestBytes), grpc.MaxConcurrentStreams(l.MaxConcurrentStreams),
		grpc.NumStreamWorkers(streamWorkers)}
}

// streamWorkers is how many goroutines the gRPC server keeps to run calls
// on. Without them each call runs on a new goroutine, whose stack grows,
// copied each time, to the depth of a Redis call (the store's pipeline,
// go-redis's writer) on every call: a worker keeps its grown stack. A call
// that finds every worker busy still runs at once, on a new goroutine.
// Idle, a worker is a parked goroutine with its stack, a few KiB.
const streamWorkers = 256
