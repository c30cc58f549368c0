package gateway

import (
	"math"
	"strings"
	"testing"
)

func TestServerGC(t *testing.T) {
	env := func(kv ...string) func(string) string {
		return func(k string) string {
			for i := 0; i < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1]
				}
			}
			return ""
		}
	}
	for _, tc := range []struct {
		name string
		cfg  ServerConfig
		env  func(string) string
		want GCSettings
	}{
		{"defaults", ServerConfig{}, env(), GCSettings{DefaultGCPercent, math.MaxInt64}},
		{"config", ServerConfig{GCPercent: 200, MemoryLimit: 1 << 30}, env("GOGC", "50", "GOMEMLIMIT", "1MiB"), GCSettings{200, 1 << 30}},
		{"environment", ServerConfig{}, env("GOGC", "150", "GOMEMLIMIT", "512MiB"), GCSettings{150, 512 << 20}},
		{"environment off", ServerConfig{}, env("GOGC", "off", "GOMEMLIMIT", "off"), GCSettings{-1, math.MaxInt64}},
		{"environment in bytes", ServerConfig{}, env("GOMEMLIMIT", "1000000B"), GCSettings{DefaultGCPercent, 1000000}},
		{"environment bare number", ServerConfig{}, env("GOMEMLIMIT", "2000000"), GCSettings{DefaultGCPercent, 2000000}},
		{"environment not valid", ServerConfig{}, env("GOGC", "lots", "GOMEMLIMIT", "2GB"), GCSettings{DefaultGCPercent, math.MaxInt64}},
		{"environment too large", ServerConfig{}, env("GOMEMLIMIT", "9999999999TiB"), GCSettings{DefaultGCPercent, math.MaxInt64}},
	} {
		if got := tc.cfg.GC(tc.env); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestServerGCValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  ServerConfig
		want string // "" = valid
	}{
		{ServerConfig{}, ""},
		{ServerConfig{GCPercent: 400, MemoryLimit: 1 << 30}, ""},
		{ServerConfig{GCPercent: -1, MemoryLimit: 1 << 30}, ""},
		{ServerConfig{GCPercent: -1}, "server.gc_percent: -1 (collector off) needs server.memory_limit"},
		{ServerConfig{GCPercent: -2}, "server.gc_percent: must be"},
		{ServerConfig{GCPercent: 10001}, "server.gc_percent: must be"},
		{ServerConfig{MemoryLimit: 1 << 20}, "server.memory_limit: must be 0 (none) or at least"},
		{ServerConfig{MemoryLimit: -1}, "server.memory_limit: must be 0 (none) or at least"},
	} {
		errs := tc.cfg.validateGC()
		switch {
		case tc.want == "" && len(errs) > 0:
			t.Errorf("%+v: %v, want valid", tc.cfg, errs)
		case tc.want != "" && (len(errs) != 1 || !strings.Contains(errs[0].Error(), tc.want)):
			t.Errorf("%+v: %v, want one error with %q", tc.cfg, errs, tc.want)
		}
	}
}
