package docscheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// The commands the docs show exist, with the flags they show: `worker
// <command> --flag` as docs/reference/flags.md lists them, `make <target>`
// as the Makefile has it, `go run ./loadtest [sub] --flag` as loadtest/
// declares them, and every scripts/ path.
func TestCommands(t *testing.T) {
	c := &commandChecker{
		t:        t,
		worker:   workerFlags(t),
		make:     makeTargets(t),
		loadtest: loadtestFlags(t),
	}
	for _, f := range checkedFiles(t) {
		if strings.HasPrefix(f, "docs/reference/") {
			continue // generated from the code: the source of the truth checked here
		}
		p := readPage(t, f)
		blocks := append(append(append([]textBlock{}, p.prose...), p.tables...), p.headings...)
		for _, b := range blocks {
			spans, _ := codeSpans(b.text, "")
			for _, s := range spans {
				c.line(f, b.line, s)
			}
		}
		for _, cb := range p.code {
			if !shellLike(cb.lang) {
				continue
			}
			console := cb.lang == "console" || cb.lang == "shell-session"
			for i := 0; i < len(cb.lines); i++ {
				line, at := cb.lines[i], cb.line+1+i
				for strings.HasSuffix(line, `\`) && i+1 < len(cb.lines) {
					i++
					line = strings.TrimSuffix(line, `\`) + " " + cb.lines[i]
				}
				// Output quotes commands in backticks: check those too.
				spans, rest := codeSpans(line, " ")
				for _, s := range spans {
					c.line(f, at, s)
				}
				if cmd, ok := strings.CutPrefix(strings.TrimSpace(rest), "$ "); ok {
					c.line(f, at, cmd)
				} else if !console {
					c.line(f, at, rest)
				}
			}
		}
		scripts := regexp.MustCompile("(?:^|[\\s`(\\[\"'])(scripts/[A-Za-z0-9_./-]*[A-Za-z0-9_/])")
		for _, b := range allText(p) {
			for _, m := range scripts.FindAllStringSubmatch(b.text, -1) {
				if _, err := os.Stat(filepath.Join(root, m[1])); err != nil {
					t.Errorf("%s:%d: %s does not exist", f, b.line, m[1])
				}
			}
		}
	}
	if c.workerSeen == 0 || c.makeSeen == 0 {
		t.Errorf("found %d worker commands and %d make commands in the docs: the parser is broken", c.workerSeen, c.makeSeen)
	}
}

// allText is every line of a page: prose, tables, headings and code.
func allText(p *page) []textBlock {
	out := append(append(append([]textBlock{}, p.prose...), p.tables...), p.headings...)
	for _, cb := range p.code {
		for i, l := range cb.lines {
			out = append(out, textBlock{cb.line + 1 + i, l})
		}
	}
	return out
}

// shellLike says whether a code block of this info string holds commands.
func shellLike(lang string) bool {
	switch lang {
	case "", "sh", "bash", "shell", "console", "shell-session", "text", "zsh":
		return true
	}
	return false
}

type commandChecker struct {
	t                    *testing.T
	worker               map[string]map[string]bool // command → flags ("" the top level)
	make                 map[string]bool
	loadtest             map[string]map[string]bool // subcommand → flags ("" the load run); nil: not found
	workerSeen, makeSeen int
}

// separators end a command on a shell line.
var separators = map[string]bool{";": true, "|": true, "&": true, "(": true, ")": true, "<": true, ">": true, "$": true, "`": true}

// starters may come before a command without ending it.
var starters = map[string]bool{"then": true, "do": true, "else": true, "time": true, "exec": true, "sudo": true, "env": true, "nohup": true, "!": true, "--": true}

// line checks the commands of one shell line (or one inline code span).
func (c *commandChecker) line(file string, at int, s string) {
	words := shellWords(s)
	start := true
	for i := 0; i < len(words); i++ {
		w := words[i]
		switch {
		case separators[w]:
			start = true
			continue
		case !start:
			continue
		case starters[w] || regexp.MustCompile(`^[A-Z_][A-Z0-9_]*=`).MatchString(w):
			continue
		}
		start = false
		args := func(from int) []string {
			var a []string
			for j := from; j < len(words) && !separators[words[j]]; j++ {
				a = append(a, words[j])
			}
			return a
		}
		switch {
		case w == "worker" || w == "./worker":
			c.workerCommand(file, at, args(i+1))
		case w == "go" && i+2 < len(words) && words[i+1] == "run" && (words[i+2] == "./cmd/worker" || words[i+2] == "github.com/cellttl/cellttl/cmd/worker"):
			c.workerCommand(file, at, args(i+3))
		case w == "go" && i+2 < len(words) && words[i+1] == "run" && (words[i+2] == "./loadtest" || words[i+2] == "github.com/cellttl/cellttl/loadtest"):
			c.loadtestCommand(file, at, args(i+3))
		case w == "make":
			c.makeSeen++
			for _, a := range args(i + 1) {
				if strings.HasPrefix(a, "-") || strings.Contains(a, "=") {
					continue
				}
				if !c.make[a] {
					c.t.Errorf("%s:%d: make %s: the Makefile has no target %q", file, at, a, a)
				}
			}
		}
	}
}

// placeholder is a word that stands for a command in prose: COMMAND,
// <command>, [run], ...
var placeholder = regexp.MustCompile(`^(?:[A-Z]+|<[^>]*>|\[[^\]]*\]|\.\.\.|…)$`)

func (c *commandChecker) workerCommand(file string, at int, args []string) {
	c.workerSeen++
	cmd := "run"
	if len(args) > 0 && (args[0] == "--version" || args[0] == "-version") {
		return // the worker's own, not run's (main.go)
	}
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		switch {
		case c.worker[args[0]] != nil && args[0] != "":
			cmd, args = args[0], args[1:]
		case placeholder.MatchString(args[0]):
			return
		case regexp.MustCompile(`^[a-z][a-z-]*$`).MatchString(args[0]) && slices.ContainsFunc(args[1:], func(a string) bool { return strings.HasPrefix(a, "-") }):
			// a command with flags; without, words such as the log
			// line `worker stopping` would be taken for one
			c.t.Errorf("%s:%d: worker %s: no such command in docs/reference/flags.md", file, at, args[0])
			return
		default:
			return // not a command line after all ("worker's", "worker:")
		}
	}
	c.flags(file, at, "worker "+cmd, c.worker[cmd], args)
}

func (c *commandChecker) loadtestCommand(file string, at int, args []string) {
	if c.loadtest == nil {
		return // loadtestFlags said why
	}
	sub := ""
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		if c.loadtest[args[0]] == nil || args[0] == "" {
			if !placeholder.MatchString(args[0]) {
				c.t.Errorf("%s:%d: go run ./loadtest %s: loadtest has no such subcommand", file, at, args[0])
			}
			return
		}
		sub, args = args[0], args[1:]
	}
	c.flags(file, at, strings.TrimSpace("go run ./loadtest "+sub), c.loadtest[sub], args)
}

// flags checks every flag of args against known.
func (c *commandChecker) flags(file string, at int, cmd string, known map[string]bool, args []string) {
	for _, a := range args {
		if a == "#" || strings.HasPrefix(a, "#") {
			return // a comment
		}
		if !strings.HasPrefix(a, "-") || a == "-" || a == "--" || regexp.MustCompile(`^-[0-9.]`).MatchString(a) {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		name = strings.TrimRight(name, ".,:;")
		if name == "" || name == "help" || name == "h" || placeholder.MatchString(name) {
			continue
		}
		if !known[name] {
			c.t.Errorf("%s:%d: %s has no flag --%s", file, at, cmd, name)
		}
	}
}

// shellWords splits a shell line into words, quotes kept whole, each of
// ; | & ( ) < > $ ` a word of its own (so && and $( are separators too),
// and stops at a comment.
func shellWords(s string) []string {
	var words []string
	var cur strings.Builder
	var quote rune
	flush := func() {
		if cur.Len() > 0 {
			words = append(words, cur.String())
			cur.Reset()
		}
	}
	for _, r := range s {
		switch {
		case quote != 0:
			cur.WriteRune(r)
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
			cur.WriteRune(r)
		case r == ' ' || r == '\t':
			flush()
		case r == '#' && cur.Len() == 0:
			flush()
			return words
		case strings.ContainsRune(";|&()<>$`", r):
			flush()
			words = append(words, string(r))
		default:
			cur.WriteRune(r)
		}
	}
	flush()
	return words
}

// workerFlags reads docs/reference/flags.md: a section "## worker
// COMMAND" per command, its flags as `--help` prints them, "  -name".
func workerFlags(t *testing.T) map[string]map[string]bool {
	b, err := os.ReadFile(filepath.Join(root, "docs/reference/flags.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]bool{}
	var cur map[string]bool
	section := regexp.MustCompile(`^## worker(?: ([a-z-]+))?$`)
	flag := regexp.MustCompile(`^  -([a-z0-9][a-z0-9-]*)(?: |$)`)
	for _, line := range strings.Split(string(b), "\n") {
		if m := section.FindStringSubmatch(line); m != nil {
			cur = map[string]bool{}
			out[m[1]] = cur
			continue
		}
		if m := flag.FindStringSubmatch(line); m != nil && cur != nil {
			cur[m[1]] = true
		}
	}
	if len(out["run"]) < 10 || len(out) < 5 {
		t.Fatalf("docs/reference/flags.md: found %d commands and %d flags of worker run: its layout changed, and workerFlags with it", len(out), len(out["run"]))
	}
	return out
}

// makeTargets reads the Makefile's targets.
func makeTargets(t *testing.T) map[string]bool {
	b, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^([A-Za-z0-9_-][A-Za-z0-9_.-]*(?:\s+[A-Za-z0-9_-][A-Za-z0-9_.-]*)*)\s*:([^=]|$)`).FindAllStringSubmatch(string(b), -1) {
		for _, name := range strings.Fields(m[1]) {
			out[name] = true
		}
	}
	if len(out) == 0 {
		t.Fatal("Makefile: no targets found")
	}
	return out
}

// flagDeclarers are the methods that declare a flag, in the standard
// library (flag.String("name", ...), fs.StringVar(&v, "name", ...)) and
// in internal/envflag (fs.String(&v, "name", "ENV", ...)): the name is
// the first string literal among the first two arguments.
var flagDeclarers = map[string]bool{
	"String": true, "Int": true, "Int64": true, "Uint": true, "Uint64": true, "Float64": true,
	"Bool": true, "Duration": true, "Bytes": true, "BytesInt": true, "Choice": true, "Value": true,
	"Var": true, "Func": true, "TextVar": true, "StringVar": true, "IntVar": true, "Int64Var": true,
	"UintVar": true, "Uint64Var": true, "Float64Var": true, "BoolVar": true, "DurationVar": true,
}

// loadtestFlags reads loadtest/'s own sources (package main): the flags
// each function declares, and the subcommands its dispatch names (an
// `if ... args[0] == "bench" { return runBench(...) }`). The function
// holding the dispatch declares the flags of a load run (subcommand "").
// Should the dispatch take another form, every flag declared in loadtest/
// counts for every subcommand found: a looser check, said in the log.
func loadtestFlags(t *testing.T) map[string]map[string]bool {
	dir := filepath.Join(root, "loadtest")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	declared := map[string]map[string]bool{} // function → flags
	subs := map[string]string{}              // subcommand → function
	dispatcher := ""
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			name := fn.Name.Name
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.CallExpr:
					sel, ok := n.Fun.(*ast.SelectorExpr)
					if !ok || !flagDeclarers[sel.Sel.Name] {
						return true
					}
					for _, a := range n.Args[:min(2, len(n.Args))] {
						if lit, ok := a.(*ast.BasicLit); ok && lit.Kind == token.STRING {
							if v, err := strconv.Unquote(lit.Value); err == nil && regexp.MustCompile(`^[a-z][a-z0-9-]*$`).MatchString(v) {
								if declared[name] == nil {
									declared[name] = map[string]bool{}
								}
								declared[name][v] = true
							}
							break
						}
					}
				case *ast.IfStmt:
					sub := ""
					ast.Inspect(n.Cond, func(c ast.Node) bool {
						if be, ok := c.(*ast.BinaryExpr); ok && be.Op == token.EQL {
							if lit, ok := be.Y.(*ast.BasicLit); ok && lit.Kind == token.STRING {
								sub, _ = strconv.Unquote(lit.Value)
							}
						}
						return true
					})
					if sub == "" {
						return true
					}
					for _, s := range n.Body.List {
						if r, ok := s.(*ast.ReturnStmt); ok && len(r.Results) == 1 {
							if call, ok := r.Results[0].(*ast.CallExpr); ok {
								if id, ok := call.Fun.(*ast.Ident); ok {
									subs[sub], dispatcher = id.Name, name
								}
							}
						}
					}
				}
				return true
			})
		}
	}
	out := map[string]map[string]bool{}
	if dispatcher != "" {
		out[""] = declared[dispatcher]
		for sub, fn := range subs {
			out[sub] = declared[fn]
		}
	}
	complete := dispatcher != ""
	for _, flags := range out {
		complete = complete && len(flags) > 0
	}
	if !complete {
		all := map[string]bool{}
		for _, flags := range declared {
			for f := range flags {
				all[f] = true
			}
		}
		if len(all) == 0 {
			t.Log("loadtest/: no flag declarations found; `go run ./loadtest` commands are not checked")
			return nil
		}
		t.Log("loadtest/: its subcommand dispatch was not found: every flag it declares counts for every subcommand")
		out = map[string]map[string]bool{"": all}
		for sub := range subs {
			out[sub] = all
		}
	}
	names := make([]string, 0, len(out))
	for s := range out {
		names = append(names, strconv.Quote(s))
	}
	sort.Strings(names)
	t.Logf("loadtest subcommands: %s", strings.Join(names, ", "))
	return out
}
