# fairgate — `make test` is the README's test command and what CI runs.
GO      ?= go

.PHONY: test vet unit fuzz-short build bench bench-throughput bench-flood bench-deps deps

# vet, the race-enabled test suite against real redis-server processes, a
# real Jaeger and Prometheus's promtool (installed or built by .ci/deps.sh
# when missing), and each fuzz target for a few seconds.
test: vet unit fuzz-short

# go.mod must be tidy: every module used listed directly, none unused;
# and the tree builds on macOS and Windows as well as Linux.
vet:
	$(GO) mod tidy -diff
	$(GO) vet ./...
	GOOS=darwin $(GO) build ./...
	GOOS=windows $(GO) build ./...

# The gateway's tests run a second time on the fasthttp engine
# (server.engine: fasthttp; net/http is the default): every hostile-input,
# contract and hygiene test must pass on whichever stack serves. The
# conformance suite (admission/gateway/conformance_test.go) runs every
# engine itself. The allocation tests (allocs_test.go) run apart, without
# the race detector, whose sync.Pool drops items at random.
unit:
	@jaeger=$$(.ci/deps.sh) && \
	FAIRGATE_REQUIRE_REDIS=1 FAIRGATE_REQUIRE_PROMETHEUS=1 FAIRGATE_JAEGER="$$jaeger" $(GO) test -race -count=1 -timeout 15m ./... && \
	FAIRGATE_TEST_ENGINE=fasthttp FAIRGATE_REQUIRE_REDIS=1 FAIRGATE_JAEGER="$$jaeger" $(GO) test -race -count=1 -timeout 5m ./admission/gateway/ && \
	$(GO) test -count=1 -run 'Allocs' ./admission/ ./admission/gateway/

# Each fuzz target briefly: a count of inputs, about 3 s each on the 2-vCPU VM.
# A count, not a duration: with a duration, go1.26's fuzz coordinator can
# fail a target with a bare "context deadline exceeded" as the time runs out
# (golang/go#75804, fixed in go1.27), and a count has no deadline to race.
# FUZZTIME overrides every count, e.g. make fuzz-short FUZZTIME=10m, or run
# one target longer with
#   go test -run '^$$' -fuzz '^FuzzBucket$$' -fuzztime 10m ./admission/ratelimit
FUZZTIME ?=
fuzz = $(GO) test -run '^$$' -fuzz '^$(1)$$' -fuzztime $(or $(FUZZTIME),$(2)) $(3)
fuzz-short:
	$(call fuzz,FuzzBucket,300000x,./admission/ratelimit)
	$(call fuzz,FuzzTakeAll,20000x,./admission/ratelimit)
	$(call fuzz,FuzzRateLimitHeaders,40000x,./admission)
	$(call fuzz,FuzzAppendJSONString,40000x,./admission)
	$(call fuzz,FuzzParse,5000x,./admission/gateway)
	$(call fuzz,FuzzExtractKey,200000x,./tenant)
	$(call fuzz,FuzzParseRules,5000x,./admission/rls)
	$(call fuzz,FuzzShouldRateLimit,15000x,./admission/rls)
	$(call fuzz,FuzzRateLimitField,10000x,./client)
	$(call fuzz,FuzzRead,20000x,./internal/proxyproto)

# The differential test against envoyproxy/ratelimit, not part of test (CI
# has no copy of it): ERL_BIN=PATH (its service_cmd) and fairgate's rls run
# the same call sequences on one redis-server over ERL's own configs (from
# ERL_SRC, by default the source tree ERL_BIN was built from), and it fails
# on any difference docs/envoy.md does not state. ERL_DIFF_OUT=FILE keeps
# the full report.
.PHONY: erl-diff
erl-diff:
	@test -n "$(ERL_BIN)" || { echo "make erl-diff: set ERL_BIN to envoyproxy/ratelimit's service_cmd" >&2; exit 2; }
	FAIRGATE_REQUIRE_REDIS=1 ERL_BIN="$(ERL_BIN)" $(GO) test -count=1 -v -run '^TestERLDiff$$' -timeout 20m ./admission/rls/

build:
	$(GO) build -o bin/fairgate ./cmd/fairgate

# Microbenchmarks of every hot path.
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# Proxied req/s, 429s/s and CPU per request of each server on one core,
# interleaved rounds at -c8 and -c64, wrk the load generator on the other
# core (make bench-deps installs it; bench/PERF.md).
bench-throughput: build
	bin/fairgate bench --scenario throughput --generator wrk --rounds 3 --duration 5s --out bench-out

# The flood rounds alone: an innocent tenant's p99 on the demo config, quiet
# and during an 8,000/s flood of one over-quota key (bench/PERF.md).
bench-flood: build
	bin/fairgate bench --scenario throughput --rounds 3 --modes fairgate-flood,fairgate-fasthttp-flood,nginx-flood --out bench-out/flood

# The external servers the throughput scenario compares with (Debian
# packages), installed when missing.
bench-deps:
	@for p in wrk nginx haproxy; do command -v $$p >/dev/null || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then $$([ "$$(id -u)" = 0 ] || echo sudo) apt-get install -y $$missing; fi

deps:
	.ci/deps.sh
