#!/usr/bin/env bash
# The release build, without Docker: the worker for linux/amd64 and
# linux/arm64, static (no cgo, no demo), each with its CycloneDX SBOM, and
# SHA256SUMS. Reproducible: the same commit and Go version give the same
# bytes, whatever the machine, directory or cache (-trimpath, no build id;
# the revision and the commit time come from git, not the clock).
#
#   scripts/release.sh [outdir]          build into outdir (default dist)
#   scripts/release.sh --check           build twice, in fresh caches, and compare
#
# The image is the binary on distroless (deploy/Dockerfile, or without a
# daemon: docs/operations.md, "Releases without Docker").
set -euo pipefail
cd "$(dirname "$0")/.."

sbom_tool=github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod@v1.10.0

build() {
	local out=$1
	mkdir -p "$out"
	for arch in amd64 arm64; do
		CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -tags nodemo -trimpath -buildvcs=true \
			-ldflags='-s -w -buildid=' -o "$out/worker-linux-$arch" ./cmd/worker
	done
	(cd "$out" && sha256sum worker-linux-* >SHA256SUMS)
}

if [ "${1:-}" = --check ]; then
	tmp=$(mktemp -d)
	trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
	# The second build gets a build cache of its own: a rebuild, not a
	# cache hit.
	build "$tmp/a"
	GOCACHE=$tmp/cache build "$tmp/b"
	if ! diff "$tmp/a/SHA256SUMS" "$tmp/b/SHA256SUMS"; then
		echo "release: two builds of the same commit differ" >&2
		exit 1
	fi
	echo "release: reproducible: $(tr '\n' ' ' <"$tmp/a/SHA256SUMS")"
	exit 0
fi

out=${1:-dist}
version=$(sed -n 's/^const Version = "\(.*\)"$/\1/p' internal/release/release.go)
build "$out"
for arch in amd64 arm64; do
	go run "$sbom_tool" bin -json -version "v$version" -output "$out/worker-linux-$arch.sbom.json" "$out/worker-linux-$arch"
done
echo "release $version: $(ls "$out" | tr '\n' ' ')"
