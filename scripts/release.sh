#!/usr/bin/env bash
# The release build, without Docker: the worker for linux/amd64 and
# linux/arm64, static (no cgo, no demo), each with its CycloneDX SBOM; the
# container image of both, one OCI image index (scripts/image); and
# SHA256SUMS of it all. Reproducible: the same commit and Go version give
# the same bytes and the same image digest, whatever the machine,
# directory or cache (-trimpath, no build id; the revision and the commit
# time come from git, not the clock).
#
#   scripts/release.sh [outdir]          build into outdir (default dist)
#   scripts/release.sh --check           build twice, in fresh caches, and compare
#   scripts/release.sh --push REPO [outdir]
#                                        push outdir's image to REPO (a registry
#                                        and repository: ghcr.io/cellttl/cellttl),
#                                        its SBOMs as referrers, then its tags
#   scripts/release.sh --sign KEY [outdir]
#                                        sign outdir's SHA256SUMS with the SSH key
#                                        KEY (ssh-keygen -Y, SHA256SUMS.sig)
#   scripts/release.sh --verify SIGNERS [outdir] [IMAGE]
#                                        check SHA256SUMS.sig against an
#                                        allowed_signers file, the files against
#                                        SHA256SUMS, and that IMAGE (REPO:TAG or
#                                        REPO@sha256:...) is outdir's image, with
#                                        outdir's SBOMs as its referrers
#   scripts/release.sh --version NEW     move the tree to version NEW: 0.2.3 makes
#                                        this commit the release (its CHANGELOG
#                                        section dated today), 0.2.4-dev opens
#                                        the next one (a section in the making)
#   scripts/release.sh --source REV OUT  the worker's source and manifests at
#                                        REV (a release's commit), as a tar.gz
#                                        (OUT relative to the repository's top):
#                                        what the upgrade tests build and apply
#                                        the previous release from
#
# outdir holds worker-linux-ARCH, worker-linux-ARCH.sbom.json, image.tar
# (the image as an OCI layout: docker load, podman load, skopeo),
# image.index.json (the image's index: its SHA-256 is the image's digest)
# and SHA256SUMS. docs/operations.md, "Releases without Docker", says how
# to push, verify and pin them.
set -euo pipefail
cd "$(dirname "$0")/.."

sbom_tool=github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod@v1.10.0

# What the script leaves behind is removed at its end, whatever happens.
cleanup=()
remove_all() {
	[ "${#cleanup[@]}" -gt 0 ] || return 0
	chmod -R u+w "${cleanup[@]}" 2>/dev/null || true
	rm -rf "${cleanup[@]}"
}
trap remove_all EXIT

# The tools a release runs, built in the default build cache (go run
# keeps the executable there): --check's second build, in a fresh cache,
# shows that the worker rebuilds to the same bytes, and runs the same
# tools on them. Each SBOM names the hashes of the tool that wrote it:
# -trimpath makes that tool the same bytes on any machine, given the Go
# version.
sbom_tool() { GOCACHE=$default_cache go run -trimpath "$sbom_tool" "$@"; }
image_tool() { GOCACHE=$default_cache go run ./scripts/image "$@"; }
default_cache=$(go env GOCACHE)

tree_version() { sed -n 's/^const Version = "\(.*\)"$/\1/p' internal/release/release.go; }

# build OUT [CACHE] makes a release in OUT, the worker compiled with the
# build cache CACHE (the default one if none). The SBOMs have no serial
# number and no timestamp: two builds of a commit give the same bytes.
# The image's time zones are those of the Go toolchain that builds the
# worker.
build() {
	local out=$1 cache=${2:-$default_cache} version
	version=$(tree_version)
	mkdir -p "$out"
	for arch in amd64 arm64; do
		GOCACHE=$cache CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -tags nodemo -trimpath -buildvcs=true \
			-ldflags='-s -w -buildid=' -o "$out/worker-linux-$arch" ./cmd/worker
		sbom_tool bin -json -noserial -notimestamp -version "v$version" \
			-output "$out/worker-linux-$arch.sbom.json" "$out/worker-linux-$arch"
	done
	image_tool build -dist "$out" -zoneinfo "$(go env GOROOT)/lib/time/zoneinfo.zip"
	(cd "$out" && sha256sum worker-linux-* image.tar image.index.json >SHA256SUMS)
}

# The files of outdir are those SHA256SUMS lists.
check_sums() { (cd "$1" && sha256sum --quiet -c SHA256SUMS); }

