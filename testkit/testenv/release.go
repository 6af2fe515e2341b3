package testenv

import (
	"archive/tar"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cellttl/cellttl/internal/release"
)

// PreviousRelease finds the newest release source kept in dir (the
// repository's cmd/worker/testdata, as a test names it from its package)
// older than this build's version: what the upgrade test builds and the
// deploy tests apply before this release's files. It fails t when there
// is none, with how to keep one.
func PreviousRelease(t testing.TB, dir string) (version, archive string) {
	t.Helper()
	found, _ := filepath.Glob(filepath.Join(dir, "release-*.tar.gz"))
	for _, f := range found {
		v := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "release-"), ".tar.gz")
		if c, err := release.Compare(v, release.Version); err != nil || c >= 0 {
			continue
		}
		if c, _ := release.Compare(v, version); version == "" || c > 0 {
			version, archive = v, f
		}
	}
	if version == "" {
		t.Fatalf("no source of a release before %s in %s (scripts/release.sh --source v<previous> cmd/worker/testdata/release-<previous>.tar.gz)", release.Version, dir)
	}
	return version, archive
}

// ReadTarGz returns a tar.gz archive's regular files, by their cleaned
// paths; files whose path leaves the archive's top are left out.
func ReadTarGz(t testing.TB, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return ReadTar(t, path, zr)
}

// ReadTar is ReadTarGz of an uncompressed archive read from r; what names
// it in failures.
func ReadTar(t testing.TB, what string, r io.Reader) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		name := filepath.Clean(h.Name)
		if h.Typeflag != tar.TypeReg || !filepath.IsLocal(name) {
			continue
		}
		if files[name], err = io.ReadAll(tr); err != nil {
			t.Fatalf("%s: %s: %v", what, h.Name, err)
		}
	}
}
