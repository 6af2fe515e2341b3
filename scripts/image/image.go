package main

import (
	"bytes"
	"compress/gzip"
	"debug/buildinfo"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/cellttl/cellttl/internal/release"
)

// arches are the platforms of a release, as scripts/release.sh builds
// them: DIR/worker-linux-ARCH, with DIR/worker-linux-ARCH.sbom.json.
var arches = []string{"amd64", "arm64"}

const (
	source = "https://github.com/cellttl/cellttl"
	// imageName is the name the image is known by: docker load gives it
	// this name, and the release pushes it there.
	imageName = "ghcr.io/cellttl/cellttl"
	// The files of a release directory the image is made into.
	layoutTar = "image.tar"
	indexJSON = "image.index.json"
	workerBin = "usr/local/bin/worker"
)

func binPath(dist, arch string) string { return filepath.Join(dist, "worker-linux-"+arch) }

func sbomPath(dist, arch string) string { return binPath(dist, arch) + ".sbom.json" }

// stamp is what a binary says of the source it was built from (its build
// information, -buildvcs=true): the image's labels say the same.
type stamp struct {
	revision  string
	committed time.Time
	modified  bool
	goVersion string
}

func readStamp(bin string) (stamp, error) {
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		return stamp{}, fmt.Errorf("read the build information of %s: %w", bin, err)
	}
	if bi.Path != "github.com/cellttl/cellttl/cmd/worker" {
		return stamp{}, fmt.Errorf("%s is a build of %q, not of the worker", bin, bi.Path)
	}
	s := stamp{goVersion: bi.GoVersion}
	for _, kv := range bi.Settings {
		switch kv.Key {
		case "vcs.revision":
			s.revision = kv.Value
		case "vcs.time":
			if s.committed, err = time.Parse(time.RFC3339, kv.Value); err != nil {
				return stamp{}, fmt.Errorf("%s: vcs.time %q: %w", bin, kv.Value, err)
			}
		case "vcs.modified":
			s.modified = kv.Value == "true"
		}
	}
	if len(s.revision) < 12 || s.committed.IsZero() {
		return stamp{}, fmt.Errorf("%s records no commit: build it in a git checkout with -buildvcs=true, as scripts/release.sh does", bin)
	}
	return s, nil
}

// imageTags are the image's tags, the most precise first. A release is
// tagged with its version alone. A -dev build is tagged with its commit
// (0.2.3-dev-81ade43f02c1), and with the version it leads to (0.2.3-dev,
// which deploy/ names between releases: the newest such build pushed).
// A build of a tree with uncommitted changes gets its commit and
// -modified only: it is no commit's build.
func imageTags(version string, s stamp) []string {
	rev := s.revision[:12]
	switch {
	case s.modified:
		return []string{version + "-" + rev + "-modified"}
	case released(version):
		return []string{version}
	default:
		return []string{version + "-" + rev, version}
	}
}

// released reports whether version names a release: no pre-release part
// (internal/release: a -dev version is the making of one).
func released(version string) bool { return release.Core(version) == version }

// docsRef is where the docs of version are read: its tag, or main between
// releases (a -dev version has no tag), as the alert rules' runbook links.
func docsRef(version string) string {
	if released(version) {
		return "v" + version
	}
	return "main"
}

// labels are the OCI annotations of the index and of each image, and the
// labels of each image's config: what a registry shows, what a scanner
// and a platform team read.
func labels(tag string, s stamp) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":         "cellttl",
		"org.opencontainers.image.description":   "cellttl's worker: Kafka click events into Bigtable, each cell timed to expire at its tenant's TTL",
		"org.opencontainers.image.version":       tag,
		"org.opencontainers.image.revision":      s.revision,
		"org.opencontainers.image.created":       s.committed.UTC().Format(time.RFC3339),
		"org.opencontainers.image.source":        source,
		"org.opencontainers.image.url":           source,
		"org.opencontainers.image.documentation": source + "/blob/" + docsRef(release.Version) + "/docs/operations.md",
	}
}

type built struct {
	digest  v1.Hash
	tags    []string
	summary string
}