# source REV OUT writes what the release at REV is made of as a tar.gz:
# the files the worker is built from (go.mod, go.sum, the non-test Go and
# embedded files of the module's packages it imports with the default
# build tags, and their files that other tags select) and the Kubernetes
# manifests (deploy/k8s). The upgrade tests build the previous release
# and apply its manifests from it, so they need no tags or history in the
# clone.
source_archive() {
	local rev=$1 out=$2 files tmp
	tmp=$(mktemp -d)
	cleanup+=("$tmp")
	git archive "$rev" | tar -x -C "$tmp"
	files=$(cd "$tmp" && go list -deps -f '{{if and .Module .Module.Main}}{{$d := .Dir}}{{range .GoFiles}}{{$d}}/{{.}}
{{end}}{{range .IgnoredGoFiles}}{{$d}}/{{.}}
{{end}}{{range .EmbedFiles}}{{$d}}/{{.}}
{{end}}{{end}}' ./cmd/worker | sed "s|^$tmp/||" | sort -u)
	rm -rf "$tmp"
	# git archive stamps every file with the commit's time, and gzip -n
	# leaves out the name and time: the same REV gives the same bytes.
	# shellcheck disable=SC2086
	git archive --format=tar "$rev" -- go.mod go.sum $files deploy/k8s | gzip -9n >"$out"
	echo "release: the worker's source at $rev ($(echo "$files" | wc -l) files) in $out"
}

# set_version NEW moves every place that names the tree's version: the
# constant, the manifests' image and setup Job name, the alert rules'
# runbook links (the release's tag, or main between releases) and the
# CHANGELOG's first section. internal/release's TestVersionNamesOneBuild
# and the deploy tests check that they agree.
set_version() {
	local new=$1 old ref oldref core
	case $new in
	[0-9]*.[0-9]*.[0-9]* | [0-9]*.[0-9]*.[0-9]*-dev) ;;
	*)
		echo "release: --version $new: want MAJOR.MINOR.PATCH or MAJOR.MINOR.PATCH-dev" >&2
		exit 2
		;;
	esac
	old=$(sed -n 's/^const Version = "\(.*\)"$/\1/p' internal/release/release.go)
	core=${new%-dev}
	ref=main oldref=main
	[ "$new" = "$core" ] && ref=v$new
	[ "$old" = "${old%-dev}" ] && oldref=v$old
	sed -i "s/^const Version = \".*\"$/const Version = \"$new\"/" internal/release/release.go
	git ls-files deploy | grep -E '\.(yaml|yml|json)$' | xargs sed -i \
		-e "s|ghcr.io/cellttl/cellttl:$old\b|ghcr.io/cellttl/cellttl:$new|g" \
		-e "s|cellttl-setup-${old//./-}\b|cellttl-setup-${new//./-}|g" \
		-e "s|cellttl/cellttl/blob/$oldref/docs/|cellttl/cellttl/blob/$ref/docs/|g"
	if [ "$new" = "$core" ]; then
		sed -i "0,/^## $core (unreleased)$/s//## $core ($(date -u +%F))/" CHANGELOG.md
	else
		sed -i "0,/^## /s//## $core (unreleased)\n\n## /" CHANGELOG.md
	fi
	echo "release: version $old -> $new; go test ./internal/release ./deploy checks the rest"
}

case ${1:-} in
--version)
	set_version "${2:?a version}"
	exit 0
	;;
--source)
	source_archive "${2:?a revision}" "${3:?an output file}"
	exit 0
	;;
--check)
	tmp=$(mktemp -d)
	cleanup+=("$tmp")
	# The second build gets a build cache of its own: a rebuild, not a
	# cache hit.
	build "$tmp/a"
	build "$tmp/b" "$tmp/cache"
	if ! diff "$tmp/a/SHA256SUMS" "$tmp/b/SHA256SUMS"; then
		echo "release: two builds of the same commit differ" >&2
		exit 1
	fi
	echo "release: reproducible: image sha256:$(sha256sum <"$tmp/a/image.index.json" | cut -d' ' -f1) twice; $(tr '\n' ' ' <"$tmp/a/SHA256SUMS")"
	exit 0
	;;
--push)
	repo=${2:?a repository, such as ghcr.io/cellttl/cellttl}
	out=${3:-dist}
	check_sums "$out"
	image_tool push -dist "$out" "$repo"
	exit 0
	;;
--sign)
	key=${2:?an SSH private key (or its public key, with the private one in ssh-agent)}
	out=${3:-dist}
	check_sums "$out"
	# The namespace is the release's own: a signature made for git (or
	# for any other use of the key) does not pass for one of a release.
	rm -f "$out/SHA256SUMS.sig"
	ssh-keygen -q -Y sign -f "$key" -n cellttl-release "$out/SHA256SUMS"
	echo "release: signed $out/SHA256SUMS with $key: $out/SHA256SUMS.sig"
	exit 0
	;;
--verify)
	signers=${2:?an allowed_signers file}
	out=${3:-dist}
	image=${4:-}
	if ! principal=$(ssh-keygen -Y find-principals -f "$signers" -s "$out/SHA256SUMS.sig" | head -n1) || [ -z "$principal" ]; then
		echo "release: $out/SHA256SUMS.sig is signed by no key of $signers" >&2
		exit 1
	fi
	ssh-keygen -Y verify -f "$signers" -I "$principal" -n cellttl-release -s "$out/SHA256SUMS.sig" <"$out/SHA256SUMS"
	check_sums "$out"
	if [ -n "$image" ]; then
		image_tool verify -dist "$out" "$image"
	fi
	echo "release: $out verified, signed by $principal"
	exit 0
	;;
-*)
	echo "release: unknown option $1 (the script's header says what it takes)" >&2
	exit 2
	;;
esac

out=${1:-dist}
build "$out"
echo "release $(tree_version): $(ls "$out" | tr '\n' ' ')"
echo "release: image sha256:$(sha256sum <"$out/image.index.json" | cut -d' ' -f1)"
