package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"golang.org/x/crypto/x509roots/fallback/bundle"

	"github.com/cellttl/cellttl/internal/release"
	"github.com/cellttl/cellttl/tenants"
)

// root is the repository's top, where scripts/release.sh runs.
const root = "../.."

// releaseScript runs scripts/release.sh with args, from the repository's
// top, and returns what it printed; a failure is an error with that. The
// first run builds both platforms' workers, from an empty cache in CI:
// it may take the test's time, less a minute to say what it printed.
func releaseScript(t *testing.T, args ...string) (string, error) {
	ctx := t.Context()
	if deadline, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline.Add(-time.Minute))
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, "scripts/release.sh", args...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("scripts/release.sh %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// commit is what the worker of this checkout says it was built from.
type commit struct {
	hash     string
	time     time.Time
	modified bool
}

func headCommit(t *testing.T) commit {
	t.Helper()
	out, err := exec.Command("git", "-C", root, "show", "-s", "--format=%H %ct").Output()
	if err != nil {
		t.Skipf("not a git checkout (%v): a release is built from one", err)
	}
	// The go command stamps a build with its commit only where .git is a
	// directory: not in a worktree made by git worktree, where it is a
	// file (go1.26), and where the release would name no commit.
	if fi, err := os.Stat(filepath.Join(root, ".git")); err != nil || !fi.IsDir() {
		t.Skip("a git worktree (.git is no directory): Go records no commit in what it builds here, and a release names one; run this test in a clone")
	}
	hash, secs, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	sec, err := strconv.ParseInt(secs, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	status, err := exec.Command("git", "-C", root, "status", "--porcelain").Output()
	if err != nil {
		t.Fatal(err)
	}
	return commit{hash: hash, time: time.Unix(sec, 0).UTC(), modified: len(status) > 0}
}

// The release builds the image, signs what it made, pushes it to a real
// registry (go-containerregistry's, on loopback) and verifies it there;
// pulled back by digest, the image is what a platform team expects, and
// the worker runs from its unpacked file system as the user it names,
// with the root certificates and time zones it reads where it reads them.
// Tampering with what was signed or pushed fails the verification.
func TestReleaseImage(t *testing.T) {
	head := headCommit(t)
	dir := t.TempDir()
	dist := filepath.Join(dir, "dist")

	// A throwaway signing key, and the allowed_signers file that trusts it.
	key := filepath.Join(dir, "release-key")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "release@cellttl.test", "-f", key).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v\n%s", err, out)
	}
	pub, err := os.ReadFile(key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	signers := filepath.Join(dir, "allowed_signers")
	if err := os.WriteFile(signers, []byte("release@cellttl.test "+string(pub)), 0o644); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	out, err := releaseScript(t, dist)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("scripts/release.sh %s in %s:\n%s", dist, time.Since(start).Round(time.Second), out)
	if _, err := releaseScript(t, "--sign", key, dist); err != nil {
		t.Fatal(err)
	}
	digest := mustDigest(t, dist)
	sums, err := os.ReadFile(filepath.Join(dist, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(sums), digest.Hex+"  "+indexJSON+"\n") {
		t.Errorf("SHA256SUMS does not list the image's digest %s:\n%s", digest, sums)
	}

	// A release is its version; a -dev build is its commit, and the
	// version it leads to; a modified tree's build is no commit's.
	wantTags := []string{release.Version + "-" + head.hash[:12], release.Version}
	switch {
	case head.modified:
		wantTags = []string{wantTags[0] + "-modified"}
	case released(release.Version):
		wantTags = []string{release.Version}
	}
	wantTag := wantTags[0]

	// A registry with the referrers API, and one without (as some
	// registries still are), where the SBOMs go under the referrers tag.
	for _, referrers := range []bool{true, false} {
		t.Run(fmt.Sprintf("referrers API %v", referrers), func(t *testing.T) {
			srv := httptest.NewServer(registry.New(registry.WithReferrersSupport(referrers), registry.Logger(log.New(io.Discard, "", 0))))
			defer srv.Close()
			repo := strings.TrimPrefix(srv.URL, "http://") + "/cellttl/cellttl"
			out, err := releaseScript(t, "--push", repo, dist)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out, repo+"@"+digest.String()+"\n") {
				t.Fatalf("push printed %q, want %s@%s", out, repo, digest)
			}
			r, err := name.NewRepository(repo)
			if err != nil {
				t.Fatal(err)
			}
			tags, err := remote.List(r, remote.WithContext(t.Context()))
			if err != nil {
				t.Fatal(err)
			}
			tags = slices.DeleteFunc(tags, func(tag string) bool { return strings.HasPrefix(tag, "sha256-") }) // referrers tags
			if slices.Sort(tags); !slices.Equal(tags, slices.Sorted(slices.Values(wantTags))) {
				t.Errorf("pushed tags %v, want %v", tags, wantTags)
			}
			if _, err := releaseScript(t, "--verify", signers, dist, repo+":"+wantTag); err != nil {
				t.Fatal(err)
			}
			checkPulled(t, repo, digest, head, dist)
			checkTampering(t, dist, signers, repo, wantTag)
		})
	}
}

// checkPulled pulls the image by digest and checks what it says of
// itself, and what it holds.
func checkPulled(t *testing.T, repo string, digest v1.Hash, head commit, dist string) {
	ref, err := name.NewDigest(repo + "@" + digest.String())
	if err != nil {
		t.Fatal(err)
	}
	idx, err := remote.Index(ref, remote.WithContext(t.Context()))
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	anns := im.Annotations
	for k, want := range map[string]string{
		"org.opencontainers.image.revision": head.hash,
		"org.opencontainers.image.source":   "https://github.com/cellttl/cellttl",
		"org.opencontainers.image.created":  head.time.Format(time.RFC3339),
		"org.opencontainers.image.title":    "cellttl",
	} {
		if anns[k] != want {
			t.Errorf("index annotation %s = %q, want %q", k, anns[k], want)
		}
	}
	if v := anns["org.opencontainers.image.version"]; !strings.HasPrefix(v, release.Version) || (!released(release.Version) || head.modified) && !strings.Contains(v, head.hash[:12]) {
		t.Errorf("index version %q: want the tree's %s, with the commit unless it is the release's", v, release.Version)
	}
	var platforms []string
	for _, m := range im.Manifests {
		platforms = append(platforms, m.Platform.String())
		img, err := idx.Image(m.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		c := cf.Config
		if c.User != "65532:65532" || !slices.Equal(c.Entrypoint, []string{"/usr/local/bin/worker"}) || !slices.Equal(c.Cmd, []string{"run"}) {
			t.Errorf("%s runs %v %v as %q, want /usr/local/bin/worker run as 65532:65532", m.Platform, c.Entrypoint, c.Cmd, c.User)
		}
		for _, e := range c.Env {
			if strings.HasPrefix(e, "CELLTTL_") {
				t.Errorf("%s sets %s: the image configures no worker", m.Platform, e)
			}
		}
		for k, v := range anns {
			if c.Labels[k] != v {
				t.Errorf("%s label %s = %q, want the index's %q", m.Platform, k, c.Labels[k], v)
			}
		}
		if !cf.Created.Time.Equal(head.time) || cf.OS != "linux" || cf.Architecture != m.Platform.Architecture {
			t.Errorf("%s config: created %s, %s/%s; want %s (the commit's time), the platform's", m.Platform, cf.Created, cf.OS, cf.Architecture, head.time)
		}
		sizeOf, err := imageSize(img)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %s, %.1f MB compressed", m.Platform, m.Digest, float64(sizeOf)/1e6)
		checkSBOMReferrer(t, ref.Context(), m, dist)
		if m.Platform.Architecture == "amd64" {
			checkFileSystem(t, img, c, head)
		}
	}
	if want := []string{"linux/amd64", "linux/arm64/v8"}; !slices.Equal(platforms, want) {
		t.Errorf("platforms %v, want %v", platforms, want)
	}
}

// checkSBOMReferrer finds the platform image's SBOM among its referrers:
// dist's SBOM of that binary, byte for byte, naming the worker's modules.
func checkSBOMReferrer(t *testing.T, repo name.Repository, m v1.Descriptor, dist string) {
	t.Helper()
	refs, err := remote.Referrers(repo.Digest(m.Digest.String()), remote.WithContext(t.Context()))
	if err != nil {
		t.Fatal(err)
	}
	rm, err := refs.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(rm.Manifests) != 1 {
		t.Fatalf("%s: referrers %+v, want its SBOM alone", m.Platform, rm.Manifests)
	}
	art, err := remote.Image(repo.Digest(rm.Manifests[0].Digest.String()), remote.WithContext(t.Context()))
	if err != nil {
		t.Fatal(err)
	}
	if am, err := art.Manifest(); err != nil || am.ArtifactType != sbomType || am.Subject == nil || am.Subject.Digest != m.Digest {
		t.Fatalf("%s: the referrer is %+v (%v), want a CycloneDX SBOM whose subject is the image", m.Platform, am, err)
	}
	layers, err := art.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("SBOM artifact: %d layers, %v", len(layers), err)
	}
	rc, err := layers[0].Compressed()
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(sbomPath(dist, m.Platform.Architecture))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s: the SBOM referrer is not %s", m.Platform, sbomPath(dist, m.Platform.Architecture))
	}
	var bom struct {
		Metadata struct {
			Component struct{ Name, Version string }
		}
		Components []struct{ Name, Version string }
	}
	if err := json.Unmarshal(got, &bom); err != nil {
		t.Fatalf("%s: SBOM: %v", m.Platform, err)
	}
	kafka := slices.ContainsFunc(bom.Components, func(c struct{ Name, Version string }) bool {
		return c.Name == "github.com/segmentio/kafka-go"
	})
	if bom.Metadata.Component.Version != "v"+release.Version || !kafka {
		t.Errorf("%s: SBOM of %+v, kafka-go listed %v: want the worker %s and its modules", m.Platform, bom.Metadata.Component, kafka, release.Version)
	}
}

