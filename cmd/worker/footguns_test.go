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
func TestDestructiveOverridesAreFlagsOnly(t *testing.T) {
	var out bytes.Buffer
	_ = run(context.Background(), []string{"setup", "--help"}, &out, &out)
	help := out.String()
	for _, flag := range []string{"-force", "-update-gc-policy"} {
		i := strings.Index(help, "  "+flag+"\n")
		if i < 0 {
			t.Fatalf("setup --help has no %s:\n%s", flag, help)
		}
		usage, _, _ := strings.Cut(help[i+len(flag)+3:], "\n  -")
		if strings.Contains(usage, "(env ") {
			t.Errorf("%s can be set from the environment: %s", flag, usage)
		}
	}
	e := newEnv(t, tenantsYAML)
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
