package tablemeta

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"
)

// logger is a text log the test reads.
func logger() (*slog.Logger, *bytes.Buffer) {
	var b bytes.Buffer
	return slog.New(slog.NewTextHandler(&b, nil)), &b
}

// A command's claim says what it found: the first writer's record, a
// change recorded (and the flag to remove), a --ttl-from-change left over,
// agreement; a dry run records nothing; another setting is a refusal to
// start.
func TestClaimAndSay(t *testing.T) {
	t.Parallel()
	s, _, _ := table(t)
	ctx := context.Background()
	say := func(c Claim) (string, error) {
		t.Helper()
		log, out := logger()
		err := s.ClaimAndSay(ctx, c, log)
		return out.String(), err
	}
	if out, err := say(Claim{TTLFrom: "json:ttl", By: "worker redrive", Now: t0, DryRun: true}); err != nil || !strings.Contains(out, "not recorded: a dry run") {
		t.Errorf("a dry run on an empty record: %v\n%s", err, out)
	}
	if out, err := say(Claim{TTLFrom: "json:ttl", By: "worker run", Now: t0}); err != nil || !strings.Contains(out, "the first writer") {
		t.Errorf("the first claim: %v\n%s", err, out)
	}
	// Who claimed, for the history: this host, when the claim names none.
	host, _ := os.Hostname()
	if rec, err := s.Read(ctx); err != nil || rec.TTLFrom[0].Host != host {
		t.Errorf("the first claim's host: %+v, %v; want %q", rec.TTLFrom, err, host)
	}
	if out, err := say(Claim{TTLFrom: "json:ttl", By: "worker run", Now: t0}); err != nil || !strings.Contains(out, "agrees with the table's record") {
		t.Errorf("the same setting: %v\n%s", err, out)
	}
	if out, err := say(Claim{TTLFrom: "json:ttl", Change: true, By: "worker run", Now: t0}); err != nil || !strings.Contains(out, ChangeFlag+" given, and the table's setting is already this one") {
		t.Errorf("the flag left over: %v\n%s", err, out)
	}
	_, err := say(Claim{TTLFrom: "header:x-ttl", By: "worker run", Now: t0.Add(time.Minute)})
	var mm *MismatchError
	if !errors.As(err, &mm) || !strings.HasPrefix(err.Error(), "refusing to start: ") {
		t.Errorf("another setting: %v", err)
	}
	if out, err := say(Claim{TTLFrom: "header:x-ttl", Change: true, By: "worker run", Now: t0.Add(time.Minute)}); err != nil || !strings.Contains(out, "recorded a new --ttl-from setting") {
		t.Errorf("a change: %v\n%s", err, out)
	}
}

// forget's tenants file is checked against the workers': another version
// is refused (ErrVersionDiffers, naming both versions and the flag) unless
// allowed, which the check then says; nothing recorded is said, not
// refused.
func TestCheckTenantsVersion(t *testing.T) {
	t.Parallel()
	s, _, _ := table(t)
	ctx := context.Background()
	log, out := logger()
	if c, err := s.CheckTenantsVersion(ctx, "v1", false, log); err != nil || c.Outcome != NotRecorded || !strings.Contains(out.String(), "not checked against the workers'") {
		t.Fatalf("nothing recorded: %+v, %v\n%s", c, err, out)
	}
	if err := s.RecordVersion(ctx, "v1", time.Now(), time.Now()); err != nil {
		t.Fatal(err)
	}
	if c, err := s.CheckTenantsVersion(ctx, "v1", false, log); err != nil || c.Outcome != Matches {
		t.Fatalf("the workers' version: %+v, %v", c, err)
	}
	_, err := s.CheckTenantsVersion(ctx, "v2", false, log)
	if !errors.Is(err, ErrVersionDiffers) || !strings.Contains(err.Error(), "v1") || !strings.Contains(err.Error(), "v2") || !strings.Contains(err.Error(), AllowVersionFlag) {
		t.Fatalf("another version: %v", err)
	}
	out.Reset()
	if c, err := s.CheckTenantsVersion(ctx, "v2", true, log); err != nil || c.Outcome != Differs || !c.Overridden || !strings.Contains(out.String(), AllowVersionFlag) {
		t.Fatalf("another version, allowed: %+v, %v\n%s", c, err, out)
	}
}
