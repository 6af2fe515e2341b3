#!/usr/bin/env bash
# A rolling restart of a group of workers under steady load, for each build
# given, one after the other (RELIABILITY.md, "Rolling restarts"); against
# the services already running (KAFKA_BROKERS, BIGTABLE_EMULATOR_HOST).
#
#   scripts/rollout.sh COMMIT...   build the worker of each commit, then
#                                  `loadtest rollout` with each build
#   ROLLOUT_MAX_LOAD=1.5           first wait, up to 40 minutes, for the
#                                  1-minute load average to fall below this
#   ROLLOUT_FLAGS="..."            more `loadtest rollout` flags, e.g.
#                                  "--workers 2 --partitions 4 --rate 200"
#
# The harness is this checkout's for every build, so that builds from
# before it are measured the same way.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -eq 0 ]; then
	echo "usage: scripts/rollout.sh COMMIT..." >&2
	exit 2
fi
if [ -z "${KAFKA_BROKERS:-}" ] || [ -z "${BIGTABLE_EMULATOR_HOST:-}" ]; then
	echo 'rollout.sh needs KAFKA_BROKERS and BIGTABLE_EMULATOR_HOST: eval "$(scripts/services.sh start)" first' >&2
	exit 2
fi
bins=$(mktemp -d)
trap 'rm -rf "$bins"' EXIT
# Everything is built before the wait for a quiet machine: the builds
# would load it themselves.
shas=()
for c in "$@"; do
	sha=$(git rev-parse --short "$c^{commit}")
	mkdir -p "$bins/src-$sha"
	git archive "$sha" | tar -x -C "$bins/src-$sha"
	(cd "$bins/src-$sha" && go build -o "$bins/worker-$sha" ./cmd/worker)
	shas+=("$sha")
done
go build -o "$bins/loadtest" ./loadtest
if [ -n "${ROLLOUT_MAX_LOAD:-}" ]; then
	for _ in $(seq 40); do
		load=$(cut -d' ' -f1 /proc/loadavg)
		if awk -v l="$load" -v m="$ROLLOUT_MAX_LOAD" 'BEGIN { exit !(l < m) }'; then
			break
		fi
		echo "$(date -u +%H:%M:%S) load average $load, not below $ROLLOUT_MAX_LOAD: waiting" >&2
		sleep 60
	done
	echo "$(date -u +%H:%M:%S) load average $(cut -d' ' -f1 /proc/loadavg) at the start" >&2
fi
for sha in "${shas[@]}"; do
	echo "== worker built from $sha ($(git log -1 --format=%s "$sha" | cut -c1-80))"
	# shellcheck disable=SC2086 # ROLLOUT_FLAGS is a list of flags
	"$bins/loadtest" rollout --worker-bin "$bins/worker-$sha" ${ROLLOUT_FLAGS:-}
done
