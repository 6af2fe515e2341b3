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
set -euo pipefail
cd "$(dirname "$0")/.."

export TESTENV_KAFKA=3
export TESTENV_SERVICES_DIR=${TESTENV_KAFKA3_SERVICES_DIR:-$PWD/.services-kafka3}
trap 'scripts/services.sh stop || true' EXIT
env_file=$(mktemp)
scripts/services.sh start --no-registry >"$env_file"
# shellcheck disable=SC1090
. "$env_file"
rm -f "$env_file"
echo "the Kafka 3 run against Kafka $TESTENV_KAFKA_VERSION at $KAFKA_BROKERS and the Bigtable emulator at $BIGTABLE_EMULATOR_HOST" >&2

# Every package's tests but the fault suite's in one run, then the fault
# suite's, last: its scenarios kill and restart their broker. Each list is
# its own step, so that a failure to make one stops the run (brokertests
# -run fails when it finds no test: a run of none would pass unseen).
pkgs=$(go list -f '{{.Dir}}' ./... | sed "s|^$PWD/|./|" | grep -vx ./faults)
# shellcheck disable=SC2086
run=$(go run ./scripts/brokertests -run $pkgs)
# shellcheck disable=SC2086
dirs=$(go run ./scripts/brokertests -dirs $pkgs)
faults=$(go run ./scripts/brokertests -run ./faults)
status=0
# shellcheck disable=SC2086
go test -race -count=1 -timeout 20m -p 2 -parallel 4 -run "$run" $dirs || status=1
TESTENV_FAULTS=short go test -count=1 -timeout 30m -run "$faults" ./faults || status=1
exit $status
