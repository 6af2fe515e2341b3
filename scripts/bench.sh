#!/usr/bin/env bash
# The end-to-end benchmark: starts Kafka and the Bigtable emulator, measures
# raw ApplyBulk, raw kafka-go consumption and the worker (defaults, then
# tuned) in one run, and stops the services.
set -euo pipefail
cd "$(dirname "$0")/.."
events=${1:-200000}
trap 'scripts/services.sh stop' EXIT
eval "$(scripts/services.sh start)"
go run ./loadtest bench --events "$events" --worker "" --worker "--writers 8 --flush-rows 2000"
