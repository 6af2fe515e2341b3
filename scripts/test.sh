#!/usr/bin/env bash
# The full test suite against the real services: starts Apache Kafka, the
# Bigtable emulator, the schema registry and a Kubernetes API server
# (scripts/services.sh), runs the lint, every package's tests with the race
# detector, the allocation checks and the short form of the fault suite,
# and stops the services whatever happens. docs/testing.md says where the
# time goes.
#
# The fault suite kills its broker, so it gets services of its own
# (.services-faults: Kafka and the emulator, no registry) and runs beside
# the rest from the moment they answer: the tests mostly wait on brokers,
# workers and timers, the lint and the compiler keep the cores busy. The
# lint and the package tests run at a lower priority, so that the fault
# suite's scenarios that hold a worker to its memory bound, first in line,
# get the cores they would have alone.
set -euo pipefail
cd "$(dirname "$0")/.."

export TESTENV_SERVICES_DIR=${TESTENV_SERVICES_DIR:-$PWD/.services}
faults_dir=${TESTENV_FAULTS_SERVICES_DIR:-$PWD/.services-faults}
kube_services=${TESTENV_KUBE_SERVICES_DIR:-$PWD/.services-kube}

# promtool checks and unit-tests the alert rules (deploy/alerts): Debian's
# prometheus package has it.
sudo=""
[ "$(id -u)" = 0 ] || sudo=sudo
export DEBIAN_FRONTEND=noninteractive
if ! command -v promtool >/dev/null; then
	$sudo apt-get install -y --no-install-recommends prometheus >/dev/null 2>&1 ||
		{ $sudo apt-get update >/dev/null && $sudo apt-get install -y --no-install-recommends prometheus >/dev/null; }
fi
export TESTENV_REQUIRE_PROMTOOL=1
# The lint's actionlint reads the workflows' run: blocks with shellcheck.
if ! command -v shellcheck >/dev/null; then
	$sudo apt-get install -y --no-install-recommends shellcheck >/dev/null 2>&1 ||
		{ $sudo apt-get update >/dev/null && $sudo apt-get install -y --no-install-recommends shellcheck >/dev/null; }
fi
export TESTENV_REQUIRE_SHELLCHECK=1

# Each step says when it ended, in seconds from the start (docs/testing.md
# has the figures of fresh clones).
step() { echo "test.sh: $1 at ${SECONDS} s" >&2; }
tmp=$(mktemp -d)
stop_all() {
	# A start still under way first, so that it starts nothing after.
	[ -z "${kube:-}" ] || kill "$kube" 2>/dev/null || true
	TESTENV_SERVICES_DIR=$kube_services scripts/services.sh stop || true
	TESTENV_SERVICES_DIR=$faults_dir scripts/services.sh stop || true
	scripts/services.sh stop || true
	rm -rf "$tmp"
}
trap stop_all EXIT

# The Kubernetes API server of the deploy tests, first and in the
# background: a fresh cache builds kube-apiserver for minutes, which the
# deploy package's test waits for and nothing else does. Its own
# directory, as the fault suite's: the other services' start clears
# theirs. services.sh builds it at the lowest priority, so that it takes
# the CPU the suite leaves while it waits on services.
export TESTENV_KUBE_DIR=$kube_services/kube TESTENV_REQUIRE_KUBE=1
(
	TESTENV_SERVICES_DIR=$kube_services scripts/services.sh kube-start
	step "the Kubernetes API server started"
) >"$tmp/kube.log" 2>&1 &
kube=$!

# The scenarios that hold a worker's peak RSS to its bound: measured while
# nothing else competes at the same priority.
bounds='^(TestMemoryUnderBacklog|TestStuckOffsetMemory|TestBigtableFaults|TestCompressedBatchesPastTheBound|TestGCRuleChangedUnderWorkers)$'

# In the background: the services (the package tests' first, which fetch
# what both need into the cache), then the fault suite, then the
# allocation checks without the race detector (counts mean something only
# there).
(
	scripts/services.sh start >"$tmp/services.env"
	step "services started"
	touch "$tmp/services.ready"
	TESTENV_SERVICES_DIR=$faults_dir scripts/services.sh start --no-registry >"$tmp/faults.env"
	step "the fault suite's services started"
	# The fault suite compiles once the lint's vet has built the race
	# objects it shares: two go commands building the same packages at
	# once each build them.
	until [ -f "$tmp/linted" ]; do
		[ -d "$tmp" ] || exit 1 # the lint failed: test.sh is gone
		sleep 1
	done
	status=0
	(
		# shellcheck disable=SC1091
		. "$tmp/faults.env"
		export TESTENV_SERVICES_DIR=$faults_dir TESTENV_FAULTS=short
		echo "fault suite against Kafka at $KAFKA_BROKERS and the Bigtable emulator at $BIGTABLE_EMULATOR_HOST"
		go test -count=1 -timeout 20m -run "$bounds" ./faults || status=1
		step "the fault suite's memory-bound scenarios ended"
		go test -count=1 -timeout 30m -skip "$bounds" ./faults || status=1
		step "the fault suite ended"
		exit $status
	) || status=1
	go test -count=1 -run 'Alloc' ./event ./rowkey ./pipeline ./internal/waitfor || status=1
	step "the allocation checks ended"
	exit $status
) >"$tmp/background.log" 2>&1 &
background=$!

nice -n 10 scripts/lint.sh # gofmt included
step "the lint ended"
touch "$tmp/linted"

until [ -f "$tmp/services.ready" ]; do
	if ! kill -0 $background 2>/dev/null; then
		cat "$tmp/background.log" >&2
		echo "test.sh: the services did not start" >&2
		exit 1
	fi
	sleep 1
done
# shellcheck disable=SC1091
. "$tmp/services.env"
echo "testing against Kafka at $KAFKA_BROKERS and the Bigtable emulator at $BIGTABLE_EMULATOR_HOST" >&2
status=0
# Test binaries mostly wait on brokers, workers and timers: four run at
# once, and four tests of a package.
# Below the fault suite's priority too, as the lint.
nice -n 10 go test -race -count=1 -timeout 30m -p 4 -parallel 4 "$@" ./... || status=1
step "the package tests ended"
wait $background || status=1
cat "$tmp/background.log"
wait $kube || { cat "$tmp/kube.log"; status=1; }
grep -h "^test.sh: " "$tmp/kube.log" >&2 || true
exit $status
