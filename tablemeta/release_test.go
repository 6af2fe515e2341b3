package tablemeta

import (
	"context"
	"errors"
	"strings"
	"testing"

	"cloud.google.com/go/bigtable"

	"github.com/cellttl/cellttl/internal/release"
)

// Setups record the oldest release that may write the table; the newest
// such rule stands whatever order the setups ran in, and a writer older
// than it is refused, naming both releases. A table set up before the
// rule takes any writer; a record that does not name a release is
// refused, not ignored.
func TestOldestWriter(t *testing.T) {
	s, _, name := table(t)
	ctx := context.Background()
	read := func() State {
		t.Helper()
		rec, err := s.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	if rec := read(); rec.OldestWriter != "" || rec.CheckWriter(name, "0.0.1") != nil {
		t.Fatalf("a table set up before the rule: %q, %v", rec.OldestWriter, rec.CheckWriter(name, "0.0.1"))
	}
	for _, v := range []string{"0.3.0", "0.1.0", "0.2.9"} {
		if err := s.RecordOldestWriter(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	rec := read()
	if rec.OldestWriter != "0.3.0" {
		t.Fatalf("after setups recording 0.3.0, 0.1.0, 0.2.9: %q, want the newest rule 0.3.0", rec.OldestWriter)
	}
	// A -dev build is judged as the release it makes: 0.3.0-dev writes as
	// 0.3.0 will (it may be the build that raised the rule).
	for self, ok := range map[string]bool{"0.2.9": false, "0.3.0": true, "1.0.0": true, "0.3.0-dev": true, "0.2.9-dev": false} {
		err := rec.CheckWriter(name, self)
		if (err == nil) != ok || err != nil && (!errors.Is(err, ErrTooOld) || !strings.Contains(err.Error(), "written by release 0.3.0 or newer") || !strings.Contains(err.Error(), "this is release "+self)) {
			t.Errorf("release %s on a table for 0.3.0 or newer: %v, want admitted %v", self, err, ok)
		}
	}
	// A claim of this release is refused the same way.
	if err := s.RecordOldestWriter(ctx, "999.0.0"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.ClaimTTLFrom(ctx, Claim{TTLFrom: "", By: "worker run", Now: t0}); !errors.Is(err, ErrTooOld) {
		t.Errorf("a claim of release %s on a table for 999.0.0: %v", release.Version, err)
	}
	if err := s.RecordOldestWriter(ctx, "0.x.0"); err == nil {
		t.Error("recorded a release that is not one")
	}
	// A cell written by hand, stamped with the clock: it would be the
	// newest for good, whatever later setups record.
	m := bigtable.NewMutation()
	m.Set(Family, colOldestWriter, bigtable.Now(), []byte("0.1.0"))
	if err := s.tbl.Apply(ctx, Key, m); err != nil {
		t.Fatal(err)
	}
	if err := read().CheckWriter(name, "1.0.0"); err == nil || !strings.Contains(err.Error(), "written by hand") {
		t.Errorf("a rule cell stamped by the clock: %v", err)
	}
	m = bigtable.NewMutation()
	m.Set(Family, colOldestWriter, bigtable.Timestamp(9_000_000_000_000_000), []byte("garbage"))
	if err := s.tbl.Apply(ctx, Key, m); err != nil {
		t.Fatal(err)
	}
	if err := read().CheckWriter(name, release.Version); err == nil || !strings.Contains(err.Error(), `"garbage"`) {
		t.Errorf("a record naming no release: %v", err)
	}
}
