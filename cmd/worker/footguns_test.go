package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// No environment variable can change or wipe a table: --force and
// --update-gc-policy are flags only. The variables they used to read
// still work for this release, with a warning.
//
// Nor can one show expired cells (read --include-expired) or replace the
// erasure ledger (setup --new-erasure-ledger): flags only, and a
// CELLTTL_ variable of their name stops the command.
func TestDestructiveOverridesAreFlagsOnly(t *testing.T) {
	for cmd, flags := range map[string][]string{
		"setup": {"-force", "-update-gc-policy", "-new-erasure-ledger"},
		"read":  {"-include-expired"},
	} {
		var out bytes.Buffer
		_ = run(context.Background(), []string{cmd, "--help"}, &out, &out)
		help := out.String()
		for _, flag := range flags {
			i := strings.Index(help, "  "+flag+"\n")
			if i < 0 {
				t.Fatalf("%s --help has no %s:\n%s", cmd, flag, help)
			}
			usage, _, _ := strings.Cut(help[i+len(flag)+3:], "\n  -")
			if strings.Contains(usage, "(env ") {
				t.Errorf("%s %s can be set from the environment: %s", cmd, flag, usage)
			}
		}
	}
	e := newEnv(t, tenantsYAML)
	for env, cmd := range map[string][]string{
		"CELLTTL_INCLUDE_EXPIRED":    {"read", "--tenant", "acme"},
		"CELLTTL_NEW_ERASURE_LEDGER": {"setup"},
	} {
		t.Setenv(env, "true")
		got, err := e.cmd(t, cmd[0], cmd[1:]...)
		if codeOf(err) != 2 || !strings.Contains(err.Error(), env+" names no flag") {
			t.Errorf("%s with %s=true: exit %d, %v\n%s", cmd[0], env, codeOf(err), err, got)
		}
		unsetenv(t, env)
	}
	t.Setenv("FORCE", "true")
	t.Setenv("UPDATE_GC_POLICY", "false")
	got, err := e.cmd(t, "setup")
	if err != nil || !strings.Contains(got, "FORCE=true is deprecated") || !strings.Contains(got, "pass --force") ||
		!strings.Contains(got, "UPDATE_GC_POLICY=false is deprecated and ignored") {
		t.Errorf("setup with FORCE and UPDATE_GC_POLICY set: %v\n%s", err, got)
	}
	// The command line wins over a stray variable: the family's rule is
	// not replaced.
	t.Setenv("UPDATE_GC_POLICY", "true")
	e.writeTenants(t, "default_ttl: 3d\ntenants:\n  acme: 1h\n")
	got, err = e.cmd(t, "setup", "--update-gc-policy=false")
	if err == nil || !strings.Contains(got, "UPDATE_GC_POLICY=true is ignored") {
		t.Errorf("setup --update-gc-policy=false with UPDATE_GC_POLICY=true: %v\n%s", err, got)
	}
}
