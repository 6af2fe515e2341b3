package tablemeta

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/cellttl/cellttl/testkit/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// table makes an event table with the record's family, as worker setup
// does, deleted when the test ends.
func table(t *testing.T) (*Store, *bigtable.AdminClient, string) {
	t.Helper()
	dc, ac := testenv.Clients(t)
	tgt := testenv.Table(t, ac, dc, 48*time.Hour)
	if done, err := Setup(context.Background(), ac, tgt.Table, false); err != nil || done != Created {
		t.Fatalf("setup: %v, %v", done, err)
	}
	return NewStore(dc, tgt.Table), ac, tgt.Table
}

var t0 = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)

// A rule on the record's family that would collect its cells by age (an
// operator's max-age, alone or in a union) is refused by the workers'
// check and by setup, naming the rule and the fix; setup
// --update-gc-policy sets it back, and the record written before is still
// there. Rules that keep each column's newest cell pass.
func TestRuleThatCollectsTheRecordIsRefused(t *testing.T) {
	s, ac, name := table(t)
	ctx := context.Background()
	if err := s.RecordOldestWriter(ctx, "0.1.0"); err != nil {
		t.Fatal(err)
	}
	for _, rule := range []bigtable.GCPolicy{
		bigtable.MaxAgePolicy(24 * time.Hour),
		bigtable.UnionPolicy(bigtable.MaxVersionsPolicy(1), bigtable.MaxAgePolicy(time.Hour)),
	} {
		if err := ac.UpdateFamily(ctx, name, Family, bigtable.Family{GCPolicy: rule}); err != nil {
			t.Fatal(err)
		}
		err := CheckFamily(ctx, ac, name)
		if !errors.Is(err, ErrRuleCollects) || !strings.Contains(err.Error(), "--update-gc-policy") {
			t.Errorf("the workers' check, rule %v: %v", rule, err)
		}
		if done, err := Setup(ctx, ac, name, false); !errors.Is(err, ErrRuleCollects) {
			t.Errorf("setup, rule %v: %v, %v", rule, done, err)
		}
		if done, err := Setup(ctx, ac, name, true); err != nil || done != Restored {
			t.Errorf("setup --update-gc-policy, rule %v: %v, %v", rule, done, err)
		}
		if err := CheckFamily(ctx, ac, name); err != nil {
			t.Errorf("after setup --update-gc-policy: %v", err)
		}
	}
	if rec, err := s.Read(ctx); err != nil || rec.OldestWriter != "0.1.0" {
		t.Errorf("the record after: %+v, %v", rec, err)
	}
	for _, rule := range []bigtable.GCPolicy{
		nil, bigtable.MaxVersionsPolicy(3),
		bigtable.IntersectionPolicy(bigtable.MaxAgePolicy(time.Hour), bigtable.MaxVersionsPolicy(1)),
	} {
		if collectsByAge(rule) {
			t.Errorf("rule %v: said to collect the newest cell by age", rule)
		}
	}
	if !collectsByAge(bigtable.IntersectionPolicy(bigtable.MaxAgePolicy(time.Hour), bigtable.UnionPolicy(bigtable.MaxAgePolicy(time.Minute)))) {
		t.Error("an intersection of ages: said to keep the newest cell")
	}
}

