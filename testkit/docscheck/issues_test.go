package docscheck

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// issueRE finds an issue or a pull request cited by its number: the
// word, singular or plural, any case, then the number, with or without
// "#"; "PR" and "pull request" too. A bare "#" and number in prose is
// found apart (bareIssueRE), code left out: row keys hold # too.
var (
	issueRE     = regexp.MustCompile(`(?i)\b(?:issues?|pull requests?|PRs?)\s*#?[0-9]+`)
	bareIssueRE = regexp.MustCompile(`(?:^|[\s(\[])#[0-9]+\b`)
)

// No Markdown file, and no Go file, cites an issue by its number: a reader
// cannot look it up.
func TestNoIssueNumbers(t *testing.T) {
	for _, f := range markdownFiles(t) {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if m := issueRE.FindString(line); m != "" {
				t.Errorf("%s:%d: %q: name the capability, not the issue", f, i+1, m)
			}
		}
		p := parsePage(f, string(b))
		for _, blk := range append(append(append([]textBlock{}, p.prose...), p.tables...), p.headings...) {
			_, text := codeSpans(blk.text, " ")
			if m := bareIssueRE.FindString(text); m != "" {
				t.Errorf("%s:%d: %q: name the capability, not the issue", f, blk.line, strings.TrimSpace(m))
			}
		}
	}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel != "." && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			if m := issueRE.FindString(line); m != "" {
				t.Errorf("%s:%d: %q: name the capability, not the issue", rel, i+1, m)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