// entry is one file of the unpacked image.
type entry struct {
	mode     os.FileMode
	uid, gid int
}

// checkFileSystem unpacks the image's file system (its layers flattened,
// as a runtime does) and runs the worker from it.
func checkFileSystem(t *testing.T, img v1.Image, config v1.Config, head commit) {
	t.Helper()
	rootfs := t.TempDir()
	files, err := unpack(mutate.Extract(img), rootfs)
	if err != nil {
		t.Fatal(err)
	}
	// All it holds, and no more: no shell, no tenants file, no key.
	var other []string
	zones := 0
	for name := range files {
		switch {
		case strings.HasPrefix(name, zoneDir+"/"):
			zones++
		case !slices.Contains([]string{"etc", "etc/passwd", "etc/group", "etc/ssl", "etc/ssl/certs", caFile, "home", "home/nonroot",
			"usr", "usr/local", "usr/local/bin", workerBin, "usr/share", zoneDir}, name):
			other = append(other, name)
		}
	}
	if len(other) > 0 {
		t.Errorf("the image holds %v besides the worker, its users, certificates and zones", other)
	}
	if f := files[workerBin]; f.mode != 0o755 || f.uid != 0 {
		t.Errorf("worker: %+v, want root's, 0755", f)
	}
	if f := files["home/nonroot"]; f.uid != nonroot || f.gid != nonroot || !f.mode.IsDir() {
		t.Errorf("/home/nonroot: %+v, want nonroot's", f)
	}
	passwd, _ := os.ReadFile(filepath.Join(rootfs, "etc/passwd"))
	group, _ := os.ReadFile(filepath.Join(rootfs, "etc/group"))
	if !regexp.MustCompile(`(?m)^nonroot:x:65532:65532:[^:]*:/home/nonroot:/sbin/nologin$`).Match(passwd) ||
		!regexp.MustCompile(`(?m)^nonroot:x:65532:$`).Match(group) {
		t.Errorf("nonroot is not 65532:65532 in /etc/passwd and /etc/group:\n%s%s", passwd, group)
	}
	checkRoots(t, filepath.Join(rootfs, caFile))
	checkZones(t, filepath.Join(rootfs, zoneDir), zones)

	// The worker as a runtime starts it: the image's file system as its
	// root, as the image's user, with the image's environment. Only root
	// may chroot; anyone else runs the unpacked binary on this machine's
	// root.
	var uid, gid uint32
	if _, err := fmt.Sscanf(config.User, "%d:%d", &uid, &gid); err != nil {
		t.Fatalf("user %q: %v", config.User, err)
	}
	tenantsFile, err := os.ReadFile(filepath.Join(root, "tenants.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(rootfs, "srv"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rootfs, "srv/tenants.yaml"), tenantsFile, 0o644); err != nil {
		t.Fatal(err)
	}
	worker := func(args ...string) ([]byte, error) {
		cmd := exec.CommandContext(t.Context(), "/"+workerBin, args...)
		cmd.Env = append(slices.Clone(config.Env), "HOME=/home/nonroot")
		if os.Geteuid() == 0 {
			cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: rootfs, Credential: &syscall.Credential{Uid: uid, Gid: gid}}
		} else {
			cmd.Path = filepath.Join(rootfs, workerBin)
			for i, a := range args {
				if strings.HasPrefix(a, "/srv/") {
					args[i] = filepath.Join(rootfs, a)
				}
			}
			cmd.Args = append([]string{cmd.Path}, args...)
		}
		cmd.Dir = "/"
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return out, fmt.Errorf("worker %s: %w\n%s%s", strings.Join(args, " "), err, out, stderr.String())
		}
		return out, nil
	}
	if os.Geteuid() != 0 {
		t.Log("not root: the worker runs from the unpacked image, without chroot to it")
	}
	out, err := worker("version")
	if err != nil {
		t.Fatal(err)
	}
	want := "worker " + release.Version + " (revision " + head.hash[:12]
	if head.modified {
		want += "-modified"
	}
	if !strings.HasPrefix(string(out), want+", go") {
		t.Errorf("worker version says %q, want %q...", out, want)
	}
	out, err = worker("check", "--tenants", "/srv/tenants.yaml", "--format", "json")
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Valid   bool
		Tenants int
		Exit    int
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("worker check: %v\n%s", err, out)
	}
	cfg, err := tenants.Load(filepath.Join(root, "tenants.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Valid || rep.Exit != 0 || rep.Tenants != len(cfg.Policy.Tenants) {
		t.Errorf("worker check of tenants.yaml: %s; want valid, %d tenants", out, len(cfg.Policy.Tenants))
	}
}

