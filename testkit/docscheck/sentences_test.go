package docscheck

import (
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// maxMedianWords bounds the median sentence of a page a person reads to
// the end: docs/, README.md and every DESIGN.md. maxSentenceWords bounds
// each sentence of those pages: one paragraph-long sentence moves no
// median, and still loses its reader.
const (
	maxMedianWords   = 22
	maxSentenceWords = 50
)

// The measure, precisely:
//
//   - The median counts prose alone: paragraphs, list items and block
//     quotes. Code blocks, headings and HTML comments count nowhere. A
//     table's cells are held to the longest sentence as prose is (a
//     sentence moved into a table loses its reader as well), but not to
//     the median: a cell of a figure or a name is no sentence.
//   - A paragraph or a list item is one run of text (a list item ends
//     where the next begins, so a list's lead-in is apart from its items).
//   - A link counts as its text; an image as nothing; an inline code span
//     as the words it holds (`--ttl-from json:ttl` is two), its dots
//     ending nothing (`tenants.yaml`).
//   - A sentence ends at ".", "!" or "?" (closing brackets, quotes and
//     emphasis after it included) followed by a space or the end of the
//     run; not at "e.g.", "i.e.", "cf.", "vs." or "...". Semicolons and
//     colons do not end a sentence. A run without an end is one sentence.
//   - A word is a run of non-space characters holding a letter or a digit.
//     A sentence of no word is no sentence.
//   - The median of a page is the middle length of its sentences sorted
//     (the mean of the two middle ones for an even count).
func sentenceLengths(p *page) []int {
	var out []int
	for _, s := range pageSentences(p) {
		out = append(out, s.words)
	}
	return out
}

// sentence is one sentence of a page, with the line its run of prose
// starts on.
type sentence struct {
	line  int
	words int
	text  string
}

func pageSentences(p *page) []sentence {
	var out []sentence
	for _, b := range p.prose {
		for _, s := range sentences(b.text) {
			if n := wordCount(s); n > 0 {
				out = append(out, sentence{b.line, n, strings.TrimSpace(s)})
			}
		}
	}
	return out
}

// cellSentences are the sentences of a page's table cells, each cell a
// run of its own (the header row's too; the rule row has none).
func cellSentences(p *page) []sentence {
	var out []sentence
	for _, row := range p.tables {
		text := strings.TrimSpace(row.text)
		if strings.HasPrefix(text, "|-") || strings.HasPrefix(text, "| -") {
			continue
		}
		for _, cell := range strings.Split(strings.Trim(text, "|"), " | ") {
			for _, s := range sentences(cell) {
				if n := wordCount(s); n > 0 {
					out = append(out, sentence{row.line, n, strings.TrimSpace(s)})
				}
			}
		}
	}
	return out
}

var (
	imageRE    = regexp.MustCompile(`!\[[^\]]*\]\([^)]*\)`)
	linkOnlyRE = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	endRE      = regexp.MustCompile(`[.!?][)\]"'’”*_]*(\s+|$)`)
	notEndRE   = regexp.MustCompile(`(?i)(?:^|\s|\()(?:e\.g|i\.e|cf|vs)\.$|\.\.\.$|…$`)
)

// sentences cuts a run of prose at its sentence ends.
func sentences(text string) []string {
	text = codeAsWords(text)
	text = imageRE.ReplaceAllString(text, "")
	text = linkOnlyRE.ReplaceAllString(text, "$1")
	var out []string
	start := 0
	for _, loc := range endRE.FindAllStringIndex(text, -1) {
		end := loc[0] + 1 // just past the mark
		if notEndRE.MatchString(text[start:end]) {
			continue
		}
		out = append(out, text[start:loc[1]])
		start = loc[1]
	}
	if strings.TrimSpace(text[start:]) != "" {
		out = append(out, text[start:])
	}
	return out
}

func wordCount(s string) int {
	n := 0
	for _, w := range strings.Fields(s) {
		if strings.IndexFunc(w, func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }) >= 0 {
			n++
		}
	}
	return n
}

func median(xs []int) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]int(nil), xs...)
	sort.Ints(s)
	if len(s)%2 == 1 {
		return float64(s[len(s)/2])
	}
	return float64(s[len(s)/2-1]+s[len(s)/2]) / 2
}

// Each page's median sentence, printed (go test -v); the pages a person
// reads to the end held to maxMedianWords, and each of their sentences to
// maxSentenceWords. DOCSCHECK_LONG=N lists every
// sentence of more than N words, to find the ones to cut.
func TestSentenceLength(t *testing.T) {
	long, _ := strconv.Atoi(os.Getenv("DOCSCHECK_LONG"))
	for _, f := range checkedFiles(t) {
		p := readPage(t, f)
		lengths := sentenceLengths(p)
		if long > 0 {
			for _, s := range pageSentences(p) {
				if s.words > long {
					t.Logf("%s:%d: %d words: %s", f, s.line, s.words, s.text)
				}
			}
		}
		m := median(lengths)
		bound := "-"
		if readablePage(f) {
			bound = "≤ 22"
		}
		t.Logf("%-28s median %4.1f words over %4d sentences (bound %s)", f, m, len(lengths), bound)
		if readablePage(f) && m > maxMedianWords {
			t.Errorf("%s: the median sentence is %.1f words, more than %d: cut the long ones into several, or into a list", f, m, maxMedianWords)
		}
		for _, s := range append(pageSentences(p), cellSentences(p)...) {
			if readablePage(f) && s.words > maxSentenceWords {
				t.Errorf("%s:%d: a sentence of %d words, more than %d: %.60s...", f, s.line, s.words, maxSentenceWords, s.text)
			}
		}
	}
}

func TestSentences(t *testing.T) {
	for text, want := range map[string][]int{
		"One two three. Four five?":                              {3, 2},
		"See `worker run --ttl-from json:ttl`. Then go.":         {5, 2},
		"A [long link text](x.md#y) ends (here.) Next one":       {6, 2},
		"Numbers like 1.5h and e.g. this do not end it":          {10},
		"A colon: does not end; nor a semicolon":                 {8},
		"It says `tenants.yaml` twice: tenants.yaml. Done":       {5, 1},
		"Ends with emphasis **here.** And a quote \"there.\" Ok": {4, 4, 1},
	} {
		var got []int
		for _, s := range sentences(text) {
			if n := wordCount(s); n > 0 {
				got = append(got, n)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("sentences(%q): lengths %v, want %v", text, got, want)
		}
	}
	if m := median([]int{1, 5, 30, 7}); m != 6 {
		t.Errorf("median = %v, want 6", m)
	}
}

// codeAsWords puts each inline code span's text back in place of the
// span, with its own sentence marks made inert: `tenants.yaml` ends
// nothing, and `--ttl-from json:ttl` is two words.
func codeAsWords(s string) string {
	spans, rest := codeSpans(s, "\x00")
	inert := strings.NewReplacer(".", "·", "!", "¡", "?", "¿")
	for _, sp := range spans {
		rest = strings.Replace(rest, "\x00", inert.Replace(sp), 1)
	}
	return rest
}