// The first claim records its setting; the same setting passes without a
// write; another is refused naming both settings and the flag, and
// recorded over the first with Change, the history keeping both with
// when; a dry run records nothing.
func TestClaimTTLFrom(t *testing.T) {
	s, ac, name := table(t)
	ctx := context.Background()
	if err := CheckFamily(ctx, ac, name); err != nil {
		t.Fatal(err)
	}
	if set, rec, err := s.ClaimTTLFrom(ctx, Claim{TTLFrom: "json:ttl", By: "worker run", Host: "pod-a", Now: t0}); err != nil || !rec || set.TTLFrom != "json:ttl" || !set.Since.Equal(t0) {
		t.Fatalf("first claim: %+v, %v", set, err)
	}
	if _, rec, err := s.ClaimTTLFrom(ctx, Claim{TTLFrom: "json:ttl", By: "worker run", Now: t0.Add(time.Hour)}); err != nil || rec {
		t.Fatalf("the same setting: %v", err)
	}
	_, _, err := s.ClaimTTLFrom(ctx, Claim{TTLFrom: "", By: "worker redrive", Now: t0.Add(time.Hour)})
	var mm *MismatchError
	if !errors.As(err, &mm) || !strings.Contains(err.Error(), `--ttl-from "json:ttl"`) || !strings.Contains(err.Error(), "no --ttl-from") ||
		!strings.Contains(err.Error(), ChangeFlag) || !strings.Contains(err.Error(), "pod-a") {
		t.Fatalf("another setting: %v", err)
	}
	if _, rec, err := s.ClaimTTLFrom(ctx, Claim{TTLFrom: "", Change: true, DryRun: true, Now: t0.Add(time.Hour)}); err != nil || rec {
		t.Fatalf("dry run: %v", err)
	}
	// A clock behind the one that recorded: still after it in the history.
	set, rec, err := s.ClaimTTLFrom(ctx, Claim{TTLFrom: "", Change: true, By: "worker run", Now: t0.Add(-time.Hour)})
	if err != nil || !rec || !set.Change || !set.Since.Equal(t0.Add(time.Millisecond)) {
		t.Fatalf("change: %+v, %v", set, err)
	}
	record, err := s.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rec := record; len(rec.TTLFrom) != 2 || rec.TTLFrom[0].TTLFrom != "json:ttl" || rec.TTLFrom[1].TTLFrom != "" || !rec.TTLFrom[1].Change {
		t.Fatalf("history: %+v", rec.TTLFrom)
	}
	if cur, _ := record.Current(); cur.TTLFrom != "" {
		t.Errorf("in force: %+v", cur)
	}
}

// Workers starting at once with different settings on a table without a
// record: one records its own, every other is refused, none records over
// it.
func TestFirstClaimsRace(t *testing.T) {
	s, _, _ := table(t)
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() {
			from := "json:ttl"
			if i%2 == 1 {
				from = "header:x-ttl"
			}
			_, _, errs[i] = s.ClaimTTLFrom(context.Background(), Claim{TTLFrom: from, By: "worker run", Now: t0})
		})
	}
	wg.Wait()
	rec, err := s.Read(context.Background())
	if err != nil || len(rec.TTLFrom) != 1 {
		t.Fatalf("%d settings recorded, want 1: %+v %v", len(rec.TTLFrom), rec.TTLFrom, err)
	}
	for i, err := range errs {
		from := "json:ttl"
		if i%2 == 1 {
			from = "header:x-ttl"
		}
		if (from == rec.TTLFrom[0].TTLFrom) != (err == nil) {
			t.Errorf("claim %d (%s) with %s recorded: %v", i, from, rec.TTLFrom[0].TTLFrom, err)
		}
	}
}

// A table without the family: CheckFamily says to run setup; Read finds
// no record.
func TestNoFamily(t *testing.T) {
	dc, ac := testenv.Clients(t)
	tgt := testenv.Table(t, ac, dc, time.Hour)
	err := CheckFamily(context.Background(), ac, tgt.Table)
	if !errors.Is(err, ErrNotSetUp) || !strings.Contains(err.Error(), "worker setup") {
		t.Errorf("CheckFamily: %v", err)
	}
	if rec, err := NewStore(dc, tgt.Table).Read(context.Background()); err != nil || len(rec.TTLFrom)+len(rec.Versions) != 0 {
		t.Errorf("Read: %+v, %v", rec, err)
	}
}