// unpack writes a flattened file system into dir; it holds regular
// files and directories only.
func unpack(rc io.ReadCloser, dir string) (map[string]entry, error) {
	defer rc.Close()
	files := map[string]entry{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, nil
		}
		if err != nil {
			return nil, err
		}
		name := strings.TrimSuffix(filepath.Clean(h.Name), "/")
		if !filepath.IsLocal(name) {
			return nil, fmt.Errorf("image entry %q is outside its root", h.Name)
		}
		target := filepath.Join(dir, name)
		switch h.Typeflag {
		case tar.TypeDir:
			files[name] = entry{mode: os.ModeDir | os.FileMode(h.Mode).Perm(), uid: h.Uid, gid: h.Gid}
			err = os.MkdirAll(target, 0o755)
		case tar.TypeReg:
			files[name] = entry{mode: os.FileMode(h.Mode).Perm(), uid: h.Uid, gid: h.Gid}
			err = writeFrom(target, tr)
			if err == nil {
				err = os.Chmod(target, os.FileMode(h.Mode).Perm())
			}
		default:
			return nil, fmt.Errorf("image entry %q is of type %q: want files and directories", h.Name, h.Typeflag)
		}
		if err == nil {
			err = os.Lchown(target, h.Uid, h.Gid)
			if errors.Is(err, os.ErrPermission) && os.Geteuid() != 0 {
				err = nil
			}
		}
		if err != nil {
			return nil, err
		}
	}
}

