#!/usr/bin/env bash
# The end-to-end benchmark: starts Kafka and the Bigtable emulator, and
# stops them after.
#
#   scripts/bench.sh [EVENTS]   (a) raw ApplyBulk, (b) raw kafka-go and (c) the
#                               worker (defaults, then tuned), CPU per event of
#                               each, then latency at half the maximum rate
#   scripts/bench.sh scale      one worker, 48 partitions, 10,000 tenants,
#                               events of 116 B, 1 KiB and 10 KiB
set -euo pipefail
cd "$(dirname "$0")/.."
trap 'scripts/services.sh stop' EXIT
services_env=$(scripts/services.sh start) # an assignment: a failed start stops here
eval "$services_env"
if [ "${1:-}" = scale ]; then
	# Fewer large events: the emulator holds every row in memory.
	for spec in "300000 0" "200000 908" "40000 10124"; do
		set -- $spec
		go run ./loadtest bench --events "$1" --payload-bytes "$2" --partitions 48 --tenant-count 10000
	done
	exit
fi
go run ./loadtest bench --events "${1:-200000}" --payload-bytes 0 --worker "" --worker "--writers 8 --flush-rows 2000" --latency 15s
