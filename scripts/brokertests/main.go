// Command brokertests finds, in the package directories it is given, the
// tests whose answer depends on the Kafka broker's version: the top-level
// Test functions whose body calls testenv.BrokerVersionMatters (under
// whatever name the file imports testenv). -run fails when it finds none.
//
//	brokertests -run DIR...    a -run pattern naming them all: ^(TestA|TestB)$
//	brokertests -dirs DIR...   the directories that hold any, a line each
//
// scripts/test-kafka3.sh runs those, and only those, against Kafka 3.9.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

func main() {
	run := flag.Bool("run", false, "print a -run pattern naming the tests")
	dirs := flag.Bool("dirs", false, "print the directories that hold any")
	flag.Parse()
	if *run == *dirs || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: brokertests -run|-dirs DIR...")
		os.Exit(2)
	}
	var names []string
	for _, dir := range flag.Args() {
		found, err := marked(dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, "brokertests:", err)
			os.Exit(1)
		}
		if *dirs && len(found) > 0 {
			fmt.Println(dir)
		}
		names = append(names, found...)
	}
	if *run {
		if len(names) == 0 {
			// A run of none would pass, unseen, and an empty pattern runs all.
			fmt.Fprintf(os.Stderr, "brokertests: no test in %s says the broker's version matters\n", strings.Join(flag.Args(), " "))
			os.Exit(1)
		}
		slices.Sort(names)
		fmt.Printf("^(%s)$\n", strings.Join(slices.Compact(names), "|"))
	}
}

// testenvPath is the package whose BrokerVersionMatters marks a test.
const testenvPath = "github.com/cellttl/cellttl/testkit/testenv"

// marked returns the names of dir's tests that call
// testenv.BrokerVersionMatters.
func marked(dir string) ([]string, error) {
	if _, err := os.Stat(dir); err != nil {
		return nil, err
	}
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		return nil, fmt.Errorf("tests of %s: %w", dir, err)
	}
	var names []string
	fset := token.NewFileSet()
	for _, path := range files {
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", path, err)
		}
		name, ok := importName(f)
		if !ok {
			continue
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if ok && fn.Recv == nil && fn.Body != nil && strings.HasPrefix(fn.Name.Name, "Test") && callsMark(fn.Body, name) {
				names = append(names, fn.Name.Name)
			}
		}
	}
	return names, nil
}

// importName is the name f calls testenv by ("." when imported so), and
// whether f imports it at all.
func importName(f *ast.File) (string, bool) {
	for _, imp := range f.Imports {
		if path, err := strconv.Unquote(imp.Path.Value); err != nil || path != testenvPath {
			continue
		}
		if imp.Name != nil {
			return imp.Name.Name, true
		}
		return "testenv", true
	}
	return "", false
}

// callsMark reports whether body calls BrokerVersionMatters of the
// package imported as name.
func callsMark(body *ast.BlockStmt, name string) bool {
	found := false
	ast.Inspect(body, func(n ast.Node) bool {
		if call, ok := n.(*ast.CallExpr); ok {
			switch fun := call.Fun.(type) {
			case *ast.SelectorExpr:
				id, ok := fun.X.(*ast.Ident)
				found = found || (ok && id.Name == name && fun.Sel.Name == "BrokerVersionMatters")
			case *ast.Ident:
				found = found || (name == "." && fun.Name == "BrokerVersionMatters")
			}
		}
		return !found
	})
	return found
}