// checkRoots reads the image's CA file as crypto/x509 does: the Mozilla
// roots without a distrust date, Google's among them (Bigtable's
// endpoints chain to GTS Root R1).
func checkRoots(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var subjects []string
	for rest := data; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			if len(bytes.TrimSpace(rest)) > 0 {
				t.Errorf("%s: %d bytes that are no PEM block", path, len(rest))
			}
			break
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if !c.IsCA {
			t.Errorf("%s: %s is no CA", path, c.Subject)
		}
		subjects = append(subjects, c.Subject.CommonName)
	}
	want := 0
	for r := range bundle.Roots() {
		if r.Constraint == nil {
			want++
		}
	}
	if len(subjects) != want || !slices.Contains(subjects, "GTS Root R1") {
		t.Errorf("%s: %d roots (GTS Root R1 among them: %v), want the bundle's %d unconstrained ones", path, len(subjects), slices.Contains(subjects, "GTS Root R1"), want)
	}
	if pool := x509.NewCertPool(); !pool.AppendCertsFromPEM(data) {
		t.Errorf("%s: crypto/x509 reads no certificate", path)
	}
}

// checkZones loads zones from the image's zoneinfo as the time package
// does, each by its name, and checks what one says of a known date.
func checkZones(t *testing.T, dir string, n int) {
	t.Helper()
	for _, zone := range []string{"UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata"} {
		data, err := os.ReadFile(filepath.Join(dir, zone))
		if err != nil {
			t.Errorf("zone %s: %v", zone, err)
			continue
		}
		if _, err := time.LoadLocationFromTZData(zone, data); err != nil {
			t.Errorf("zone %s: %v", zone, err)
		}
	}
	data, _ := os.ReadFile(filepath.Join(dir, "Europe/Berlin"))
	if berlin, err := time.LoadLocationFromTZData("Europe/Berlin", data); err == nil {
		if _, off := time.Date(2024, 7, 1, 12, 0, 0, 0, time.UTC).In(berlin).Zone(); off != 2*3600 {
			t.Errorf("Europe/Berlin in July 2024 is UTC%+d s, want +7200 (CEST)", off)
		}
	}
	if n < 300 {
		t.Errorf("%d zones in %s", n, dir)
	}
}

