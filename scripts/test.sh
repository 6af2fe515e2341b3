#!/usr/bin/env bash
# The full test suite against the real services: starts Apache Kafka, the
# Bigtable emulator and the schema registry (scripts/services.sh), runs the
# lint, every package's tests with the race detector, the allocation checks
# and the short form of the fault suite, and stops the services whatever
# happens.
#
# The fault suite kills its broker, so it gets services of its own
# (.services-faults: Kafka and the emulator, no registry) and runs beside
# the package tests instead of after them: both spend most of their time
# waiting on brokers, workers and timers, not on the cores. The services
# start in the background while the lint runs. docs/testing.md says where
# the time goes.
set -euo pipefail
cd "$(dirname "$0")/.."

export TESTENV_SERVICES_DIR=${TESTENV_SERVICES_DIR:-$PWD/.services}
faults_dir=${TESTENV_FAULTS_SERVICES_DIR:-$PWD/.services-faults}

# promtool checks and unit-tests the alert rules (deploy/alerts): Debian's
# prometheus package has it.
if ! command -v promtool >/dev/null; then
	sudo=""
	[ "$(id -u)" = 0 ] || sudo=sudo
	export DEBIAN_FRONTEND=noninteractive
	$sudo apt-get install -y --no-install-recommends prometheus >/dev/null 2>&1 ||
		{ $sudo apt-get update >/dev/null && $sudo apt-get install -y --no-install-recommends prometheus >/dev/null; }
fi
export TESTENV_REQUIRE_PROMTOOL=1

tmp=$(mktemp -d)
stop_all() {
	TESTENV_SERVICES_DIR=$faults_dir scripts/services.sh stop || true
	scripts/services.sh stop || true
	rm -rf "$tmp"
}
trap stop_all EXIT

# The package tests' services first (they fetch what both need into the
# cache), then the fault suite's, all while the lint runs.
(
	scripts/services.sh start >"$tmp/services.env"
	TESTENV_SERVICES_DIR=$faults_dir scripts/services.sh start --no-registry >"$tmp/faults.env"
) &
services=$!
scripts/lint.sh # gofmt included
# A start that failed stops the run here, saying which step it was.
if ! wait $services; then
	echo "test.sh: the services did not start (scripts/services.sh's log above)" >&2
	exit 1
fi

# The fault suite, in the background on its own services.
(
	# shellcheck disable=SC1091
	. "$tmp/faults.env"
	export TESTENV_SERVICES_DIR=$faults_dir
	echo "fault suite against Kafka at $KAFKA_BROKERS and the Bigtable emulator at $BIGTABLE_EMULATOR_HOST" >&2
	TESTENV_FAULTS=short go test -count=1 -timeout 40m ./faults
) >"$tmp/faults.log" 2>&1 &
faults=$!

# shellcheck disable=SC1091
. "$tmp/services.env"
echo "testing against Kafka at $KAFKA_BROKERS and the Bigtable emulator at $BIGTABLE_EMULATOR_HOST" >&2
status=0
go test -race -count=1 -timeout 30m "$@" ./... || status=1
# Allocation counts mean something only without the race detector.
go test -count=1 -run 'Alloc' ./event ./rowkey ./pipeline || status=1
wait $faults || status=1
cat "$tmp/faults.log"
exit $status
