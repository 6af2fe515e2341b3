// Command worker consumes click events from Kafka and writes them to
// Bigtable with per-tenant TTLs. See docs/contract.md for the contract.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/cellttl/cellttl/internal/envflag"
)

const usage = `worker: per-tenant TTLs on Bigtable, fed from Kafka.

Usage:
  worker [run] [flags]   consume, compute cell timestamps, write (the default)
  worker setup [flags]   create the table and family with the GC rule the strategy needs
  worker read [flags]    a tenant's live events with their expiry
  worker check [flags]   validate a tenants file and explain what an edit changes
  worker retime [flags]  apply the tenants file's TTLs to cells already written
  worker migrate [flags] move a table full of data to a new default_ttl or strategy
  worker forget [flags]  delete a user's rows now
  worker offboard [flags] a tenant leaves: drop its rows, record it in the ledger, receipt of what remains
  worker audit [flags]   check every cell against the tenants file's rule
  worker retention [flags] how long each tenant's copies can live, store by store, from the live system
  worker redrive [flags] send dead letters through the worker's path again (a dry run unless --apply)
  worker demo [flags]    everything in-process: Kafka, the Bigtable emulator, synthetic clicks
  worker version         this release, and the revision it was built from

Run "worker COMMAND --help" for a command's flags.`

// exitError carries a specific exit code.
type exitError struct {
	code int
	err  error
	// quiet: the command already said everything on stdout.
	quiet bool
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(exitCode(err, os.Stderr))
}

func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	if errors.Is(err, errHelp) {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) && ee.quiet {
		return ee.code
	}
	code := 1
	if ee != nil {
		code = ee.code
	}
	fmt.Fprintln(stderr, "worker:", err)
	return code
}

var errHelp = errors.New("help requested")

// run dispatches to a command: it parses the command's flags, then runs it.
// ctx ends at SIGINT or SIGTERM.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	name := "run"
	switch {
	case len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help"):
		name = "help"
	case len(args) > 0 && (args[0] == "-version" || args[0] == "--version"):
		name = "version"
	case len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-':
		name, args = args[0], args[1:]
	}
	switch name {
	case "help":
		fmt.Fprintln(stdout, usage)
		return nil
	case "-version", "--version", "version":
		fmt.Fprintln(stdout, versionLine())
		return nil
	}
	newCmd, ok := commandTable()[name]
	if !ok {
		return &exitError{code: 2, err: fmt.Errorf("unknown command %q\n\n%s", name, usage)}
	}
	c := newCmd()
	if err := parse(c.flags(stderr), args); err != nil {
		return err
	}
	if b, ok := c.(boundedCommand); ok {
		return runBounded(ctx, b, stdout, stderr)
	}
	return c.run(ctx, stdout, stderr)
}

// command is one of the worker's commands: the flags it takes, with their
// defaults, and what it does once they are parsed. Each command registers
// only the groups of flags it reads.
type command interface {
	flags(out io.Writer) *envflag.FlagSet
	run(ctx context.Context, stdout, stderr io.Writer) error
}

// commandTable makes each command with its defaults, by name. A function,
// not a variable: parse reads every command's flags (allVariables).
func commandTable() map[string]func() command {
	return map[string]func() command{
		"run":       func() command { return newRunCmd() },
		"setup":     func() command { return &setupCmd{tableOptions: defaultTableOptions()} },
		"read":      func() command { return newReadCmd() },
		"check":     func() command { return &checkCmd{tableOptions: defaultTableOptions()} },
		"retime":    func() command { return newRetimeCmd() },
		"migrate":   func() command { return newMigrateCmd() },
		"forget":    func() command { return newForgetCmd() },
		"offboard":  func() command { return newOffboardCmd() },
		"audit":     func() command { return &auditCmd{tableOptions: defaultTableOptions()} },
		"retention": func() command { return newRetentionCmd() },
		"redrive":   func() command { return newRedriveCmd() },
		"demo":      func() command { return &demoCmd{} },
	}
}

// allVariables are the variables of every command's flags, legacy names
// included: one environment (a Deployment's, a shell's) serves every
// command, so a variable of another command's is no error.
func allVariables() []string {
	var vs []string
	for _, newCmd := range commandTable() {
		vs = append(vs, newCmd().flags(io.Discard).Variables()...)
	}
	return vs
}

// parse parses a command's flags, turning --help into a clean exit and
// any other flag error into exit status 2.
func parse(f *envflag.FlagSet, args []string) error {
	f.KnowAlso(allVariables)
	if err := f.Parse(args); err != nil {
		if envflag.IsHelp(err) {
			return errHelp
		}
		return usageError(err)
	}
	for env, flag := range deprecatedEnv {
		deprecated(f, env, flag)
	}
	return nil
}

// deprecatedEnv are the variables that set a destructive or unsafe flag
// until this release: flags only from now on, so that a variable shared
// by accident cannot wipe a table or turn off certificate checks.
var deprecatedEnv = map[string]string{
	"FORCE":                          "force",
	"UPDATE_GC_POLICY":               "update-gc-policy",
	"KAFKA_TLS_INSECURE_SKIP_VERIFY": "kafka-tls-insecure-skip-verify",
}

// deprecated honours env for this release, with a warning, where the
// command has flag and the command line does not set it.
func deprecated(f *envflag.FlagSet, env, flag string) {
	v, ok := os.LookupEnv(env)
	if !ok || f.Lookup(flag) == nil {
		return
	}
	if f.OnCommandLine(flag) {
		fmt.Fprintf(f.Output(), "worker: WARNING: %s=%s is ignored: --%s is on the command line (remove the variable: the next release ignores it always)\n", env, v, flag)
		return
	}
	if on, err := strconv.ParseBool(strings.TrimSpace(v)); err == nil && on {
		fmt.Fprintf(f.Output(), "worker: WARNING: %s=%s is deprecated; this is the last release that reads it: pass --%s on the command line\n", env, v, flag)
		_ = f.Set(flag, "true")
		return
	}
	fmt.Fprintf(f.Output(), "worker: WARNING: %s=%s is deprecated and ignored: remove it\n", env, v)
}

// usageError is an error of the command line or its files: exit status 2.
func usageError(err error) error { return &exitError{code: 2, err: err} }
