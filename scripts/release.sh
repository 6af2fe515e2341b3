#!/usr/bin/env bash
# The release build, without Docker: the worker for linux/amd64 and
# linux/arm64, static (no cgo, no demo), each with its CycloneDX SBOM, and
# SHA256SUMS. Reproducible: the same commit and Go version give the same
# bytes, whatever the machine, directory or cache (-trimpath, no build id;
# the revision and the commit time come from git, not the clock).
#
#   scripts/release.sh [outdir]          build into outdir (default dist)
#   scripts/release.sh --check           build twice, in fresh caches, and compare
#   scripts/release.sh --source REV OUT  the worker's source at REV (a tag), as
#                                        a tar.gz (OUT relative to the repository's
#                                        top): what the upgrade test builds the
#                                        previous release from
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

# source REV OUT writes the files the worker is built from at REV (go.mod,
# go.sum, the non-test Go and embedded files of the module's packages it
# imports with the default build tags, and their files that other tags
# select) as a tar.gz. The upgrade test builds the
# previous release from it, so it needs no tags or history in the clone:
# CI's clone has neither.
source_archive() {
	local rev=$1 out=$2 files
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	git archive "$rev" | tar -x -C "$tmp"
	files=$(cd "$tmp" && go list -deps -f '{{if and .Module .Module.Main}}{{$d := .Dir}}{{range .GoFiles}}{{$d}}/{{.}}
{{end}}{{range .IgnoredGoFiles}}{{$d}}/{{.}}
{{end}}{{range .EmbedFiles}}{{$d}}/{{.}}
{{end}}{{end}}' ./cmd/worker | sed "s|^$tmp/||" | sort -u)
	rm -rf "$tmp"
	# git archive stamps every file with the commit's time, and gzip -n
	# leaves out the name and time: the same REV gives the same bytes.
	# shellcheck disable=SC2086
	git archive --format=tar "$rev" -- go.mod go.sum $files | gzip -9n >"$out"
	echo "release: the worker's source at $rev ($(echo "$files" | wc -l) files) in $out"
}

if [ "${1:-}" = --source ]; then
	source_archive "${2:?a revision}" "${3:?an output file}"
	exit 0
fi

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
