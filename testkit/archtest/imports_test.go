package archtest

import (
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

const module = "github.com/cellttl/cellttl"

// pkg is a package of the module with what it depends on, directly
// (Imports) and transitively (Deps), by path inside the module.
type pkg struct {
	Path    string
	Imports map[string]bool
	Deps    map[string]bool
}

var (
	graphOnce sync.Once
	graphPkgs map[string]*pkg
	graphErr  error
)

// graph lists the module's packages (not their tests), once per run.
func graph(t *testing.T) map[string]*pkg {
	t.Helper()
	graphOnce.Do(func() { graphPkgs, graphErr = listPackages() })
	if graphErr != nil {
		t.Fatal(graphErr)
	}
	return graphPkgs
}

func listPackages() (map[string]*pkg, error) {
	out, err := exec.Command("go", "list", "-json", module+"/...").Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w", err)
	}
	inModule := func(list []string) map[string]bool {
		m := map[string]bool{}
		for _, p := range list {
			if rel, ok := strings.CutPrefix(p, module+"/"); ok {
				m[rel] = true
			} else if !strings.Contains(strings.SplitN(p, "/", 2)[0], ".") {
				continue // the standard library
			} else {
				m[p] = true
			}
		}
		return m
	}
	pkgs := map[string]*pkg{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p struct {
			ImportPath    string
			Imports, Deps []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			return nil, err
		}
		rel := strings.TrimPrefix(p.ImportPath, module+"/")
		pkgs[rel] = &pkg{Path: rel, Imports: inModule(p.Imports), Deps: inModule(p.Deps)}
	}
	if len(pkgs) < 20 {
		return nil, fmt.Errorf("go list found %d packages", len(pkgs))
	}
	return pkgs, nil
}

// under reports whether path lies in folder (or is it).
func under(path, folder string) bool { return path == folder || strings.HasPrefix(path, folder+"/") }

// A package under a folder never needs a package that imports that
// folder: the tree then says which way the code depends. (A package
// under erasure that needed retention, which imports erasure, would make
// the folder contradict the imports.)
//
// Every folder counts, a package or not: internal/, which holds leaves
// only, is a unit too, and so is each top-level folder.
func TestFoldersAgreeWithImports(t *testing.T) {
	pkgs := graph(t)
	folders := map[string]bool{}
	for path := range pkgs {
		for f := path; f != "."; f = filepath.Dir(f) {
			folders[f] = true
		}
	}
	for path, p := range pkgs {
		for folder := range folders {
			if folder == path || !under(path, folder) {
				continue
			}
			for dep := range p.Deps {
				d, ok := pkgs[dep]
				if !ok || under(dep, folder) {
					continue
				}
				for back := range d.Deps {
					if under(back, folder) {
						t.Errorf("%s lies under %s, yet depends on %s, which depends on %s", path, folder, dep, back)
						break
					}
				}
			}
		}
	}
}

// hotPath are the packages every event goes through, and what they
// stand on: the jobs that change retention sit above them, never below.
var hotPath = []string{"ingest", "ingest/kwire", "pipeline", "sink", "event", "expiry", "erasure", "rowkey", "tenants", "deadletter", "schema", "schema/registry"}

// Retention has one home: the statement, the jobs and the erasure protocol
// live in retention and under it; the ledger the workers obey (erasure)
// and the rest of the hot path know nothing of them.
func TestRetentionSitsAboveTheHotPath(t *testing.T) {
	pkgs := graph(t)
	for _, path := range hotPath {
		p, ok := pkgs[path]
		if !ok {
			t.Errorf("no package %s: update the list", path)
			continue
		}
		for dep := range p.Deps {
			if under(dep, "retention") {
				t.Errorf("%s depends on %s: the hot path must not need the retention jobs", path, dep)
			}
		}
	}
	for path := range pkgs {
		if strings.Contains(path, "forget") && !under(path, "retention") {
			t.Errorf("%s: forgetting lives under retention", path)
		}
	}
}

// edges are packages nothing of the product may need: the commands, the
// load tests, the test kits and the suites.
var edges = []string{"cmd", "loadtest", "faults", "deploy", "scripts", "testkit"}

// The commands and the lab stay at the edges: no package of the product
// depends on a command, a load test or a test kit, and the test kits
// depend on no feature package (they start services and processes;
// tests bring the features).
func TestCommandsAndLabStayAtTheEdges(t *testing.T) {
	pkgs := graph(t)
	isEdge := func(path string) bool {
		for _, e := range edges {
			if under(path, e) {
				return true
			}
		}
		return false
	}
	for path, p := range pkgs {
		if isEdge(path) {
			continue
		}
		for dep := range p.Deps {
			if isEdge(dep) {
				t.Errorf("%s (the product) depends on %s", path, dep)
			}
		}
	}
	for path, p := range pkgs {
		if !under(path, "testkit/testenv") && !under(path, "internal/inproc") && !under(path, "testkit/lab") {
			continue
		}
		for dep := range p.Deps {
			if _, ours := pkgs[dep]; ours && !under(dep, "internal") && !under(dep, "testkit") {
				t.Errorf("test kit %s depends on feature package %s", path, dep)
			}
		}
	}
}
