package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// composes are the commands that run others whole: the embedded demo is
// worker setup and worker run in one process.
var composes = map[string][]string{"demo": {"setup", "run"}}

// A command of cmd/worker wires packages: what two commands share lives in
// a file of neither (options.go, shared.go, waits.go) or with its owner
// package, so that reading one command never means reading another. A
// command is the type named for it (checkCmd) and the files whose names
// start with the command's (check.go, checkprint.go); every other file is
// shared.
func TestCommandsUseNoOtherCommandsNames(t *testing.T) {
	dir := filepath.Join(root(t), "cmd", "worker")
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fs := token.NewFileSet()
	parsed := map[string]*ast.File{}
	declared := map[string]string{} // top-level name → its file
	var commands []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fs, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Base(f)
		parsed[name] = af
		for n, cmd := range topLevel(af) {
			declared[n] = name
			if cmd {
				commands = append(commands, strings.TrimSuffix(n, "Cmd"))
			}
		}
	}
	if len(commands) < 10 {
		t.Fatalf("found the commands %v in cmd/worker: want a type named for each", commands)
	}
	// A command's files: where its type is declared, and those named for it.
	owner := map[string]string{}
	for _, c := range commands {
		owner[declared[c+"Cmd"]] = c
	}
	sort.Slice(commands, func(i, j int) bool { return len(commands[i]) > len(commands[j]) }) // "retime" before "re…"
	for name := range parsed {
		for _, c := range commands {
			if _, ok := owner[name]; !ok && strings.HasPrefix(name, c) {
				owner[name] = c
			}
		}
	}
	for name, af := range parsed {
		user, ok := owner[name]
		if !ok {
			continue // shared
		}
		for _, id := range unresolved(af) {
			from := declared[id.Name]
			other, isCommand := owner[from]
			if from == "" || !isCommand || other == user || contains(composes[user], other) {
				continue
			}
			t.Errorf("cmd/worker/%s (worker %s) uses %s of cmd/worker/%s (worker %s): move what both need to a shared file or to its owner package", name, user, id.Name, from, other)
		}
	}
}

// topLevel are the names a file declares at the top, each true when it
// names a command's type.
func topLevel(af *ast.File) map[string]bool {
	out := map[string]bool{}
	for _, d := range af.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil {
				out[d.Name.Name] = false
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					out[s.Name.Name] = strings.HasSuffix(s.Name.Name, "Cmd") && s.Name.Name != "Cmd"
				case *ast.ValueSpec:
					for _, n := range s.Names {
						out[n.Name] = false
					}
				}
			}
		}
	}
	return out
}

// unresolved are the identifiers of af that name nothing declared in it:
// the package's other files' names, and the universe's. Selected names
// (x.name), struct literal keys and method names are not among them.
func unresolved(af *ast.File) []*ast.Ident {
	skip := map[*ast.Ident]bool{af.Name: true}
	var out []*ast.Ident
	ast.Inspect(af, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.SelectorExpr:
			skip[n.Sel] = true
		case *ast.KeyValueExpr:
			if id, ok := n.Key.(*ast.Ident); ok {
				skip[id] = true
			}
		case *ast.FuncDecl:
			skip[n.Name] = true
		case *ast.Ident:
			if !skip[n] && n.Obj == nil {
				out = append(out, n)
			}
		}
		return true
	})
	return out
}

func contains(list []string, s string) bool {
	for _, l := range list {
		if l == s {
			return true
		}
	}
	return false
}
