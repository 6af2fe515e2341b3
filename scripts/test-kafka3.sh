#!/usr/bin/env bash
# The Kafka 3.9 run: make test runs everything against Kafka 4.x; this runs
# again, against Kafka 3.9.1 (KRaft), the tests whose answer depends on the
# broker's version, and only those: each says so itself, first thing, with
# testenv.BrokerVersionMatters (scripts/brokertests lists them). They are
# the broker's Fetch, ListOffsets and group answers (ingest), topic settings
# and record timestamps (kafkaconn, the dead-letter topics, the retention
# facts), the contract's events end to end, the producers no one here wrote
# (Kafka's console and Java producers, 3.9's client), a Java consumer in
# the workers' group, and the fault scenarios of the broker and the group.
# docs/testing.md says why this subset.
#
# The package tests and the fault suite's run side by side, each against
# services of its own: the fault scenarios kill and restart their broker,
# and both mostly wait on brokers and timers.
set -euo pipefail
cd "$(dirname "$0")/.."

export TESTENV_KAFKA=3
services=${TESTENV_KAFKA3_SERVICES_DIR:-$PWD/.services-kafka3}
faults_services=${TESTENV_KAFKA3_FAULTS_SERVICES_DIR:-$PWD/.services-kafka3-faults}
tmp=$(mktemp -d)
stop_all() {
	TESTENV_SERVICES_DIR=$faults_services scripts/services.sh stop || true
	TESTENV_SERVICES_DIR=$services scripts/services.sh stop || true
	rm -rf "$tmp"
}
trap stop_all EXIT
# One after the other: the first fetches Kafka 3.9.1 into the cache.
TESTENV_SERVICES_DIR=$services scripts/services.sh start --no-registry >"$tmp/packages.env"
TESTENV_SERVICES_DIR=$faults_services scripts/services.sh start --no-registry >"$tmp/faults.env"

# The lists first, each its own step, so that a failure to make one stops
# the run (brokertests -run fails when it finds no test: a run of none
# would pass unseen).
pkgs=$(go list -f '{{.Dir}}' ./... | sed "s|^$PWD/|./|" | grep -vx ./faults)
# shellcheck disable=SC2086
run=$(go run ./scripts/brokertests -run $pkgs)
# shellcheck disable=SC2086
dirs=$(go run ./scripts/brokertests -dirs $pkgs)
faults=$(go run ./scripts/brokertests -run ./faults)

(
	# shellcheck disable=SC1091
	. "$tmp/faults.env"
	export TESTENV_SERVICES_DIR=$faults_services TESTENV_FAULTS=short
	echo "the Kafka 3 fault suite against Kafka $TESTENV_KAFKA_VERSION at $KAFKA_BROKERS and the Bigtable emulator at $BIGTABLE_EMULATOR_HOST"
	go test -count=1 -timeout 30m -run "$faults" ./faults
) >"$tmp/faults.log" 2>&1 &
faults_run=$!

status=0
(
	# shellcheck disable=SC1091
	. "$tmp/packages.env"
	export TESTENV_SERVICES_DIR=$services
	echo "the Kafka 3 run against Kafka $TESTENV_KAFKA_VERSION at $KAFKA_BROKERS and the Bigtable emulator at $BIGTABLE_EMULATOR_HOST" >&2
	# shellcheck disable=SC2086
	go test -race -count=1 -timeout 20m -p 2 -parallel 4 -run "$run" $dirs
) || status=1
wait $faults_run || status=1
cat "$tmp/faults.log"
exit $status
