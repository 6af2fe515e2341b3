package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// top is the repository's top, from this package's directory.
const top = "../.."

// section is one release's part of the CHANGELOG: "## 0.2.2 (2026-11-29)"
// once released, "## 0.2.3 (unreleased)" while in the making.
type section struct {
	version, date, body string
}

func (s section) released() bool {
	_, err := time.Parse(time.DateOnly, s.date)
	return err == nil
}

// changelog reads the CHANGELOG's release sections, newest first.
func changelog(t *testing.T) []section {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(top, "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	heading := regexp.MustCompile(`(?m)^## (\d+\.\d+\.\d+) \(([^)]*)\)\n`)
	var out []section
	idx := heading.FindAllSubmatchIndex(data, -1)
	for i, m := range idx {
		end := len(data)
		if i+1 < len(idx) {
			end = idx[i+1][0]
		}
		if next := bytes.Index(data[m[1]:end], []byte("\n## ")); next >= 0 {
			end = m[1] + next
		}
		out = append(out, section{version: string(data[m[2]:m[3]]), date: string(data[m[4]:m[5]]), body: string(data[m[1]:end])})
	}
	if len(out) == 0 {
		t.Fatal("CHANGELOG.md has no release section (## MAJOR.MINOR.PATCH (date))")
	}
	return out
}

// git runs git at the repository's top.
func git(args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = top
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", errors.New(strings.TrimSpace(err.Error() + ": " + stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// releaseCommit is the commit that is release v: the one that set
// Version to it (the next commit opens the next -dev version). Releases
// made before that rule were tagged on a later commit, which their
// CHANGELOG section names ("Released at commit ...").
func releaseCommit(t *testing.T, s section) (string, error) {
	t.Helper()
	if m := regexp.MustCompile(`Released at commit ([0-9a-f]{7,40})\b`).FindStringSubmatch(s.body); m != nil {
		return git("rev-parse", "--verify", m[1]+"^{commit}")
	}
	log, err := git("log", "--format=%H", "-S", `const Version = "`+s.version+`"`, "--", "internal/release/release.go")
	if err != nil || log == "" {
		return "", errors.Join(errors.New("no commit set Version to "+s.version), err)
	}
	lines := strings.Split(log, "\n")
	return lines[len(lines)-1], nil // the oldest: the one that set it
}

// One version names one build. Between releases the tree says the next
// release's -dev version, newer than every release the CHANGELOG dates,
// with the section in the making first. A tree that says a release is
// that release's commit: the same version at any other commit would give
// two builds of different sources one name.
func TestVersionNamesOneBuild(t *testing.T) {
	secs := changelog(t)
	first := secs[0]
	if !released(Version) {
		core := Core(Version)
		if first.version != core || first.released() {
			t.Errorf("this tree is %s, and the CHANGELOG's first section is %s (%s): want ## %s (unreleased) while it is made", Version, first.version, first.date, core)
		}
		for _, s := range secs {
			if c, err := Compare(core, s.version); s.released() && (err != nil || c <= 0) {
				t.Errorf("this tree is %s, but %s was released on %s: open the version after it", Version, s.version, s.date)
			}
		}
		return
	}
	if first.version != Version || !first.released() {
		t.Fatalf("this tree is release %s, but the CHANGELOG's first section is %s (%s): date the release's section", Version, first.version, first.date)
	}
	head, err := git("rev-parse", "HEAD")
	if err != nil {
		t.Skipf("not a git checkout (%v): which commit is release %s cannot be told here", err, Version)
	}
	commit, err := releaseCommit(t, first)
	if err != nil {
		t.Logf("release %s is not committed yet: this tree is the release (%v)", Version, err)
		return
	}
	if commit != head {
		t.Errorf("release %s is commit %.12s; this is %.12s, which must open the next version: scripts/release.sh --version <the next patch, minor or major>-dev", Version, commit, head)
	}
}

// The previous release's source kept in cmd/worker/testdata (which the
// upgrade test builds) is the newest release before this one, file for
// file as its commit has it.
func TestKeptReleaseIsItsCommit(t *testing.T) {
	kept, _ := filepath.Glob(filepath.Join(top, "cmd", "worker", "testdata", "release-*.tar.gz"))
	if len(kept) != 1 {
		t.Fatalf("cmd/worker/testdata keeps %d release sources (%v), want the previous release's alone", len(kept), kept)
	}
	archive := kept[0]
	version := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(archive), "release-"), ".tar.gz")
	var previous section
	for _, s := range changelog(t) {
		if c, err := Compare(s.version, Version); err == nil && c < 0 && s.released() {
			previous = s
			break
		}
	}
	if previous.version != version {
		rev, err := releaseCommit(t, previous)
		if err != nil {
			rev = "<its commit>"
		}
		t.Fatalf("cmd/worker/testdata keeps %s, but the release before %s is %s: scripts/release.sh --source %.12s cmd/worker/testdata/release-%s.tar.gz, and remove %s",
			version, Version, previous.version, rev, previous.version, filepath.Base(archive))
	}
	if _, err := git("rev-parse", "HEAD"); err != nil {
		t.Skipf("not a git checkout (%v): the kept %s cannot be checked against its commit", err, version)
	}
	commit, err := releaseCommit(t, previous)
	if err != nil {
		t.Fatalf("release %s: %v", version, err)
	}
	out, err := exec.Command("git", "-C", top, "archive", "--format=tar", commit).Output()
	if err != nil {
		t.Fatalf("git archive %s: %v", commit, err)
	}
	at := readTar(t, bytes.NewReader(out))
	files := readTarGz(t, archive)
	for _, want := range []string{"go.mod", "go.sum", "cmd/worker/main.go", "internal/release/release.go", "deploy/k8s/base/kustomization.yaml"} {
		if files[want] == nil {
			t.Errorf("%s lacks %s", archive, want)
		}
	}
	for path, body := range files {
		if !bytes.Equal(body, at[path]) {
			t.Errorf("%s: %s differs from release %s's commit %.12s", archive, path, version, commit)
		}
	}
}

// readTarGz and readTar are testenv.ReadTarGz and ReadTar: this package's
// tests cannot import the test kit, which imports this package.
func readTarGz(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return readTar(t, z)
}

func readTar(t *testing.T, r io.Reader) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = body
	}
}