// checkTampering plants what a verification must catch: an SBOM changed
// after signing, a SHA256SUMS that is not what was signed, another image
// pushed under the release's tag, and the release's image with its SBOM
// missing.
func checkTampering(t *testing.T, dist, signers, repo, tag string) {
	t.Helper()
	ctx := t.Context()
	dir := t.TempDir()
	tampered := filepath.Join(dir, "tampered")
	copyDir := func() {
		t.Helper()
		os.RemoveAll(tampered)
		if out, err := exec.Command("cp", "-r", dist, tampered).CombinedOutput(); err != nil {
			t.Fatalf("cp: %v\n%s", err, out)
		}
	}
	edit := func(file string, f func([]byte) []byte) {
		t.Helper()
		p := filepath.Join(tampered, file)
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, f(b), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mustFail := func(what, want string, args ...string) {
		t.Helper()
		out, err := releaseScript(t, args...)
		if err == nil {
			t.Errorf("%s: scripts/release.sh %s passed:\n%s", what, strings.Join(args, " "), out)
		} else if !strings.Contains(out, want) {
			t.Errorf("%s: failed without saying %q:\n%s", what, want, out)
		}
	}

	copyDir()
	edit("worker-linux-arm64.sbom.json", func(b []byte) []byte { return bytes.Replace(b, []byte("kafka-go"), []byte("kafka-gO"), 1) })
	mustFail("an SBOM edited after signing", "worker-linux-arm64.sbom.json: FAILED", "--verify", signers, tampered)

	copyDir()
	edit("SHA256SUMS", func(b []byte) []byte {
		return append(b, []byte("0000000000000000000000000000000000000000000000000000000000000000  extra\n")...)
	})
	mustFail("SHA256SUMS edited after signing", "Signature verification failed", "--verify", signers, tampered)

	stranger := filepath.Join(dir, "stranger")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "stranger", "-f", stranger).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v\n%s", err, out)
	}
	copyDir()
	if _, err := releaseScript(t, "--sign", stranger, tampered); err != nil {
		t.Fatal(err)
	}
	mustFail("signed by a key the signers file does not hold", "signed by no key", "--verify", signers, tampered)

	// Another image under the release's tag: the registry says it is
	// there, and it is not the signed digest.
	r, err := name.NewRepository(repo)
	if err != nil {
		t.Fatal(err)
	}
	impostor, err := random.Index(256, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(r.Tag(tag), impostor, remote.WithContext(ctx)); err != nil {
		t.Fatal(err)
	}
	mustFail("another image under the tag", "not the image of", "--verify", signers, dist, repo+":"+tag)

	// The signed image, with no SBOM beside it: in a repository of its own,
	// pushed without the release script.
	idx, err := remote.Index(r.Digest(mustDigest(t, dist).String()), remote.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	bare := r.Registry.Repo("cellttl/bare")
	if err := remote.WriteIndex(bare.Tag(tag), idx, remote.WithContext(ctx)); err != nil {
		t.Fatal(err)
	}
	mustFail("the image without its SBOMs", "no referrer of", "--verify", signers, dist, bare.Tag(tag).String())
}

func mustDigest(t *testing.T, dist string) v1.Hash {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dist, indexJSON))
	if err != nil {
		t.Fatal(err)
	}
	h, _, err := v1.SHA256(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	return h
}
