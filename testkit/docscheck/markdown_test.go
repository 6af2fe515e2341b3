package docscheck

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// root is the module's root, from this package's directory.
const root = "../.."

// page is a Markdown file cut into the parts the checks read.
type page struct {
	path     string      // from the module's root, with slashes
	prose    []textBlock // paragraphs and list items, each joined into one line
	tables   []textBlock // table rows, one each
	headings []textBlock // heading lines, without the #s
	code     []codeBlock // fenced code blocks
	anchors  map[string]bool
}

// textBlock is text outside code blocks, with the line it starts on.
type textBlock struct {
	line int
	text string
}

// codeBlock is a fenced code block: its info string and its lines.
type codeBlock struct {
	line  int
	lang  string
	lines []string
}

var (
	fenceRE   = regexp.MustCompile("^ {0,3}(`{3,}|~{3,})\\s*([^`\\s]*)")
	headingRE = regexp.MustCompile(`^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
	listRE    = regexp.MustCompile(`^\s*(?:[-*+]|\d+[.)])\s+`)
	commentRE = regexp.MustCompile(`(?s)<!--.*?-->`)
)

// readPage reads and cuts the Markdown file at path (from the root).
func readPage(t *testing.T, path string) *page {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		t.Fatal(err)
	}
	return parsePage(path, string(b))
}

// parsePage cuts Markdown text: fenced code blocks first, then headings,
// table rows, and the rest as blocks that a blank line or a list item
// begins.
func parsePage(path, text string) *page {
	p := &page{path: path, anchors: map[string]bool{}}
	lines := strings.Split(commentRE.ReplaceAllStringFunc(text, func(c string) string {
		return strings.Repeat("\n", strings.Count(c, "\n")) // keep the line numbers
	}), "\n")
	var cur *textBlock
	end := func() {
		if cur != nil {
			p.prose = append(p.prose, *cur)
			cur = nil
		}
	}
	slugs := map[string]int{}
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if m := fenceRE.FindStringSubmatch(line); m != nil {
			end()
			cb := codeBlock{line: i + 1, lang: m[2]}
			fence := m[1]
			for i++; i < len(lines); i++ {
				if c := strings.TrimSpace(lines[i]); strings.HasPrefix(c, fence[:3]) && len(strings.TrimRight(c, fence[:1])) == 0 && len(c) >= len(fence) {
					break
				}
				cb.lines = append(cb.lines, lines[i])
			}
			p.code = append(p.code, cb)
			continue
		}
		trimmed := strings.TrimSpace(line)
		switch {
		case trimmed == "":
			end()
		case headingRE.MatchString(line):
			end()
			h := headingRE.FindStringSubmatch(line)[2]
			p.headings = append(p.headings, textBlock{i + 1, h})
			slug := slugOf(h)
			if n := slugs[slug]; n > 0 {
				p.anchors[slug+"-"+strconv.Itoa(n)] = true
			} else {
				p.anchors[slug] = true
			}
			slugs[slug]++
		case strings.HasPrefix(trimmed, "|"):
			end()
			p.tables = append(p.tables, textBlock{i + 1, trimmed})
		case listRE.MatchString(line):
			end()
			cur = &textBlock{i + 1, strings.TrimSpace(listRE.ReplaceAllString(line, ""))}
		default:
			trimmed = strings.TrimSpace(strings.TrimLeft(trimmed, ">"))
			if cur == nil {
				cur = &textBlock{i + 1, trimmed}
			} else {
				cur.text += " " + trimmed
			}
		}
	}
	end()
	for _, m := range regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`).FindAllStringSubmatch(text, -1) {
		p.anchors[m[1]] = true
	}
	return p
}

var (
	linkTextRE = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	emphasisRE = regexp.MustCompile("[`*]")
)

// slugOf is the anchor GitHub gives a heading: its text as rendered (code
// marks, emphasis and link targets gone), in lower case, without any
// character that is not a letter, a mark, a digit, a connector (_), a
// space or a hyphen, each space then a hyphen. A repeated slug gets -1,
// -2, ... (parsePage).
func slugOf(heading string) string {
	s := linkTextRE.ReplaceAllString(heading, "$1")
	s = emphasisRE.ReplaceAllString(s, "")
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(s)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || unicode.IsLetter(r) || unicode.IsMark(r) || unicode.IsDigit(r) || unicode.Is(unicode.Pc, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// codeSpanRE finds inline code: a run of backticks, then anything up to
// a run of the same length.
var codeSpanRE = regexp.MustCompile("(`+)")

// codeSpans returns the inline code of s, and s with each span replaced
// by repl.
func codeSpans(s, repl string) (spans []string, rest string) {
	var out strings.Builder
	for {
		loc := codeSpanRE.FindStringIndex(s)
		if loc == nil {
			out.WriteString(s)
			break
		}
		ticks := s[loc[0]:loc[1]]
		closeAt := -1
		for j := loc[1]; j < len(s); {
			k := strings.Index(s[j:], ticks)
			if k < 0 {
				break
			}
			k += j
			// the closing run must be exactly as long
			e := k + len(ticks)
			if e < len(s) && s[e] == '`' {
				for e < len(s) && s[e] == '`' {
					e++
				}
				j = e
				continue
			}
			closeAt = k
			break
		}
		if closeAt < 0 {
			out.WriteString(s[:loc[1]])
			s = s[loc[1]:]
			continue
		}
		out.WriteString(s[:loc[0]])
		out.WriteString(repl)
		spans = append(spans, strings.TrimSpace(s[loc[1]:closeAt]))
		s = s[closeAt+len(ticks):]
	}
	return spans, out.String()
}

// The files the checks read.

// markdownFiles is every Markdown file of the module, from its root,
// sorted; testdata and hidden directories left out.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules" || strings.HasPrefix(rel, "loadtest-report")) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(rel, ".md") {
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	return files
}

// checkedFiles are the documents whose links and commands are checked:
// README.md, docs/, every DESIGN.md, BENCHMARKS.md, RELIABILITY.md and
// CHANGELOG.md.
func checkedFiles(t *testing.T) []string {
	var out []string
	for _, f := range markdownFiles(t) {
		switch {
		case f == "README.md", f == "BENCHMARKS.md", f == "RELIABILITY.md", f == "CHANGELOG.md",
			strings.HasPrefix(f, "docs/"), f == "DESIGN.md", strings.HasSuffix(f, "/DESIGN.md"):
			out = append(out, f)
		}
	}
	return out
}

// readablePages are the pages held to the sentence bound: docs/, README.md
// and every DESIGN.md.
func readablePage(path string) bool {
	return path == "README.md" || strings.HasPrefix(path, "docs/") || path == "DESIGN.md" || strings.HasSuffix(path, "/DESIGN.md")
}
