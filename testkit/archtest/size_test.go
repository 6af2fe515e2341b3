package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
)

// root is the module's directory.
func root(t *testing.T) string {
	t.Helper()
	_, here, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller")
	}
	return filepath.Join(filepath.Dir(here), "..", "..")
}

// sources lists the module's Go files outside tests, by path from root.
func sources(t *testing.T) []string {
	t.Helper()
	r := root(t)
	var files []string
	err := filepath.WalkDir(r, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != r && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
			rel, _ := filepath.Rel(r, p)
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func lines(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root(t), path))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

// Ratchets: bounds the code met once and must keep. Raise one only with
// the reason in the commit; lower it when the code shrinks.
const (
	// ingestLines bounds the consumer package (outside tests and kwire):
	// it must stay a package a newcomer reads in a sitting.
	ingestLines = 3000
	// longFunctions bounds the functions of more than 80 lines, module-wide.
	longFunctions = 6
	longFunction  = 80
	// commandFileLines bounds each file of cmd/worker, its tests too: a
	// command wires packages, and decisions live (and are tested) with
	// their owners.
	commandFileLines = 250
)

func TestIngestStaysReadable(t *testing.T) {
	n := 0
	for _, f := range sources(t) {
		if filepath.Dir(f) == "ingest" {
			n += lines(t, f)
		}
	}
	if n > ingestLines {
		t.Errorf("ingest has %d lines outside tests, more than %d: move what is not the consumer's job to its owner", n, ingestLines)
	}
}

func TestFewLongFunctions(t *testing.T) {
	fs := token.NewFileSet()
	var long []string
	for _, f := range sources(t) {
		file, err := parser.ParseFile(fs, filepath.Join(root(t), f), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			if n := fs.Position(fd.End()).Line - fs.Position(fd.Pos()).Line + 1; n > longFunction {
				long = append(long, f+" "+fd.Name.Name)
			}
		}
	}
	sort.Strings(long)
	if len(long) > longFunctions {
		t.Errorf("%d functions have more than %d lines, more than %d: split one along its steps\n%s", len(long), longFunction, longFunctions, strings.Join(long, "\n"))
	}
}

func TestCommandFilesOnlyWire(t *testing.T) {
	dir := filepath.Join(root(t), "cmd", "worker")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") {
			continue
		}
		if n := lines(t, filepath.Join("cmd", "worker", e.Name())); n > commandFileLines {
			t.Errorf("cmd/worker/%s has %d lines, more than %d: a command wires; move the decisions to their owners", e.Name(), n, commandFileLines)
		}
	}
}
