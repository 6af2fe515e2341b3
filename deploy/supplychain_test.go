package deploy

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The production build links no pre-release module: a version with a
// pre-release tag (v1.2.3-dev, -rc.1) that is not a pseudo-version (a
// commit of a module that tags no releases, such as genproto) is a build
// its authors have not released.
func TestNoPrereleaseInTheProductionBuild(t *testing.T) {
	out, err := exec.Command("go", "list", "-tags", "nodemo", "-deps", "-f", "{{with .Module}}{{.Path}} {{.Version}}{{end}}", "../cmd/worker").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	// A pseudo-version of a commit after a release or of a module that
	// tags none; one built on a pre-release tag (v1.2.3-rc.1.0.<ts>-<hash>)
	// is a pre-release.
	pseudo := regexp.MustCompile(`^\d+\.\d+\.\d+-(0\.)?\d{14}-[0-9a-f]{12}$`)
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, version, _ := strings.Cut(line, " ")
		if version == "" || seen[line] {
			continue // the main module
		}
		seen[line] = true
		core, _, _ := strings.Cut(strings.TrimPrefix(version, "v"), "+")
		if strings.Contains(core, "-") && !pseudo.MatchString(core) {
			t.Errorf("%s %s is a pre-release: move to a released version", path, version)
		}
	}
	if len(seen) < 20 {
		t.Fatalf("only %d modules listed: %s", len(seen), out)
	}
}

// The Docker build context (the repository, less .dockerignore) holds the
// sources the build needs and none of the test services' secrets.
func TestDockerBuildContext(t *testing.T) {
	data, err := os.ReadFile("../.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, l := range strings.Split(string(data), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			patterns = append(patterns, l)
		}
	}
	// As Docker matches: a pattern excludes a path it matches, and all
	// below it; "**/" matches any number of directories.
	ignored := func(rel string) bool {
		parts := strings.Split(rel, "/")
		for _, p := range patterns {
			base := strings.TrimPrefix(p, "**/")
			for i := range parts {
				prefix := strings.Join(parts[:i+1], "/")
				if ok, _ := filepath.Match(p, prefix); ok {
					return true
				}
				if base != p {
					if ok, _ := filepath.Match(base, parts[i]); ok {
						return true
					}
				}
			}
		}
		return false
	}
	// A planted secret where the test services keep theirs, and a key
	// elsewhere: both must stay out.
	root := t.TempDir()
	for _, f := range []string{".services/tls/broker.key", ".services/sasl/password", "scripts/gencerts/ca.pem", "go.mod", "cmd/worker/main.go", "tenants.yaml"} {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, f), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var context []string
	if err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		rel, _ := filepath.Rel(root, path)
		if err != nil || d.IsDir() || ignored(rel) {
			return err
		}
		context = append(context, rel)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(context, " "); got != "cmd/worker/main.go go.mod tenants.yaml" {
		t.Errorf("build context %q, want the sources alone", got)
	}
}
