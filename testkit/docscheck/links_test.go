package docscheck

import (
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	linkRE   = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)`)
	schemeRE = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// Every relative link names a file or folder that exists, and every
// #anchor a heading of the page it points to.
func TestLinks(t *testing.T) {
	pages := map[string]*page{}
	load := func(p string) *page {
		if pages[p] == nil {
			pages[p] = readPage(t, p)
		}
		return pages[p]
	}
	for _, f := range checkedFiles(t) {
		p := load(f)
		blocks := append(append(append([]textBlock{}, p.prose...), p.tables...), p.headings...)
		for _, b := range blocks {
			_, text := codeSpans(b.text, "")
			for _, m := range linkRE.FindAllStringSubmatch(text, -1) {
				target := m[1]
				if target == "" || schemeRE.MatchString(target) || strings.HasPrefix(target, "//") {
					continue
				}
				file, anchor, _ := strings.Cut(target, "#")
				dest := f
				if file != "" {
					dest = path.Clean(path.Join(path.Dir(f), file))
					if strings.HasPrefix(dest, "../") {
						t.Errorf("%s:%d: link %s leaves the repository", f, b.line, target)
						continue
					}
					if _, err := os.Stat(filepath.Join(root, dest)); err != nil {
						t.Errorf("%s:%d: link %s: no file %s", f, b.line, target, dest)
						continue
					}
				}
				if anchor == "" || !strings.HasSuffix(dest, ".md") {
					continue
				}
				if !load(dest).anchors[strings.ToLower(anchor)] {
					t.Errorf("%s:%d: link %s: %s has no heading with the anchor #%s", f, b.line, target, dest, anchor)
				}
			}
		}
	}
}

// The anchors GitHub gives headings, as slugOf computes them.
func TestSlugOf(t *testing.T) {
	for heading, want := range map[string]string{
		"Erasing users: `worker forget`":                      "erasing-users-worker-forget",
		"A dead letter's retention":                           "a-dead-letters-retention",
		"tenants.yaml":                                        "tenantsyaml",
		"Scale: 48 partitions, 10,000 tenants, three sizes":   "scale-48-partitions-10000-tenants-three-sizes",
		"What kafka-go cannot do, at 150 pods":                "what-kafka-go-cannot-do-at-150-pods",
		"The writes in flight settle before the commit (06b)": "the-writes-in-flight-settle-before-the-commit-06b",
		"One setting per table: the workers' record":          "one-setting-per-table-the-workers-record",
		"An **emphasised** [link](x.md) -- twice":             "an-emphasised-link----twice",
		"default_ttl and `min_ttl`":                           "default_ttl-and-min_ttl",
	} {
		if got := slugOf(heading); got != want {
			t.Errorf("slugOf(%q) = %q, want %q", heading, got, want)
		}
	}
	p := parsePage("x.md", "# A\n\n## A\n\n```\n# not a heading\n```\n## A\n")
	for _, a := range []string{"a", "a-1", "a-2"} {
		if !p.anchors[a] {
			t.Errorf("repeated headings: no anchor %s in %v", a, p.anchors)
		}
	}
	if p.anchors["not-a-heading"] {
		t.Error("a # line in a code block was taken for a heading")
	}
}