// Versions recorded keep the newest start and the newest sighting; one not
// seen for a month is deleted when another is recorded, unless it is the
// one started last.
func TestRecordVersion(t *testing.T) {
	s, _, _ := table(t)
	ctx := context.Background()
	month := 31 * 24 * time.Hour
	steps := []struct {
		v            string
		started, now time.Time
	}{
		{"old", t0.Add(-2 * month), t0.Add(-month - time.Hour)},
		{"v1", t0.Add(-time.Hour), t0.Add(-time.Hour)},
		{"v1", t0.Add(-2 * time.Hour), t0}, // a pod that started earlier: the later start stays
		{"v2", t0.Add(-time.Minute), t0.Add(-time.Minute)},
	}
	for _, st := range steps {
		if err := s.RecordVersion(ctx, st.v, st.started, st.now); err != nil {
			t.Fatal(err)
		}
	}
	rec, err := s.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range rec.Versions {
		got = append(got, v.Version+"@"+v.Started.Format(time.Kitchen)+"/"+v.Seen.Format(time.Kitchen))
	}
	want := "v1@11:00AM/12:00PM v2@11:59AM/11:59AM"
	if strings.Join(got, " ") != want {
		t.Errorf("versions %v, want %s", got, want)
	}
}

// The rule of CheckVersion, through a rollout, a rollback, a removed
// canary and stopped workers.
func TestCheckVersion(t *testing.T) {
	v := func(name string, started, seen time.Duration) Version {
		return Version{Version: name, Started: t0.Add(started), Seen: t0.Add(seen)}
	}
	for _, c := range []struct {
		name     string
		versions []Version // by Started
		file     string
		want     string
	}{
		{"nothing recorded", nil, "a", NotRecorded},
		{"one version", []Version{v("a", -time.Hour, -time.Minute)}, "a", Matches},
		{"another", []Version{v("a", -time.Hour, -time.Minute)}, "b", Differs},
		{"rollout, new", []Version{v("a", -time.Hour, 0), v("b", -time.Minute, 0)}, "b", Matches},
		{"rollout, old", []Version{v("a", -time.Hour, 0), v("b", -time.Minute, 0)}, "a", Differs},
		{"rolled back", []Version{v("b", -time.Hour, -time.Minute), v("a", -time.Minute, 0)}, "a", Matches},
		{"canary gone", []Version{v("a", -time.Hour, 0), v("c", -time.Hour/2, -time.Hour/3)}, "a", Matches},
		{"workers stopped", []Version{v("a", -48*time.Hour, -47*time.Hour), v("b", -24*time.Hour, -23*time.Hour)}, "b", Matches},
		{"workers stopped, older", []Version{v("a", -48*time.Hour, -47*time.Hour), v("b", -24*time.Hour, -23*time.Hour)}, "a", Differs},
	} {
		got := CheckVersion(State{Versions: c.versions}, c.file, t0)
		if got.Outcome != c.want {
			t.Errorf("%s: %s, want %s (%s)", c.name, got.Outcome, c.want, got)
		}
		if !strings.Contains(got.String(), c.file) {
			t.Errorf("%s: %q does not name the file's version", c.name, got)
		}
	}
}

// A worker's recorder records its version at start, at once on a reload's
// signal (not at the next poll), and, on the way out, a reload no signal
// announced.
func TestRecorderFollowsReloads(t *testing.T) {
	s, _, _ := table(t)
	r := NewRecorder(s, slog.New(slog.DiscardHandler))
	var mu sync.Mutex
	version := "v1"
	current := func() string { mu.Lock(); defer mu.Unlock(); return version }
	set := func(v string) { mu.Lock(); version = v; mu.Unlock() }
	newest := func() string {
		rec, err := s.Read(context.Background())
		if err != nil || len(rec.Versions) == 0 {
			return fmt.Sprint(err)
		}
		return rec.Versions[len(rec.Versions)-1].Version
	}
	if err := r.Record(context.Background(), current()); err != nil || newest() != "v1" {
		t.Fatalf("at start: %v, newest %s", err, newest())
	}
	ctx, cancel := context.WithCancel(context.Background())
	wake := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx, time.Hour, current, wake) }()
	time.Sleep(5 * time.Millisecond) // v2 starts after v1, to the millisecond
	set("v2")
	wake <- struct{}{}
	testenv.Eventually(t, 5*time.Second, func() (bool, string) { return newest() == "v2", "newest " + newest() })
	time.Sleep(5 * time.Millisecond)
	set("v3") // no signal: recorded as the recorder stops
	cancel()
	<-done
	if newest() != "v3" {
		t.Errorf("after stopping: newest %s, want v3", newest())
	}
}
