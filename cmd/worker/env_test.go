package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
)

// One environment serves every command: a variable of another command's
// flag is accepted, a CELLTTL_ variable that names no flag stops the
// command before it touches anything, and the previous release's names
// still work, with a warning.
func TestEnvironmentVariables(t *testing.T) {
	e := newEnv(t, tenantsYAML)
	check := func(extra ...string) (string, int) {
		t.Helper()
		var out bytes.Buffer
		err := run(context.Background(), e.args("check", append([]string{"--offline"}, extra...)...), &out, &out)
		code := exitCode(err, &out) // writes the error to out
		return out.String(), code
	}

	// worker run's --writers, set for the Deployment, seen by worker check.
	t.Setenv("CELLTTL_WRITERS", "8")
	if got, code := check(); code != 0 {
		t.Errorf("check with CELLTTL_WRITERS set: exit %d\n%s", code, got)
	}

	t.Setenv("CELLTTL_WRITERZ", "8")
	got, code := check()
	if code != 2 || !strings.Contains(got, "environment variable CELLTTL_WRITERZ names no flag (did you mean CELLTTL_WRITERS?)") {
		t.Errorf("check with CELLTTL_WRITERZ set: exit %d\n%q", code, got)
	}
	unsetenv(t, "CELLTTL_WRITERZ")

	// A flag of the table commands, under its old name: read, warned.
	t.Setenv("CHECK_FORMAT", "json")
	got, code = check()
	if code != 0 || !strings.Contains(got, "CHECK_FORMAT is deprecated and read for this release only: set CELLTTL_FORMAT instead") || !strings.Contains(got, `"valid"`) {
		t.Errorf("check with CHECK_FORMAT=json: exit %d\n%s", code, got)
	}
	unsetenv(t, "CHECK_FORMAT")

	// Every command refuses a log level it does not know, logging or not.
	for _, cmd := range []string{"check", "setup", "read", "run", "forget", "demo"} {
		var out bytes.Buffer
		err := run(context.Background(), []string{cmd, "--log-level", "bogus"}, &out, &out)
		if code := exitCode(err, &out); code != 2 || !strings.Contains(out.String(), `"bogus": want debug, info, warn or error`) {
			t.Errorf("%s --log-level bogus: exit %d\n%s", cmd, code, out.String())
		}
	}
	t.Setenv("CELLTTL_LOG_LEVEL", "verbose")
	if got, code := check(); code != 2 || !strings.Contains(got, `CELLTTL_LOG_LEVEL="verbose" for --log-level`) {
		t.Errorf("check with CELLTTL_LOG_LEVEL=verbose: exit %d\n%s", code, got)
	}
}

// A command offers the flags of the groups it uses, not every flag of the
// worker's.
func TestCommandsRegisterOnlyTheirGroups(t *testing.T) {
	t.Parallel()
	names := func(cmd string) map[string]bool {
		f := commandTable()[cmd]().flags(&bytes.Buffer{})
		set := map[string]bool{}
		for _, n := range f.Names() {
			set[n] = true
		}
		return set
	}
	for cmd, want := range map[string][]string{
		"forget":    {"tenant", "user", "requested-by", "brokers", "topic", "dlq-topic", "dlq-classes", "max-clock-skew", "erasure-refresh", "write-timeout", "table"},
		"retention": {"brokers", "topic", "dlq-topic", "max-clock-skew", "dlq-unlisted-retention", "table"},
		// redrive decides each letter by the worker's --strict-retention rule.
		"redrive": {"brokers", "dlq-topic", "tenant-from", "ttl-from", "max-clock-skew", "erasure-refresh", "write-timeout", "apply", "strict-retention"},
		// read decodes the stored values through the registry as run reads them.
		"read": {"tenant", "table", "value-format", "schema-registry-url", "schema-registry-username", "schema-registry-password-file",
			"schema-registry-tls-ca", "schema-registry-tls-cert", "schema-registry-tls-key", "schema-cache-size", "schema-registry-timeout"},
	} {
		have := names(cmd)
		for _, n := range want {
			if !have[n] {
				t.Errorf("worker %s has no --%s", cmd, n)
			}
		}
		for _, n := range []string{"writers", "pprof-addr", "admin-addr", "flush-rows", "group", "commit-interval", "dlq-check-interval", "strict-retention"} {
			if have[n] && !(cmd == "redrive" && n == "strict-retention") {
				t.Errorf("worker %s offers --%s, a flag of worker run alone", cmd, n)
			}
		}
	}
	// Every command that runs to its end bounds its waits, and offers the
	// flag; the worker (its start-up has --startup-timeout) and the demo
	// (its services are in-process) neither.
	for cmd, newCmd := range commandTable() {
		_, bounded := newCmd().(boundedCommand)
		if offers := names(cmd)["service-timeout"]; offers != bounded || bounded == (cmd == "run" || cmd == "demo") {
			t.Errorf("worker %s: --service-timeout %t, its waits bounded %t", cmd, offers, bounded)
		}
	}
}

// unsetenv removes a variable t.Setenv set (and restores it after t).
func unsetenv(t *testing.T, name string) {
	t.Helper()
	t.Setenv(name, "")
	if err := os.Unsetenv(name); err != nil {
		t.Fatal(err)
	}
}
