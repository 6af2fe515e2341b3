package deploy

import (
	"os/exec"
	"regexp"
	"slices"
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

// The tools that make the release (go-containerregistry for the image,
// the root certificates it writes out) are no part of the worker: they
// share go.mod with it, and the production build links none of them.
func TestBuildToolsStayOutOfTheWorker(t *testing.T) {
	out, err := exec.Command("go", "list", "-tags", "nodemo", "-deps", "../cmd/worker").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	pkgs := strings.Fields(string(out))
	for _, p := range pkgs {
		for _, tool := range []string{"github.com/google/go-containerregistry/", "golang.org/x/crypto/x509roots/", "github.com/cellttl/cellttl/scripts/"} {
			if strings.HasPrefix(p, tool) {
				t.Errorf("the worker links %s, a package of the release's tools", p)
			}
		}
	}
	if !slices.Contains(pkgs, "github.com/segmentio/kafka-go") {
		t.Fatalf("go list read no worker: %s", out)
	}
}
