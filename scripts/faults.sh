#!/usr/bin/env bash
# The fault suite against the real services: the long form by default,
# TESTENV_FAULTS=short for the form that runs in make test. Then the fuzz
# targets of the two parsers of outside input, FUZZTIME each.
set -euo pipefail
cd "$(dirname "$0")/.."
export TESTENV_FAULTS=${TESTENV_FAULTS:-full}
export TESTENV_FAULTS_OUT=${TESTENV_FAULTS_OUT:-$PWD/.services/faults}
fuzztime=${FUZZTIME:-60s}
trap 'scripts/services.sh stop' EXIT
services_env=$(scripts/services.sh start) # an assignment: a failed start stops here
eval "$services_env"
go test -count=1 -v -timeout 80m ./faults 2>&1 | tee "${TESTENV_SERVICES_DIR}/faults.log" | grep -E '^(=== RUN|--- |ok|FAIL|PASS)|faults_test.go'
for target in "FuzzParse ./tenants" "FuzzDecode ./event" "FuzzScanMatchesEncodingJSON ./event" "FuzzRFC3339 ./event" "FuzzDecodeMark ./erasure"; do
	set -- $target
	go test -run '^$' -fuzz "^$1\$" -fuzztime "$fuzztime" "$2" 2>&1 | tail -3
done
