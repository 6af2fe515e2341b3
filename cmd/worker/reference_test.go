package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/cellttl/cellttl/internal/release"
)

// The references in docs/reference are generated from the code: the
// commands' own help, and a scrape of a running worker's /metrics. A test
// fails when a checked-in one is stale; TESTENV_UPDATE_REFERENCE=1 writes
// them instead.
const updateReference = "TESTENV_UPDATE_REFERENCE"

// checkReference compares the file at path with what the code generates.
func checkReference(t *testing.T, path, generated string) {
	t.Helper()
	if os.Getenv(updateReference) != "" {
		if err := os.WriteFile(path, []byte(generated), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", path)
		return
	}
	have, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(have) != generated {
		h, g := strings.Split(string(have), "\n"), strings.Split(generated, "\n")
		i := 0
		for i < len(h) && i < len(g) && h[i] == g[i] {
			i++
		}
		line := func(s []string) string {
			if i < len(s) {
				return s[i]
			}
			return "(end of file)"
		}
		t.Errorf("%s is stale (line %d is %q, the code says %q): run %s=1 go test ./cmd/worker -run 'TestReference|TestMetricsAndStatus'",
			path, i+1, line(h), line(g), updateReference)
	}
}

// commands are the worker's commands, in the order the reference lists them.
var commands = []string{"run", "setup", "check", "read", "retime", "migrate", "forget", "offboard", "audit", "retention", "redrive", "demo"}

// Every command's flags, with their environment variables and defaults,
// as the command prints them.
func TestReference(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("# Flags and environment variables\n\n")
	b.WriteString("Generated from each command's own `--help` by `" + updateReference + "=1 go test ./cmd/worker\n-run TestReference`; `make test` fails when this file is stale. A flag\ngiven on the command line wins over its environment variable, which wins\nover the default. Durations take days (`2d`, `1d12h`) besides Go's units;\nsizes take units (`64MiB`, `8MB`, `512KiB`) besides a number of bytes.\n\n")
	var top bytes.Buffer
	if err := run(context.Background(), []string{"--help"}, &top, &top); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&b, "## worker\n\n```text\n%s\n```\n", strings.TrimRight(top.String(), "\n"))
	// The release, in the three ways a user asks for it.
	for _, args := range [][]string{{"--version"}, {"-version"}, {"version"}} {
		var out bytes.Buffer
		if err := run(context.Background(), args, &out, &out); err != nil || !strings.HasPrefix(out.String(), "worker "+release.Version+" (revision ") {
			t.Errorf("worker %s: %v %q, want the release %s and its revision", args[0], err, out.String(), release.Version)
		}
	}
	for _, cmd := range commands {
		var out bytes.Buffer
		if err := run(context.Background(), []string{cmd, "--help"}, &out, &out); err != errHelp {
			t.Fatalf("worker %s --help: %v", cmd, err)
		}
		fmt.Fprintf(&b, "\n## worker %s\n\n```text\n%s\n```\n", cmd, strings.TrimRight(out.String(), "\n"))
	}
	checkReference(t, "../../docs/reference/flags.md", b.String())
}

// metricsReference lists the metrics of a scrape: name, type and help,
// the worker's own (not the Go runtime's or the exporter's). Labels are
// left out: which appear depends on what happened (a retry's gRPC code),
// and the reference must not.
func metricsReference(scrape string) string {
	type family struct{ kind, help string }
	families := map[string]*family{}
	own := regexp.MustCompile(`^(cellttl|messaging|db)_`)
	for _, line := range strings.Split(scrape, "\n") {
		if !strings.HasPrefix(line, "# HELP ") && !strings.HasPrefix(line, "# TYPE ") {
			continue
		}
		f := strings.SplitN(line[len("# HELP "):], " ", 2)
		if len(f) < 2 || !own.MatchString(f[0]) {
			continue
		}
		if families[f[0]] == nil {
			families[f[0]] = &family{}
		}
		if strings.HasPrefix(line, "# HELP ") {
			families[f[0]].help = f[1]
		} else {
			families[f[0]].kind = f[1]
		}
	}
	names := make([]string, 0, len(families))
	for n := range families {
		names = append(names, n)
	}
	slices.Sort(names)
	var b strings.Builder
	b.WriteString("# Metrics\n\n")
	b.WriteString("Generated from a scrape of a running worker's `/metrics` (Prometheus names) by\n`" + updateReference + "=1 go test ./cmd/worker -run TestMetricsAndStatus`; `make test` fails\nwhen this file is stale. The same instruments go over OTLP when it is\nconfigured. Counters exist from start-up, at 0. Per-partition metrics carry\n`messaging_destination_partition_id`, per-tenant ones `cellttl_tenant` (the\nfirst 1000 listed tenants, `_unlisted` for every tenant tenants.yaml does not\nlist, `_other` beyond and for events without a listed tenant); the help says which others a metric has.\n\n")
	b.WriteString("| metric | type | help |\n|---|---|---|\n")
	for _, n := range names {
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", n, families[n].kind, strings.ReplaceAll(families[n].help, "|", "\\|"))
	}
	return b.String()
}

// flagCeilings are the most flags each command's help may list (the
// deprecated ones, on their one line at its end, are not counted): what
// each listed when the ceilings were set. A command takes only the flags it reads,
// and a new flag is a deliberate decision (the CHANGELOG says so): raise
// a ceiling with it, or take a flag away first.
var flagCeilings = map[string]int{"run": 71, "setup": 14, "check": 13, "read": 26, "retime": 19, "migrate": 20, "forget": 40, "offboard": 35,
	"audit": 14, "retention": 30, "redrive": 55, "demo": 6}

// No command grows past its ceiling of flags unseen.
func TestFlagCeilings(t *testing.T) {
	t.Parallel()
	flag := regexp.MustCompile(`(?m)^  -[a-z]`)
	for _, cmd := range commands {
		var out bytes.Buffer
		if err := run(context.Background(), []string{cmd, "--help"}, &out, &out); err != errHelp {
			t.Fatalf("worker %s --help: %v", cmd, err)
		}
		n, most := len(flag.FindAllIndex(out.Bytes(), -1)), flagCeilings[cmd]
		switch {
		case most == 0:
			t.Errorf("worker %s has no ceiling of flags: add it to flagCeilings (%d flags now)", cmd, n)
		case n > most:
			t.Errorf("worker %s takes %d flags, more than its ceiling of %d: a command takes only the flags it reads", cmd, n, most)
		case n == 0:
			t.Errorf("worker %s --help lists no flag: the count no longer reads the help", cmd)
		}
	}
}
