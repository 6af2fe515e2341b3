#!/usr/bin/env bash
# gofmt, go vet, staticcheck and deadcode, at pinned versions, through go
# run: the first run downloads them from the module proxy.
set -euo pipefail
cd "$(dirname "$0")/.."
unformatted=$(gofmt -l $(git ls-files '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change: $unformatted" >&2
	exit 1
fi
go vet ./...
go vet -tags nodemo ./cmd/worker
go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
# deadcode reports what no main reaches. internal/testenv is for tests by
# design, so it is left out; anything else is dead, or exported for tests
# alone.
dead=$(go run golang.org/x/tools/cmd/deadcode@v0.52.0 ./... | grep -v '^internal/testenv/' || true)
if [ -n "$dead" ]; then
	echo "deadcode: unreachable from any command:" >&2
	echo "$dead" >&2
	exit 1
fi
echo "lint: clean"
