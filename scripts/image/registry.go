package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// sbomType is the media type of a CycloneDX SBOM in JSON: the artifact
// type of the SBOM referrers, as cosign and oras name it.
const sbomType = "application/vnd.cyclonedx+json"

func remoteOptions(ctx context.Context) []remote.Option {
	// The credentials docker login, podman login or crane auth login
	// left (~/.docker/config.json, or DOCKER_CONFIG).
	return []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain), remote.WithUserAgent("cellttl-release")}
}

// localImage is dist's image, unpacked into dir: the index in its layout
// and the tags the layout names it by, checked against
// dist/image.index.json (what SHA256SUMS lists).
func localImage(dist, dir string) (v1.ImageIndex, []string, error) {
	raw, err := os.ReadFile(filepath.Join(dist, indexJSON))
	if err != nil {
		return nil, nil, fmt.Errorf("no image in %s (scripts/release.sh builds it): %w", dist, err)
	}
	want, _, err := v1.SHA256(bytes.NewReader(raw))
	if err != nil {
		return nil, nil, err
	}
	p, err := readLayoutTar(filepath.Join(dist, layoutTar), dir)
	if err != nil {
		return nil, nil, err
	}
	outer, err := p.ImageIndex()
	if err != nil {
		return nil, nil, err
	}
	om, err := outer.IndexManifest()
	if err != nil {
		return nil, nil, err
	}
	var tags []string
	for _, d := range om.Manifests {
		if d.Digest != want {
			return nil, nil, fmt.Errorf("%s holds %s, not the index of %s (%s)", layoutTar, d.Digest, indexJSON, want)
		}
		tags = append(tags, d.Annotations[refNameAnnotation])
	}
	if len(tags) == 0 {
		return nil, nil, fmt.Errorf("%s names no image", layoutTar)
	}
	idx, err := outer.ImageIndex(want)
	return idx, tags, err
}

// push writes dist's image to repo by digest, then each platform's SBOM
// as an artifact whose subject is that platform's image (the registry's
// referrers API lists it, or the referrers tag where the registry has no
// such API), and last the tags: a tag names the image only once all of it
// is there.
func push(ctx context.Context, dist, repo string) ([]string, error) {
	r, err := name.NewRepository(repo)
	if err != nil {
		return nil, fmt.Errorf("repository %q: %w", repo, err)
	}
	dir, err := os.MkdirTemp("", "cellttl-layout-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	idx, tags, err := localImage(dist, dir)
	if err != nil {
		return nil, err
	}
	digest, err := idx.Digest()
	if err != nil {
		return nil, err
	}
	opts := remoteOptions(ctx)
	if err := remote.WriteIndex(r.Digest(digest.String()), idx, opts...); err != nil {
		return nil, fmt.Errorf("push %s@%s: %w", r, digest, err)
	}
	pushed := []string{r.Digest(digest.String()).String()}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	for _, m := range im.Manifests {
		art, err := sbomReferrer(dist, m, im.Annotations["org.opencontainers.image.created"])
		if err != nil {
			return nil, err
		}
		d, err := art.Digest()
		if err != nil {
			return nil, err
		}
		if err := remote.Write(r.Digest(d.String()), art, opts...); err != nil {
			return nil, fmt.Errorf("push the SBOM of %s: %w", m.Platform, err)
		}
		pushed = append(pushed, fmt.Sprintf("%s (the SBOM of %s)", r.Digest(d.String()), m.Platform))
	}
	for _, tag := range tags {
		if err := remote.Tag(r.Tag(tag), idx, opts...); err != nil {
			return nil, fmt.Errorf("tag %s:%s: %w", r, tag, err)
		}
		pushed = append(pushed, r.Tag(tag).String())
	}
	return pushed, nil
}

// sbomArtifact is an OCI artifact of one blob, the SBOM, whose subject is
// the image it describes.
type sbomArtifact struct {
	manifest []byte
	sbom     v1.Layer
}

var emptyConfig = []byte("{}")

func (a *sbomArtifact) RawConfigFile() ([]byte, error)      { return emptyConfig, nil }
func (a *sbomArtifact) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }
func (a *sbomArtifact) RawManifest() ([]byte, error)        { return a.manifest, nil }
func (a *sbomArtifact) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	if d, err := a.sbom.Digest(); err != nil || d != h {
		return nil, fmt.Errorf("the SBOM artifact has no blob %s", h)
	}
	return a.sbom, nil
}