// build makes the image index of dist's binaries and writes it there: the
// OCI layout as one tar, and the index's own bytes (whose SHA-256 is the
// image's digest).
func build(dist, zoneinfoZip string) (built, error) {
	var st stamp
	for i, arch := range arches {
		s, err := readStamp(binPath(dist, arch))
		if err != nil {
			return built{}, err
		}
		if i > 0 && s != st {
			return built{}, fmt.Errorf("the binaries were built from different sources: %+v and %+v", st, s)
		}
		st = s
	}
	zoneinfo, err := os.ReadFile(zoneinfoZip)
	if err != nil {
		return built{}, fmt.Errorf("the time zones: %w", err)
	}
	files, err := baseFiles(zoneinfo)
	if err != nil {
		return built{}, err
	}
	baseTar, err := layerTar(files, st.committed)
	if err != nil {
		return built{}, err
	}
	base, err := layer(baseTar)
	if err != nil {
		return built{}, err
	}
	tags := imageTags(release.Version, st)
	anns := labels(tags[0], st)
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	var summary []string
	for _, arch := range arches {
		img, err := platformImage(dist, arch, base, st, anns)
		if err != nil {
			return built{}, err
		}
		platform := v1.Platform{OS: "linux", Architecture: arch}
		if arch == "arm64" {
			platform.Variant = "v8"
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: noArtifact{img}, Descriptor: v1.Descriptor{Platform: &platform}})
		size, err := imageSize(img)
		if err != nil {
			return built{}, err
		}
		summary = append(summary, fmt.Sprintf("%s %.1f MB", platform, float64(size)/1e6))
	}
	idx = mutate.Annotations(idx, anns).(v1.ImageIndex)
	digest, err := idx.Digest()
	if err != nil {
		return built{}, err
	}
	raw, err := idx.RawManifest()
	if err != nil {
		return built{}, err
	}
	if err := writeLayoutTar(filepath.Join(dist, layoutTar), idx, tags, st.committed); err != nil {
		return built{}, err
	}
	if err := os.WriteFile(filepath.Join(dist, indexJSON), raw, 0o644); err != nil {
		return built{}, err
	}
	return built{digest: digest, tags: tags, summary: strings.Join(summary, ", ") + " compressed"}, nil
}

// noArtifact is an image that says it is no artifact: its descriptor in
// the index has no artifactType (go-containerregistry would put the
// config's media type there, as for an artifact, where an image's
// descriptor has none).
type noArtifact struct{ v1.Image }

func (noArtifact) ArtifactType() (string, error) { return "", nil }

// layer is a gzip layer of an uncompressed tar, compressed once. gzip's
// default level: on the amd64 worker, 16.1 MB in 8 s here, where the
// best compression gave 16.0 MB in 20 s and the fastest 18.2 MB in 3 s.
func layer(uncompressed []byte) (v1.Layer, error) {
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(uncompressed)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(gzip.DefaultCompression), tarball.WithCompressedCaching)
}

// platformImage is the worker of one platform: the base layer, then the
// binary, run as nonroot with no shell to run it through.
func platformImage(dist, arch string, base v1.Layer, st stamp, anns map[string]string) (v1.Image, error) {
	bin, err := os.ReadFile(binPath(dist, arch))
	if err != nil {
		return nil, err
	}
	binTar, err := layerTar([]file{{name: workerBin, mode: 0o755, data: bin}}, st.committed)
	if err != nil {
		return nil, err
	}
	worker, err := layer(binTar)
	if err != nil {
		return nil, err
	}
	created := v1.Time{Time: st.committed.UTC()}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, History: v1.History{Created: created, CreatedBy: "scripts/image: /etc/passwd, /etc/group, " + caFile + " (x509roots/fallback), " + zoneDir + " (" + st.goVersion + ")"}},
		mutate.Addendum{Layer: worker, History: v1.History{Created: created, CreatedBy: "scripts/release.sh: /" + workerBin + " (" + st.goVersion + ", -tags nodemo)"}},
	)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = "linux", arch, created
	if arch == "arm64" {
		cf.Variant = "v8"
	}
	cf.Config = v1.Config{
		User:       fmt.Sprintf("%d:%d", nonroot, nonroot),
		Entrypoint: []string{"/" + workerBin},
		Cmd:        []string{"run"},
		Env:        []string{"PATH=/usr/local/bin"},
		WorkingDir: "/",
		// The admin port the manifests give the worker (CELLTTL_ADMIN_ADDR=:8080):
		// /metrics, /healthz, /readyz.
		ExposedPorts: map[string]struct{}{"8080/tcp": {}},
		Labels:       anns,
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, err
	}
	return mutate.Annotations(img, anns).(v1.Image), nil
}

// imageSize is what a pull of the image moves: its compressed layers,
// config and manifest.
func imageSize(img v1.Image) (int64, error) {
	m, err := img.Manifest()
	if err != nil {
		return 0, err
	}
	size := m.Config.Size
	for _, l := range m.Layers {
		size += l.Size
	}
	raw, err := img.RawManifest()
	return size + int64(len(raw)), err
}
