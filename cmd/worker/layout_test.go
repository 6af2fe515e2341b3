package main

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// docs/design.md's layout table names every package of the module (a
// directory entry ending in / covers those under it), and nothing that is
// not there.
func TestLayoutTableMatchesTheTree(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/design.md")
	if err != nil {
		t.Fatal(err)
	}
	named := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z0-9/_-]+)` \\|").FindAllStringSubmatch(string(doc), -1) {
		named[m[1]] = true
	}
	out, err := exec.Command("go", "list", "-f", "{{.Dir}}", "github.com/cellttl/cellttl/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	prefix := strings.TrimSpace(string(root)) + "/"
	covered := map[string]bool{}
	for _, dir := range strings.Fields(string(out)) {
		pkg := strings.TrimPrefix(dir, prefix)
		if named[pkg] {
			covered[pkg] = true
			continue
		}
		found := false
		for entry := range named {
			if strings.HasSuffix(entry, "/") && strings.HasPrefix(pkg+"/", entry) {
				covered[entry], found = true, true
			}
		}
		if !found {
			t.Errorf("package %s is not in docs/design.md's layout table", pkg)
		}
	}
	for entry := range named {
		if !covered[entry] {
			if _, err := os.Stat("../../" + entry); err != nil {
				t.Errorf("docs/design.md's layout table names %s, which is not in the tree", entry)
			}
		}
	}
}