// sbomReferrer is the SBOM of the platform image m, as a referrer of m:
// the same bytes as dist's SBOM file, which SHA256SUMS lists.
func sbomReferrer(dist string, m v1.Descriptor, created string) (v1.Image, error) {
	if m.Platform == nil {
		return nil, fmt.Errorf("manifest %s names no platform", m.Digest)
	}
	path := sbomPath(dist, m.Platform.Architecture)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("the SBOM of %s: %w", m.Platform, err)
	}
	sbom := static.NewLayer(data, sbomType)
	sbomDigest, err := sbom.Digest()
	if err != nil {
		return nil, err
	}
	configDigest, _, err := v1.SHA256(bytes.NewReader(emptyConfig))
	if err != nil {
		return nil, err
	}
	manifest, err := json.Marshal(v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		ArtifactType:  sbomType,
		Config:        v1.Descriptor{MediaType: types.OCIEmptyJSON, Size: int64(len(emptyConfig)), Digest: configDigest},
		Layers: []v1.Descriptor{{
			MediaType: sbomType, Size: int64(len(data)), Digest: sbomDigest,
			Annotations: map[string]string{"org.opencontainers.image.title": filepath.Base(path)},
		}},
		Subject:     &v1.Descriptor{MediaType: m.MediaType, Size: m.Size, Digest: m.Digest},
		Annotations: map[string]string{"org.opencontainers.image.created": created},
	})
	if err != nil {
		return nil, err
	}
	return partial.CompressedToImage(&sbomArtifact{manifest: manifest, sbom: sbom})
}

// verify checks that ref, in its registry, is dist's image (the digest of
// dist/image.index.json, which a signed SHA256SUMS lists) and that each
// platform's image has dist's SBOM for it as a referrer.
func verify(ctx context.Context, dist, ref string) (v1.Hash, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("image %q: %w", ref, err)
	}
	raw, err := os.ReadFile(filepath.Join(dist, indexJSON))
	if err != nil {
		return v1.Hash{}, err
	}
	want, _, err := v1.SHA256(bytes.NewReader(raw))
	if err != nil {
		return v1.Hash{}, err
	}
	opts := remoteOptions(ctx)
	desc, err := remote.Get(r, opts...)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("fetch %s: %w", ref, err)
	}
	if desc.Digest != want {
		return v1.Hash{}, fmt.Errorf("%s is %s, not the image of %s (%s)", ref, desc.Digest, dist, want)
	}
	idx, err := desc.ImageIndex()
	if err != nil {
		return v1.Hash{}, err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return v1.Hash{}, err
	}
	if len(im.Manifests) != len(arches) {
		return v1.Hash{}, fmt.Errorf("%s has %d platforms, want %v", ref, len(im.Manifests), arches)
	}
	for _, m := range im.Manifests {
		if err := verifySBOM(r.Context(), dist, m, opts); err != nil {
			return v1.Hash{}, err
		}
	}
	return want, nil
}

func verifySBOM(repo name.Repository, dist string, m v1.Descriptor, opts []remote.Option) error {
	if m.Platform == nil {
		return fmt.Errorf("manifest %s names no platform", m.Digest)
	}
	want, err := os.ReadFile(sbomPath(dist, m.Platform.Architecture))
	if err != nil {
		return err
	}
	// Each referrer's own manifest says what it is: registries differ in
	// the artifactType they list (go-containerregistry's gives the
	// config's media type), so none is filtered out by it.
	refs, err := remote.Referrers(repo.Digest(m.Digest.String()), opts...)
	if err != nil {
		return fmt.Errorf("the referrers of %s: %w", m.Platform, err)
	}
	rm, err := refs.IndexManifest()
	if err != nil {
		return err
	}
	for _, d := range rm.Manifests {
		art, err := remote.Image(repo.Digest(d.Digest.String()), opts...)
		if err != nil {
			return fmt.Errorf("the referrer %s of %s: %w", d.Digest, m.Platform, err)
		}
		am, err := art.Manifest()
		if err != nil {
			return err
		}
		if am.ArtifactType != sbomType || am.Subject == nil || am.Subject.Digest != m.Digest || len(am.Layers) != 1 {
			continue
		}
		l, err := art.LayerByDigest(am.Layers[0].Digest)
		if err != nil {
			return err
		}
		rc, err := l.Compressed()
		if err != nil {
			return err
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return err
		}
		if bytes.Equal(got, want) {
			return nil
		}
	}
	return fmt.Errorf("no referrer of %s@%s is %s", repo, m.Digest, sbomPath(dist, m.Platform.Architecture))
}
