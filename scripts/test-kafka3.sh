#!/usr/bin/env bash
# The Kafka 3.9 subset of the suite: make test runs everything against
# Kafka 4.x; this runs, against Kafka 3.9.1 (KRaft), what reads the broker's
# own behaviour, where the two differ or might: the record-batch reader and
# transactions (ingest), topic settings and record timestamps (kafkaconn,
# the dead-letter topics, the retention facts), the contract's events end
# to end through the worker, the producers no one here wrote (Kafka's
# console and Java producers, 3.9's client), a Java consumer in the
# workers' group, and the fault suite's short form. docs/testing.md says why this subset.
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
echo "the Kafka 3 subset against Kafka $TESTENV_KAFKA_VERSION at $KAFKA_BROKERS and the Bigtable emulator at $BIGTABLE_EMULATOR_HOST" >&2

status=0
go test -race -count=1 -timeout 20m -p 2 ./ingest/... ./internal/kafkaconn ./deadletter ./retention/... || status=1
go test -race -count=1 -timeout 20m -parallel 4 ./cmd/worker \
	-run 'Contract|Transaction|Retention|Stamp|Timestamp|IndependentProducer|JavaProducer|JavaConsumer|Erasure|DeadLetterTopics' || status=1
# Last: it kills and restarts its broker. The scenarios that hold a worker
# to its memory bound first, alone, as scripts/test.sh runs them.
bounds='^(TestMemoryUnderBacklog|TestStuckOffsetMemory|TestBigtableFaults|TestCompressedBatchesPastTheBound|TestGCRuleChangedUnderWorkers)$'
export TESTENV_FAULTS=short
go test -count=1 -timeout 20m -run "$bounds" ./faults || status=1
go test -count=1 -timeout 30m -skip "$bounds" ./faults || status=1
exit $status
