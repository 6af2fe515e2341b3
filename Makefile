# The two commands of the README, and a few for development.
.PHONY: demo test test-kafka3 test-short lint services-start services-stop fuzz bench bench-scale faults release release-check

# The whole pipeline in one process: in-process Kafka and Bigtable emulator.
demo:
	go run ./cmd/worker demo

# Everything, against a real Kafka broker and the Bigtable emulator, which
# this starts and stops (first run fetches the Kafka jars from Maven Central).
test:
	scripts/test.sh

# The tests whose answer depends on the broker's version (each says so),
# against Kafka 3.9.1: make test runs everything against Kafka 4.x (CI
# runs both).
test-kafka3:
	scripts/test-kafka3.sh

# go vet, staticcheck, deadcode and actionlint at pinned versions (make test
# runs it).
lint:
	scripts/lint.sh

# Without services: in-process Kafka (kfake) and Bigtable (bttest).
test-short:
	go test -race ./...

services-start:
	scripts/services.sh start

services-stop:
	scripts/services.sh stop

# Fuzz the parsers of outside input for a while each (the ledger's marks
# are read by every worker).
FUZZTIME ?= 30s
fuzz:
	go test -run '^$$' -fuzz FuzzParse -fuzztime $(FUZZTIME) ./tenants
	go test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) ./event
	go test -run '^$$' -fuzz FuzzRFC3339 -fuzztime $(FUZZTIME) ./event
	go test -run '^$$' -fuzz FuzzDecodeMark -fuzztime $(FUZZTIME) ./erasure

# Per-event Go benchmarks, then the ceilings and the worker measured in one
# run against the real broker and emulator, with CPU per event and the
# latency decomposition (see BENCHMARKS.md).
BENCH_EVENTS ?= 300000
bench:
	go test -run '^$$' -bench . -benchmem ./event ./expiry ./pipeline ./sink
	scripts/bench.sh $(BENCH_EVENTS)

# One worker at scale: 48 partitions, 10,000 tenants, three event sizes.
bench-scale:
	scripts/bench.sh scale

# The fault suite in its long form, then each fuzz target for FUZZTIME
# (RELIABILITY.md). make test runs its short form.
faults:
	scripts/faults.sh

# The release binaries (linux/amd64, linux/arm64), their SBOMs, the image
# of both (image.tar, an OCI layout) and SHA256SUMS in dist/, without
# Docker; release-check builds twice in fresh caches and compares, the
# image's digest too (CI runs it).
release:
	scripts/release.sh dist

release-check:
	scripts/release.sh --check
