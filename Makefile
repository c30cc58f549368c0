# fairgate — `make test` is the README's test command and what CI runs.
GO      ?= go
FUZZTIME ?= 3s

.PHONY: test vet unit fuzz-short build bench deps

# vet, the race-enabled test suite against real redis-server processes and a
# real Jaeger (both installed or built by .ci/deps.sh when missing), and each
# fuzz target for a few seconds.
test: vet unit fuzz-short

vet:
	$(GO) vet ./...

unit:
	@jaeger=$$(.ci/deps.sh) && \
	FAIRGATE_REQUIRE_REDIS=1 FAIRGATE_JAEGER="$$jaeger" $(GO) test -race -count=1 -timeout 15m ./...

# Each fuzz target briefly (seconds). Run one longer with e.g.
#   go test -run '^$$' -fuzz '^FuzzBucket$$' -fuzztime 10m ./admission/ratelimit
fuzz-short:
	$(GO) test -run '^$$' -fuzz '^FuzzBucket$$' -fuzztime $(FUZZTIME) ./admission/ratelimit
	$(GO) test -run '^$$' -fuzz '^FuzzTakeAll$$' -fuzztime $(FUZZTIME) ./admission/ratelimit
	$(GO) test -run '^$$' -fuzz '^FuzzRateLimitHeaders$$' -fuzztime $(FUZZTIME) ./admission
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./admission/gateway
	$(GO) test -run '^$$' -fuzz '^FuzzExtractKey$$' -fuzztime $(FUZZTIME) ./tenant

build:
	$(GO) build -o bin/fairgate ./cmd/fairgate

# Microbenchmarks of every hot path.
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

deps:
	.ci/deps.sh
