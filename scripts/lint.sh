#!/usr/bin/env bash
# gofmt, go vet, staticcheck, deadcode and actionlint, at pinned versions:
# the first run downloads them from the module proxy.
#
# go vet and staticcheck read the packages as the race detector builds
# them (-race): that is the build `go test -race` runs, so the compiling
# they need is done once for the lint and the tests. (The few test files
# of the other build, the allocation checks, are compiled and run by
# make test without the race detector.)
set -euo pipefail
cd "$(dirname "$0")/.."
unformatted=$(gofmt -l $(git ls-files '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change: $unformatted" >&2
	exit 1
fi
go vet -race ./...
go vet -race -tags nodemo ./cmd/worker
# staticcheck itself is built without the race detector (go run would
# build it with GOFLAGS), then reads the packages with it.
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
GOBIN=$bin go install honnef.co/go/tools/cmd/staticcheck@v0.8.2
GOFLAGS=-race "$bin/staticcheck" ./...
# deadcode reports what no main reaches. testkit/testenv and sink/sinktest
# are for tests by design, so they are left out; anything else is dead, or
# exported for tests alone.
dead=$(go run golang.org/x/tools/cmd/deadcode@v0.52.0 ./... | grep -Ev '^(testkit/testenv|sink/sinktest)/' || true)
if [ -n "$dead" ]; then
	echo "deadcode: unreachable from any command:" >&2
	echo "$dead" >&2
	exit 1
fi
# actionlint checks the workflows (.github/workflows), and their run:
# blocks with shellcheck when it is on PATH (Debian's shellcheck package:
# scripts/test.sh installs it, and requires it).
GOBIN=$bin go install github.com/rhysd/actionlint/cmd/actionlint@v1.7.12
if ! command -v shellcheck >/dev/null; then
	if [ -n "${TESTENV_REQUIRE_SHELLCHECK:-}" ]; then
		echo "lint: no shellcheck on PATH, and TESTENV_REQUIRE_SHELLCHECK is set" >&2
		exit 1
	fi
	echo "lint: no shellcheck on PATH: actionlint checks the workflows' run: blocks without it" >&2
fi
"$bin/actionlint"
echo "lint: clean"
