#!/usr/bin/env bash
# The full test suite against the real services: starts Apache Kafka and the
# Bigtable emulator (scripts/services.sh), runs every package's tests with
# the race detector, and stops the services whatever happens.
set -euo pipefail
cd "$(dirname "$0")/.."

export TESTENV_SERVICES_DIR=${TESTENV_SERVICES_DIR:-$PWD/.services}

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
trap 'scripts/services.sh stop' EXIT
# An assignment, so that a failed start stops the run here (an eval of a
# failed command substitution would go on without the services).
services_env=$(scripts/services.sh start)
eval "$services_env"
echo "testing against Kafka at $KAFKA_BROKERS and the Bigtable emulator at $BIGTABLE_EMULATOR_HOST" >&2

scripts/lint.sh # gofmt included
go test -race -count=1 -timeout 30m "$@" ./...
# Allocation counts mean something only without the race detector.
go test -count=1 -run 'Alloc' ./event ./rowkey ./pipeline
# The fault suite kills the broker: it runs alone, after the rest.
TESTENV_FAULTS=short go test -count=1 -timeout 40m ./faults
